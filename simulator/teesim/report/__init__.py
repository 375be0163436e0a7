"""Scenario runs, metrics and reports (table, JSON, PNG timelines)."""
