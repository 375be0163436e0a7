"""The real kubelet v1.37.2 against teesim's kubelet model: the same scenario, step by step (issue 46, item 5).

scripts/kubelet_comparison.py runs it: one TDX node with 3 keys, teesim's reconciling plugin (it marks the devices
of keys used outside Kubernetes Unhealthy), a VM outside Kubernetes, three VMIs, the plugin killed, a VMI bound by
name while it is dead, the plugin started again, the kubelet restarted with VMIs running. After each step every
pod's phase, the kubelet's admission rejections with their messages, the devices held per pod (the real kubelet's
checkpoint), the pod-resources answers (List, GetAllocatableResources), failed launches, the Node's capacity and
allocatable and ``misc.current`` must be the model's, or a difference docs/simulator.md explains.
"""

from __future__ import annotations

from kubelet_comparison import KEYS, NODE, compare

# (step, what): each explained in docs/simulator.md, "The real kubelet against the model". None yet.
EXPLAINED: set[tuple[str, str]] = set()


def test_the_real_kubelet_decides_as_teesims_model(plane, node_factory) -> None:
    node = node_factory(name=NODE, capacity={"tdx": KEYS})
    differences = compare(plane, node)
    unexplained = [d for d in differences if (d[0], d[1]) not in EXPLAINED]
    assert unexplained == [], "\n".join(
        f"{step}: {what}: model {model!r}, real {real!r}" for step, what, model, real in unexplained
    )
