"""NodeResourcesFit for extended resources, overhead included, and the least-allocated choice."""

from __future__ import annotations

import pytest
from teesim.cluster.pods import Guest, kata_pod, vmi_pod
from teesim.cluster.scheduler import NodeView, choose_node, fits, sum_needs


def test_kata_overhead_is_part_of_the_need() -> None:
    pod = kata_pod("k", Guest.TDX, 0.0, 1.0, 10.0)
    assert pod.runtime_class == "kata-qemu-tdx"
    assert pod.requests == {}
    assert pod.need() == {"tdx.intel.com/keys": 1}
    snp = kata_pod("s", Guest.SNP, 0.0, 1.0, 10.0)
    assert snp.need() == {"sev-snp.amd.com/esids": 1}
    assert snp.misc_resource == "sev_es"
    # kata-deploy without NFD: no key in the overhead at all.
    assert kata_pod("n", Guest.TDX, 0.0, 1.0, 1.0, overhead={}).need() == {}
    with pytest.raises(ValueError, match="SNP, not SEV-ES"):
        kata_pod("e", Guest.SEV_ES, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="TDX or SNP"):
        kata_pod("p", Guest.SEV, 0.0, 1.0, 1.0)


def test_dra_backed_names_fit_on_free_slice_devices_only_where_allocatable_lacks_them() -> None:
    need = {"tdx.intel.com/keys": 1}
    assert fits(NodeView("a", {}, {}, dynamic={"tdx.intel.com/keys": 1}), need)
    assert not fits(NodeView("a", {}, {}, dynamic={"tdx.intel.com/keys": 0}), need)
    # A name the node advertises in allocatable is accounted there, whatever DRA says.
    assert not fits(NodeView("a", {"tdx.intel.com/keys": 1}, {"tdx.intel.com/keys": 1}, dynamic=need), need)


def test_fit_counts_requests_of_bound_pods_and_unknown_resources_are_zero() -> None:
    need = vmi_pod("v", Guest.TDX, {"devices.kubevirt.io/tdx": 1}, 0.0, 1.0, 1.0).need()
    assert fits(NodeView("a", {"devices.kubevirt.io/tdx": 2}, {"devices.kubevirt.io/tdx": 1}), need)
    assert not fits(NodeView("a", {"devices.kubevirt.io/tdx": 2}, {"devices.kubevirt.io/tdx": 2}), need)
    assert not fits(NodeView("a", {"tdx.intel.com/keys": 9}, {}), need)
    assert not fits(NodeView("a", {"devices.kubevirt.io/tdx": 9}, {}, schedulable=False), need)


def test_least_allocated_node_wins_ties_by_name() -> None:
    need = {"tdx.intel.com/keys": 1}
    nodes = [
        NodeView("b", {"tdx.intel.com/keys": 10}, {"tdx.intel.com/keys": 2}),
        NodeView("a", {"tdx.intel.com/keys": 10}, {"tdx.intel.com/keys": 5}),
        NodeView("c", {"tdx.intel.com/keys": 10}, {"tdx.intel.com/keys": 2}),
    ]
    assert choose_node(need, nodes) == "b"
    assert choose_node({"tdx.intel.com/keys": 9}, nodes) is None
    assert sum_needs([{"x": 1}, {"x": 2, "y": 1}]) == {"x": 3, "y": 1}


def test_pods_that_need_no_tee_resource_spread_by_pod_count() -> None:
    nodes = [NodeView("a", {}, {}, pods=3), NodeView("b", {}, {}, pods=1), NodeView("c", {}, {}, pods=1)]
    assert choose_node({}, nodes) == "b"
