"""Metric helpers."""

from __future__ import annotations

from teesim.report.metrics import percentile, reflected
from teesim.strategies.simulation import ResourceSnapshot


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


def test_reflected_and_stranded() -> None:
    # 4 charged, 2 of them the VMIs' own: 2 keys used by others, so 8 should be advertised.
    assert reflected(_snap())
    assert not reflected(_snap(advertised=10))
    # Others exceed what is free: the plugin can only keep its own allocated devices healthy.
    assert reflected(_snap(current=10, requested=3, advertised=3))
    snap = _snap(published=3, requested=2)
    assert snap.truly_free == 6 and snap.schedulable == 1 and snap.stranded == 5
