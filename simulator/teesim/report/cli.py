"""``teesim run``: placeholder registration until the runner lands (see teesim.report.runner)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    return None
