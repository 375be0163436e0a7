"""Arrivals are reproducible from the seed and follow the stream's shape."""

from __future__ import annotations

from teesim.cluster.pods import Consumer
from teesim.cluster.workload import Range, WorkloadSpec, generate_arrivals


def _specs() -> list[WorkloadSpec]:
    return [
        WorkloadSpec(Consumer.KATA, "tdx", Range(10, 20), rate=0.1),
        WorkloadSpec(Consumer.EXTERNAL, "snp", Range(5, 5), at=100.0, count=4, spread=10.0, node="n"),
    ]


def test_same_seed_same_arrivals_other_seed_differs() -> None:
    first = generate_arrivals(_specs(), 5, 1000.0)
    assert first == generate_arrivals(_specs(), 5, 1000.0)
    assert first != generate_arrivals(_specs(), 6, 1000.0)
    assert [a.time for a in first] == sorted(a.time for a in first)
    assert [a.seq for a in first] == list(range(len(first)))


def test_stream_shapes() -> None:
    arrivals = generate_arrivals(_specs(), 5, 1000.0)
    kata = [a for a in arrivals if a.consumer is Consumer.KATA]
    burst = [a for a in arrivals if a.consumer is Consumer.EXTERNAL]
    # Poisson at 0.1/s over 1000 s: 100 expected; 60..140 is beyond 4 standard deviations.
    assert 60 <= len(kata) <= 140
    assert all(10 <= a.duration <= 20 for a in kata)
    assert len(burst) == 4
    assert all(100 <= a.time <= 110 and a.duration == 5 and a.resource == "sev_es" for a in burst)
    assert all(a.node == "n" for a in burst)
