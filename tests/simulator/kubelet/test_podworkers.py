"""The kubelet's retry of a pod whose sandbox could not be created."""

from __future__ import annotations

import random

from teesim.kubelet.podworkers import sandbox_retry_at


def test_retries_come_10_to_15_s_later_on_a_sync_tick_without_doubling():
    rng = random.Random(3)
    delays = []
    now = 100.25
    for _ in range(200):
        at = sandbox_retry_at(now, rng)
        assert at == int(at), "the sync loop ticks once a second"
        delays.append(at - now)
        now = at + 0.25
    assert min(delays) >= 10.0 and max(delays) <= 16.0
    # No exponential growth: the last retries wait as long as the first ones.
    assert sum(delays[-50:]) / 50 < 14.0
    assert max(delays) - min(delays) > 3.0, "jittered, not a fixed period"
