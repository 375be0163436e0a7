"""A virtual clock: a discrete-event loop in seconds, deterministic for a given schedule.

Models wall-clock time only as an ordering of events; nothing sleeps. Events at the same instant
run in the order they were scheduled (a sequence number breaks ties), so a run depends only on its
inputs and seed.

The queue is a binary heap of ``(when, seq, callback)`` tuples: tuples compare in C, so a push or a
pop costs a few hundred nanoseconds even with thousands of nodes' timers queued. A periodic task
(:meth:`VirtualClock.every`) keeps exactly one entry in the heap, re-armed by its own tick, and the
loop keeps its counters in locals. Nothing is ever cancelled: a callback whose reason has gone (a
pod that failed before its launch) checks its state and returns, which is cheaper than finding and
removing a heap entry.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from itertools import count
from typing import Any

Callback = Callable[[], Any]


class VirtualClock:
    """Run callbacks in time order; ``now`` is the time of the event being run."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callback]] = []
        self._seq = count(1)
        self.events_run = 0

    def at(self, when: float, callback: Callback) -> None:
        """Schedule ``callback`` at absolute time ``when`` (never in the past)."""
        now = self.now
        heappush(self._queue, (when if when > now else now, next(self._seq), callback))

    def after(self, delay: float, callback: Callback) -> None:
        now = self.now
        heappush(self._queue, (now + delay if delay > 0 else now, next(self._seq), callback))

    def every(
        self, interval: float, callback: Callback, start: float | None = None, until: float | None = None
    ) -> None:
        """Run ``callback`` every ``interval`` seconds from ``start`` (default: now) until ``until``."""
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        queue, seq = self._queue, self._seq
        last = float("inf") if until is None else until

        def tick() -> None:
            callback()
            # The next tick is now + interval, added once per tick exactly as a chain of after() calls
            # would, so a long run lands on the same float instants as before.
            when = self.now + interval
            if when <= last:
                heappush(queue, (when, next(seq), tick))

        self.at(self.now if start is None else start, tick)

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float, after_each: Callable[[float], None] | None = None) -> None:
        """Run every event up to and including ``until``; ``after_each(now)`` follows each one."""
        queue = self._queue
        ran = 0
        try:
            while queue and queue[0][0] <= until:
                when, _, callback = heappop(queue)
                self.now = when
                callback()
                ran += 1
                if after_each is not None:
                    after_each(when)
        finally:
            self.events_run += ran
        self.now = until
