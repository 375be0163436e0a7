"""``python -m teesim.plugins.reconciling`` as a real process: the kernel model writes the node's misc
files, the real-socket kubelet allocates, external VMs take keys."""

from __future__ import annotations

import pytest
from teesim.grpc_run import PODS_SLICE, GrpcNode, unhealthy_count
from teesim.kubelet.devicemanager import PodRef
from teesim.kubelet.server import Kubelet

RES = "devices.kubevirt.io/tdx"
WAIT = 10.0
POLL = 0.05

pytestmark = pytest.mark.slow


def _unhealthy(k: Kubelet) -> set[str]:
    return set(k.snapshot()[RES]["unhealthy"])


def _admit_vm(node: GrpcNode, name: str) -> list[str]:
    """A KubeVirt VMI: the kubelet allocates a device, then the guest starts and the kernel charges it."""
    pod = PodRef("default", f"virt-launcher-{name}")
    node.kubelet.allocate(pod, "compute", RES, 1)
    node.start_guest(PODS_SLICE, name)
    return node.kubelet.device_manager.pod_devices(pod)["compute"][RES]


def test_reconciling_marks_exactly_the_external_keys_and_never_an_allocated_device(node, start_plugin):
    start_plugin(node, "reconciling")
    own = _admit_vm(node, "a") + _admit_vm(node, "b")
    assert own == ["tdx-000", "tdx-001"]
    # Own VMs are charged in the kernel but are the plugin's own: nothing is foreign yet.
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) > 0, 4 * POLL)

    external = [node.start_guest() for _ in range(3)]
    assert node.current() == 5
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 3, WAIT)
    assert _unhealthy(node.kubelet) == {"tdx-005", "tdx-006", "tdx-007"}
    assert node.kubelet.device_manager.allocatable() == {RES: 5}, "capacity minus foreign keys"

    # More foreign keys than free devices: every free device goes, the allocated ones never do.
    external += [node.start_guest() for _ in range(3)]
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 6, WAIT)
    assert not set(own) & _unhealthy(node.kubelet)

    for guest in external:
        node.stop_guest(guest)
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 0, WAIT)
    assert node.kubelet.device_manager.allocatable() == {RES: 8}


def test_reconciling_plugin_reregisters_after_kubelet_restart(node, start_plugin):
    proc = start_plugin(node, "reconciling")
    vm = _admit_vm(node, "a")
    node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    registrations = node.kubelet.registrations

    node.kubelet.restart()
    assert node.kubelet.wait_for(lambda k: k.registrations > registrations and unhealthy_count(k, RES) == 1, WAIT)
    assert proc.alive()
    assert node.kubelet.device_manager.capacity() == {RES: 8}
    assert vm[0] not in _unhealthy(node.kubelet), "the checkpointed allocation is still its own"


def test_plugin_crash_makes_its_devices_unhealthy(node, start_plugin):
    proc = start_plugin(node, "reconciling")
    proc.kill()
    assert node.kubelet.wait_for(lambda k: k.device_manager.allocatable().get(RES) == 0, WAIT)
    assert node.kubelet.device_manager.capacity() == {RES: 8}


def test_reconciling_on_an_old_kernel_sums_the_children(start_plugin):
    with GrpcNode.create(capacity=8, profile="old") as node:
        proc = start_plugin(node, "reconciling")
        node.start_guest()
        node.start_guest()
        assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 2, WAIT)
        proc.stop()  # before its kubelet goes away


def test_unreadable_misc_current_keeps_the_last_verdict(node, start_plugin):
    start_plugin(node, "reconciling")
    node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    node.writer.break_file("sys/fs/cgroup/misc.current")
    node.start_guest()  # the kernel charges it, but nobody can read misc.current now
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) != 1, 6 * POLL)
    node.writer.repair_file("sys/fs/cgroup/misc.current")
    node.writer.sync(node.node.files())
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 2, WAIT)
