"""NodeResourcesFit for extended resources, overhead included, and the least-allocated choice."""

from __future__ import annotations

from teesim.cluster.pods import kata_pod, vmi_pod
from teesim.cluster.scheduler import NodeView, choose_node, fits, sum_needs


def test_kata_overhead_is_part_of_the_need() -> None:
    pod = kata_pod("k", "tdx", 0.0, 1.0, 10.0)
    assert pod.runtime_class == "kata-qemu-tdx"
    assert pod.requests == {}
    assert pod.need() == {"tdx.intel.com/keys": 1}
    snp = kata_pod("s", "sev_es", 0.0, 1.0, 10.0)
    assert snp.need() == {"sev-snp.amd.com/esids": 1}


def test_fit_counts_requests_of_bound_pods_and_unknown_resources_are_zero() -> None:
    need = vmi_pod("v", "tdx", "devices.kubevirt.io/tdx", 0.0, 1.0, 1.0).need()
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
