"""Metric helpers."""

from __future__ import annotations

from teesim.report.metrics import percentile
from teesim.strategies.observe import ResourceSnapshot


def _snap(**kw) -> ResourceSnapshot:
    base = dict(
        node="n",
        resource="tdx",
        capacity=10,
        current=4,
        vmi_resource="devices.kubevirt.io/tdx",
        advertised=8,
        published=8,
        requested=2,
        claims=0,
        nfd_advertised=10,
        charged={},
    )
    base.update(kw)
    return ResourceSnapshot(**base)


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0
    assert percentile([5.0], 99) == 5.0


def test_stranded_for_vmis_and_for_anyone() -> None:
    snap = _snap(published=3, requested=2)
    assert snap.truly_free == 6 and snap.schedulable == 1 and snap.stranded == 5
    # Kata could still take 4 of the 6 free keys: only 2 are stranded for every consumer.
    assert _snap(published=3, requested=2, kata_schedulable=4).stranded_for_all == 2
    # Kata is not limited by keys at all (no key in its overhead): nothing is stranded for everyone.
    assert snap.stranded_for_all == 0
