"""A virtual clock: a discrete-event loop in seconds, deterministic for a given schedule.

Models wall-clock time only as an ordering of events; nothing sleeps. Events at the same instant
run in the order they were scheduled (a sequence number breaks ties), so a run depends only on its
inputs and seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

Callback = Callable[[], Any]


class VirtualClock:
    """Run callbacks in time order; ``now`` is the time of the event being run."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callback]] = []
        self._seq = 0
        self.events_run = 0

    def at(self, when: float, callback: Callback) -> None:
        """Schedule ``callback`` at absolute time ``when`` (never in the past)."""
        self._seq += 1
        heapq.heappush(self._queue, (max(when, self.now), self._seq, callback))

    def after(self, delay: float, callback: Callback) -> None:
        self.at(self.now + max(delay, 0.0), callback)

    def every(
        self, interval: float, callback: Callback, start: float | None = None, until: float | None = None
    ) -> None:
        """Run ``callback`` every ``interval`` seconds from ``start`` (default: now) until ``until``."""
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")

        def tick() -> None:
            callback()
            if until is None or self.now + interval <= until:
                self.after(interval, tick)

        self.at(self.now if start is None else start, tick)

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float, after_each: Callable[[float], None] | None = None) -> None:
        """Run every event up to and including ``until``; ``after_each(now)`` follows each one."""
        while self._queue and self._queue[0][0] <= until:
            when, _, callback = heapq.heappop(self._queue)
            self.now = when
            callback()
            self.events_run += 1
            if after_each is not None:
                after_each(when)
        self.now = until
