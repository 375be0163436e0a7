"""NodeResourcesFit (kubernetes v1.34 pkg/scheduler/framework/plugins/noderesources): the filter on every
resource, overhead included, and the LeastAllocated score on CPU and memory."""

from __future__ import annotations

import pytest
from teesim.cluster.pods import Guest, kata_pod, vmi_pod
from teesim.cluster.scheduler import NodeView, choose_node, fits, score, sum_needs


def test_kata_overhead_is_part_of_the_need() -> None:
    pod = kata_pod("k", Guest.TDX, 0.0, 1.0, 10.0)
    assert pod.runtime_class == "kata-qemu-tdx"
    # No extended resource in the container; CPU and memory from the container and the RuntimeClass
    # overhead (kata-deploy 4.1.0: 1 CPU, 2048Mi).
    assert pod.requests == {"cpu": 1000, "memory": 2048}
    assert pod.need() == {"cpu": 2000, "memory": 4096, "tdx.intel.com/keys": 1}
    snp = kata_pod("s", Guest.SNP, 0.0, 1.0, 10.0)
    assert snp.need()["sev-snp.amd.com/esids"] == 1
    assert snp.misc_resource == "sev_es"
    # kata-deploy without NFD: no key in the overhead at all.
    assert kata_pod("n", Guest.TDX, 0.0, 1.0, 1.0, overhead={}).need() == {"cpu": 2000, "memory": 4096}
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
    assert need == {"cpu": 200, "memory": 4346, "devices.kubevirt.io/tdx": 1}
    need = {"devices.kubevirt.io/tdx": 1}
    assert fits(NodeView("a", {"devices.kubevirt.io/tdx": 2}, {"devices.kubevirt.io/tdx": 1}), need)
    assert not fits(NodeView("a", {"devices.kubevirt.io/tdx": 2}, {"devices.kubevirt.io/tdx": 2}), need)
    assert not fits(NodeView("a", {"tdx.intel.com/keys": 9}, {}), need)
    assert not fits(NodeView("a", {"devices.kubevirt.io/tdx": 9}, {}, schedulable=False), need)


def test_least_allocated_scores_cpu_and_memory_not_free_keys() -> None:
    """least_allocated.go: (allocatable - requested) * 100 / allocatable per resource, the pod
    included, integer arithmetic; cpu and memory weight 1 each (the default NodeResourcesFitArgs)."""
    keys = "tdx.intel.com/keys"
    need = {"cpu": 2000, "memory": 4096, keys: 1}
    compute = {"cpu": 16_000, "memory": 65_536}
    # b has more free keys but less free CPU and memory: the default scheduler does not look at keys.
    nodes = [
        NodeView("b", {**compute, keys: 10}, {"cpu": 8000, "memory": 32_768, keys: 1}),
        NodeView("a", {**compute, keys: 10}, {"cpu": 2000, "memory": 4096, keys: 8}),
    ]
    # a: cpu (16000-4000)*100//16000 = 75, memory (65536-8192)*100//65536 = 87 -> 81; b: 37, 43 -> 40.
    assert [score(n, need) for n in nodes] == [40, 81]
    assert choose_node(need, nodes) == "a"
    assert choose_node({**need, keys: 3}, nodes) == "b", "the filter still needs the keys"
    over = NodeView("o", compute, {"cpu": 15_000, "memory": 0})
    assert score(over, {"cpu": 2000, "memory": 0}) == 50, "cpu over allocatable scores 0, memory 100"
    assert score(NodeView("z", {}, {}), need) == 0, "a node listing neither resource scores 0"


def test_equal_scores_go_to_the_fewest_pods_then_by_name() -> None:
    nodes = [NodeView(n, {"cpu": 1000}, {}, pods=p) for n, p in (("c", 1), ("b", 1), ("a", 2))]
    assert choose_node({"cpu": 100}, nodes) == "b"
    assert sum_needs([{"x": 1}, {"x": 2, "y": 1}]) == {"x": 3, "y": 1}


def test_pods_that_need_no_tee_resource_spread_by_pod_count() -> None:
    nodes = [NodeView("a", {}, {}, pods=3), NodeView("b", {}, {}, pods=1), NodeView("c", {}, {}, pods=1)]
    assert choose_node({}, nodes) == "b"
