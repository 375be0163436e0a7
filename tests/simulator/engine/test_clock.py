"""The virtual clock orders events by time, then by scheduling order."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from teesim.engine.clock import HeapClock, VirtualClock


def test_events_run_in_time_then_fifo_order() -> None:
    clock = VirtualClock()
    seen: list[tuple[float, str]] = []
    clock.at(5.0, lambda: seen.append((clock.now, "b")))
    clock.at(1.0, lambda: seen.append((clock.now, "a")))
    clock.at(5.0, lambda: seen.append((clock.now, "c")))
    clock.at(1.0, lambda: clock.after(2.0, lambda: seen.append((clock.now, "nested"))))
    clock.run(10.0)
    assert seen == [(1.0, "a"), (3.0, "nested"), (5.0, "b"), (5.0, "c")]
    assert clock.now == 10.0
    assert clock.events_run == 5


def test_every_stops_at_until_and_run_stops_at_the_horizon() -> None:
    clock = VirtualClock()
    ticks: list[float] = []
    clock.every(2.0, lambda: ticks.append(clock.now), start=1.0, until=7.0)
    clock.run(100.0)
    assert ticks == [1.0, 3.0, 5.0, 7.0]
    later = VirtualClock()
    later.at(50.0, lambda: ticks.append(-1))
    later.run(10.0)
    assert later.pending() == 1
    with pytest.raises(ValueError, match="interval must be positive"):
        clock.every(0, lambda: None)


# A schedule: at each of a few instants, callbacks that schedule more callbacks (some at the very
# instant being run, some in the past, which means now) up to a depth.
delays = st.lists(st.sampled_from([0.0, -1.0, 0.5, 1.0, 1.0, 2.0, 2.5]), max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    roots=st.lists(st.tuples(st.sampled_from([0.0, 1.0, 1.0, 2.0, 3.5]), delays), max_size=12),
    periodic=st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.0, 1.0])), max_size=3),
    until=st.sampled_from([2.0, 3.0, 6.0]),
)
def test_calendar_runs_events_in_the_heap_clocks_order(roots, periodic, until) -> None:
    def trace(clock: VirtualClock) -> list[tuple[float, str]]:
        seen: list[tuple[float, str]] = []

        def event(name: str, children: list[float], depth: int) -> None:
            seen.append((clock.now, name))
            if depth < 2:
                for i, delay in enumerate(children):
                    clock.after(delay, partial(event, f"{name}.{i}", children, depth + 1))

        for i, (when, children) in enumerate(roots):
            clock.at(when, partial(event, f"r{i}", children, 0))
        for i, (interval, start) in enumerate(periodic):
            clock.every(interval, partial(seen.append, ("tick", f"p{i}")), start=start, until=5.0)
        clock.run(until, lambda now: seen.append((now, "after")))
        return seen

    calendar, heap = VirtualClock(), HeapClock()
    assert trace(calendar) == trace(heap)
    assert (calendar.events_run, calendar.pending(), calendar.now) == (heap.events_run, heap.pending(), heap.now)


def test_an_exception_leaves_the_rest_of_the_queue() -> None:
    clock = VirtualClock()
    seen: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    clock.at(1.0, lambda: seen.append("a"))
    clock.at(1.0, boom)
    clock.at(1.0, lambda: seen.append("b"))
    with pytest.raises(RuntimeError):
        clock.run(5.0)
    assert seen == ["a"] and clock.pending() == 1 and clock.events_run == 1
    clock.run(5.0)
    assert seen == ["a", "b"] and clock.pending() == 0
