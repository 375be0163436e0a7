"""The virtual clock orders events by time, then by scheduling order."""

from __future__ import annotations

import pytest
from teesim.cluster.clock import VirtualClock


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
