"""The paced clock: instants run when the (scripted) wall clock reaches them, news in between."""

from __future__ import annotations

import threading

import pytest
from teesim.serve.clock import PacedClock


class ScriptedTime:
    """A wall clock that moves only when the clock waits: the test never depends on speed."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class ScriptedCondition:
    """A condition whose wait() advances the scripted time; ``news_at`` delivers news mid-wait."""

    def __init__(self, time: ScriptedTime, hooks: Hooks, news_at: float | None = None):
        self._lock = threading.RLock()
        self.time = time
        self.hooks = hooks
        self.news_at = news_at
        self.waits: list[float] = []

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        start = self.time.now
        if self.news_at is not None and start < self.news_at < start + timeout:
            self.time.now = self.news_at
            self.news_at = None
            self.hooks.news = True
            return True
        self.time.now = start + timeout
        return False


class Hooks:
    def __init__(self) -> None:
        self.news = False
        self.log: list[tuple[str, float]] = []
        self.clock: PacedClock | None = None

    def before(self) -> None:
        self.news = False

    def has_news(self) -> bool:
        return self.news

    def settle(self, now: float, after_each) -> None:
        self.log.append(("settle", now))


def make(news_at: float | None = None) -> tuple[PacedClock, Hooks, ScriptedTime, ScriptedCondition]:
    time, hooks = ScriptedTime(), Hooks()
    cond = ScriptedCondition(time, hooks, news_at)
    clock = PacedClock(cond, time.monotonic)  # type: ignore[arg-type]
    clock.hooks = hooks
    return clock, hooks, time, cond


def test_instants_run_at_their_wall_time_in_order():
    clock, _hooks, time, _ = make()
    ran: list[tuple[str, float, float]] = []
    clock.at(2.0, lambda: ran.append(("b", clock.now, time.now - clock.t0)))
    clock.at(0.5, lambda: ran.append(("a", clock.now, time.now - clock.t0)))
    clock.at(2.0, lambda: ran.append(("c", clock.now, time.now - clock.t0)))
    clock.run(3.0)
    assert ran == [("a", 0.5, 0.5), ("b", 2.0, 2.0), ("c", 2.0, 2.0)]
    assert clock.now == 3.0
    assert clock.events_run == 3
    assert clock.lag == [0.0, 0.0]


def test_news_between_instants_settles_at_the_time_it_came():
    clock, hooks, _, _ = make(news_at=101.25)
    clock.at(2.0, lambda: None)
    seen: list[float] = []
    clock.run(3.0, after_each=seen.append)
    # The news at wall 1.25 s is settled at virtual 1.25, then the instant at 2.0 runs.
    assert ("settle", 1.25) in hooks.log
    assert hooks.log.index(("settle", 1.25)) < hooks.log.index(("settle", 2.0))
    assert clock.wakeups == 1
    assert seen == [1.25, 2.0]


def test_a_late_instant_runs_at_its_virtual_time_and_its_lag_is_kept():
    clock, _, time, _ = make()
    stamps: list[float] = []

    def slow() -> None:
        time.now += 0.7  # the callback itself took 0.7 s of wall time
        stamps.append(clock.now)

    clock.at(1.0, slow)
    clock.at(1.5, lambda: stamps.append(clock.now))
    clock.run(2.0)
    assert stamps == [1.0, 1.5]
    assert clock.lag[1] == pytest.approx(0.2)


def test_run_without_hooks_is_refused():
    clock = PacedClock(threading.Condition())
    with pytest.raises(RuntimeError, match="hooks"):
        clock.run(1.0)
