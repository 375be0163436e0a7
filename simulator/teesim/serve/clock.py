"""A :class:`VirtualClock` whose instants run when the wall clock reaches them.

Between two instants the clock waits on the kubelet's condition variable: a plugin's
``ListAndWatch`` response (on one of the kubelet's gRPC threads) changes the device manager and
notifies it, and the engine then runs a pseudo-event at the wall time it arrived, so that the
scheduler and the report see the change when it happened, not at the next scheduled instant.

Every scenario callback runs with the kubelet's lock held (the lock of ``cond``): the gRPC threads
change the device manager only under that lock, so the simulation and the servers never run at once.
:meth:`Hooks.settle` may release it (admission calls the plugin's ``Allocate`` over gRPC).

An instant that runs late (the process was busy, the machine loaded) runs at its scheduled virtual
time; how late each ran is kept in :attr:`PacedClock.lag` so a report can say how much real time
jittered. Nothing here asserts on speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from teesim.engine.clock import SIGNAL_CHECK_S, VirtualClock

AfterEach = Callable[[float], None]


class Hooks(Protocol):
    def before(self) -> None:
        """Take in what the gRPC threads changed while the lock was free."""

    def has_news(self) -> bool:
        """Whether something outside the schedule happened (a device list, an admission to make)."""

    def settle(self, now: float, after_each: AfterEach | None) -> None:
        """After an event: write the kernel's files, make queued admissions, let the engine look."""


class PacedClock(VirtualClock):
    """Virtual seconds are wall seconds since :meth:`run` started (``monotonic`` is injectable)."""

    def __init__(self, cond: threading.Condition, monotonic: Callable[[], float] = time.monotonic):
        super().__init__()
        self.cond = cond
        self.monotonic = monotonic
        self.t0 = monotonic()
        self.lag: list[float] = []
        self.wakeups = 0
        self.hooks: Hooks | None = None

    def elapsed(self) -> float:
        """Wall seconds since the run started (since construction before that)."""
        return self.monotonic() - self.t0

    def run(self, until: float, after_each: AfterEach | None = None) -> None:
        if self.hooks is None:
            raise RuntimeError("PacedClock.run needs hooks (the serve engine sets them)")
        self.t0 = self.monotonic()
        instants = self._instants
        with self.cond:
            while True:
                target = instants[0] if instants and instants[0] <= until else until
                self._wait(target, after_each)
                if not instants or instants[0] > until:
                    break
                when = instants[0]
                self.lag.append(max(self.elapsed() - when, 0.0))
                # That one instant's bucket, as the virtual clock runs it; the hooks settle after each event.
                VirtualClock.run(self, when, partial(self._after_event, after_each))
        self.now = until

    def _wait(self, target: float, after_each: AfterEach | None) -> None:
        """Until the wall clock reaches ``target``, settling whatever the gRPC threads bring."""
        hooks = self.hooks
        assert hooks is not None
        while True:
            if hooks.has_news():
                # Never past the next instant: the virtual clock only moves forward.
                self.now = max(self.now, min(self.elapsed(), target))
                self.wakeups += 1
                hooks.before()
                # A pseudo-event: the scheduler and the report look at the node as it is now.
                if after_each is not None:
                    after_each(self.now)
                hooks.settle(self.now, after_each)
                continue
            left = target - self.elapsed()
            if left <= 0:
                return
            # In slices, as Kubelet.wait_for: a SIGTERM the kernel gave a gRPC thread wakes no wait of this one.
            self.cond.wait(min(left, SIGNAL_CHECK_S))

    def _after_event(self, after_each: AfterEach | None, now: float) -> None:
        if after_each is not None:
            after_each(now)
        assert self.hooks is not None
        self.hooks.settle(now, after_each)
