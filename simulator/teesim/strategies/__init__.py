"""The resource-tracking strategies (``double-pool`` is the baseline): which advertisers each node runs
(:mod:`~teesim.strategies.wiring`) and what each strategy's resources mean (:mod:`~teesim.strategies.observe`)."""

from __future__ import annotations

from teesim.strategies.base import BASELINE, STRATEGIES, Strategy, get_strategy

__all__ = ["BASELINE", "STRATEGIES", "Strategy", "get_strategy"]
