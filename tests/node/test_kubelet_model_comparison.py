"""The real kubelet v1.37.2 against teesim's kubelet model: the same scenarios, step by step (issue 46, item 5).

scripts/kubelet_comparison.py runs them on one TDX node with 3 keys:

* ``reconciling``: teesim's reconciling plugin (it marks the devices of keys used outside Kubernetes Unhealthy), a
  VM outside Kubernetes, three VMIs, the plugin killed, a VMI bound by name while it is dead, the plugin started
  again, the kubelet restarted with VMIs running;
* ``double-pool``: KubeVirt v1.9.0's own TDX plugin and NFD's keys for Kata, a VM outside Kubernetes, Kata pods and
  VMIs, two of them admitted by their pool and failing to launch in the kernel, then a kubelet restart after which
  KubeVirt's plugin does not register again (kubevirt/kubevirt#17122) and a new VMI waits;
* ``kernel-pool``: the collection's node agent (tee-key-agent, ``tee_key_pool_mode: kernel``) keeps one pool at
  what the kernel has free; a VM outside Kubernetes shrinks it and a VMI waits instead of failing.

After each step every pod's phase, the kubelet's admission rejections with their messages, the devices held per pod
(the real kubelet's checkpoint), the pod-resources answers (List, GetAllocatableResources), failed launches, the
Node's capacity and allocatable and ``misc.current`` must be the model's, or a difference docs/simulator.md explains.
"""

from __future__ import annotations

import pytest
from kubelet_comparison import SCENARIOS, compare


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_real_kubelet_decides_as_teesims_model(plane, node_factory, name) -> None:
    node = node_factory(**SCENARIOS[name].node())
    unexplained, not_shown = compare(plane, node, SCENARIOS[name])
    assert unexplained == [], "\n".join(
        f"{step}: {what}: model {model!r}, real {real!r}" for step, what, model, real in unexplained
    )
    # An explanation in docs/simulator.md holds only while the difference it explains still shows.
    assert not_shown == []
