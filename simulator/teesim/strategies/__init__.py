"""The four resource-tracking strategies, as in-process models on a virtual clock."""

from __future__ import annotations

from teesim.strategies.base import STRATEGIES, Strategy, get_strategy

__all__ = ["STRATEGIES", "Strategy", "get_strategy"]
