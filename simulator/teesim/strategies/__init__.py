"""The resource-tracking strategies (``double-pool`` is the baseline), as in-process models on a virtual clock."""

from __future__ import annotations

from teesim.strategies.base import BASELINE, STRATEGIES, Strategy, get_strategy

__all__ = ["BASELINE", "STRATEGIES", "Strategy", "get_strategy"]
