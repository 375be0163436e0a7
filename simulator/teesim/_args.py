"""Argument types for teesim's command lines: a number outside its range is refused by argparse (exit 2,
``argument --x: ...``) before anything starts, never taken as a wait of -5 s or NaN seconds.

``integer(1)`` is an integer >= 1; ``seconds(maximum=...)`` a finite number of seconds > 0; ``positive(maximum)`` a
finite number > 0 (a ratio such as ``teesim run --real-node --pace``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# Seeds feed random.Random through strings; any non-negative 64-bit value is a seed.
MAX_SEED = 2**63 - 1
# threading's waits overflow past about 292 years; no teesim wait means more than a day.
MAX_WAIT_S = 86_400.0


def integer(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[minimum, maximum]``."""
    shown = f"an integer from {minimum} to {maximum}" if maximum is not None else f"an integer >= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {shown}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected {shown}, got {text!r}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def seconds(maximum: float = MAX_WAIT_S) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds > 0 and <= ``maximum``."""
    return positive(maximum, f"a number of seconds > 0 and <= {maximum:g}", "seconds")


def positive(maximum: float, shown: str = "", name: str = "number") -> Callable[[str], float]:
    """An argparse type: a finite number > 0 and <= ``maximum`` (``shown`` says so in the error)."""
    shown = shown or f"a number > 0 and <= {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {shown}, got {text!r}") from None
        if not math.isfinite(value) or not 0 < value <= maximum:
            raise argparse.ArgumentTypeError(f"expected {shown}, got {text!r}")
        return value

    parse.__name__ = name
    return parse


seed = integer(0, MAX_SEED)
