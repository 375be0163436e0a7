"""A virtual clock: a discrete-event loop in seconds, deterministic for a given schedule.

Models wall-clock time only as an ordering of events; nothing sleeps. Events at the same instant
run in the order they were scheduled, so a run depends only on its inputs and seed.

The queue is a calendar: one FIFO bucket of callbacks per distinct instant, and a binary heap of
those instants. Scheduling order within an instant is the bucket's order, so the run order is
exactly (time, order of scheduling), as a heap of ``(time, sequence number, callback)`` gives, but
the work is different where it matters: a fleet's timers fall on the same instants (1,000 plugin
polls at every whole second), and appending to a bucket is O(1) where a heap push and pop cost
O(log n) tuple comparisons each. An event scheduled for the instant being run joins the end of its
bucket and runs in this same pass, after everything scheduled before it.

Nothing is ever cancelled: a callback whose reason has gone (a pod that failed before its launch)
checks its state and returns, which is cheaper than finding and removing an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

Callback = Callable[[], Any]


# Compiled (teesim._native), and so is its subclass teesim serve's PacedClock: compiled code does not see an
# interpreted subclass's overrides (tests/simulator/test_native_subclasses.py).

# How long a wait of the main thread may go without returning to Python code: the kernel may deliver SIGTERM to
# any thread, and Python runs its handler only in the main thread, when that thread next runs Python code.
SIGNAL_CHECK_S: float = 0.5


class VirtualClock:
    """Run callbacks in time order; ``now`` is the time of the event being run."""

    def __init__(self) -> None:
        self.now = 0.0
        self._instants: list[float] = []  # heap of the instants that have a bucket
        self._buckets: dict[float, list[Callback]] = {}
        self.events_run = 0

    def at(self, when: float, callback: Callback) -> None:
        """Schedule ``callback`` at absolute time ``when`` (never in the past)."""
        if not when > self.now:
            when = self.now
        bucket = self._buckets.get(when)
        if bucket is None:
            self._buckets[when] = [callback]
            heappush(self._instants, when)
        else:
            bucket.append(callback)

    def after(self, delay: float, callback: Callback) -> None:
        self.at(self.now + delay if delay > 0 else self.now, callback)

    def every(
        self, interval: float, callback: Callback, start: float | None = None, until: float | None = None
    ) -> None:
        """Run ``callback`` every ``interval`` seconds from ``start`` (default: now) until ``until``."""
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        last = float("inf") if until is None else until
        at = self.at

        def tick() -> None:
            callback()
            # now + interval once per tick, exactly as a chain of after() calls adds it.
            when = self.now + interval
            if when <= last:
                at(when, tick)

        self.at(self.now if start is None else start, tick)

    def pending(self) -> int:
        return sum(len(bucket) for bucket in self._buckets.values())

    def run(self, until: float, after_each: Callable[[float], None] | None = None) -> None:
        """Run every event up to and including ``until``; ``after_each(now)`` follows each one."""
        instants, buckets = self._instants, self._buckets
        ran = 0
        try:
            while instants and instants[0] <= until:
                when = instants[0]
                bucket = buckets[when]
                self.now = when
                done = 0
                try:
                    # The bucket may grow while it runs (events scheduled for this instant).
                    while done < len(bucket):
                        callback = bucket[done]
                        done += 1
                        callback()
                        ran += 1
                        if after_each is not None:
                            after_each(when)
                finally:
                    del bucket[:done]
                if not bucket:
                    heappop(instants)
                    del buckets[when]
        finally:
            self.events_run += ran
        self.now = until


class HeapClock(VirtualClock):
    """The same clock on one heap of ``(time, sequence number, callback)``: the reference the
    calendar is checked against (``Simulation(incremental=False)`` runs on it)."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[tuple[float, int, Callback]] = []
        self._seq = 0

    def at(self, when: float, callback: Callback) -> None:
        self._seq += 1
        heappush(self._queue, (max(when, self.now), self._seq, callback))

    def pending(self) -> int:
        return len(self._queue)

    def run(self, until: float, after_each: Callable[[float], None] | None = None) -> None:
        while self._queue and self._queue[0][0] <= until:
            when, _, callback = heappop(self._queue)
            self.now = when
            callback()
            self.events_run += 1
            if after_each is not None:
                after_each(when)
        self.now = until
