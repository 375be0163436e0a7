"""The pod-resources token bucket (100 QPS, burst 10, shared by every client of the node)."""

from __future__ import annotations

import pytest
from teesim.kubelet.ratelimit import DEFAULT_BURST, DEFAULT_QPS, TokenBucket


def test_defaults_are_upstreams():
    assert (DEFAULT_QPS, DEFAULT_BURST) == (100.0, 10)


def test_burst_then_refill_at_qps():
    bucket = TokenBucket()
    assert all(bucket.allow(0.0) for _ in range(10)), "starts full"
    assert not bucket.allow(0.0)
    assert bucket.allow(0.01), "one token per 10 ms"
    assert not bucket.allow(0.01)
    assert sum(bucket.allow(1.0) for _ in range(20)) == 10, "never more than the burst"
    assert bucket.rejected == 1 + 1 + 10


def test_other_clients_eat_the_refill():
    bucket = TokenBucket(background_qps=95.0)
    for _ in range(10):
        bucket.allow(0.0)
    # 1 s later only 5 tokens came back for this client.
    assert sum(bucket.allow(1.0) for _ in range(10)) == 5
    saturated = TokenBucket(background_qps=150.0)
    for _ in range(10):
        saturated.allow(0.0)
    assert not saturated.allow(100.0)


def test_time_going_backwards_adds_nothing():
    bucket = TokenBucket(qps=1, burst=1)
    assert bucket.allow(5.0)
    assert not bucket.allow(4.0)
    assert bucket.allow(6.0)


@pytest.mark.parametrize("kwargs", [{"qps": 0}, {"burst": 0}, {"background_qps": -1}])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        TokenBucket(**kwargs)
