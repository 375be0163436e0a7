"""The static and reconciling plugins as real processes against the real-socket kubelet and a real
node directory whose misc files the kernel model writes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from teesim.grpc_run import PODS_SLICE, GrpcNode, PluginProcess, healthy_count, unhealthy_count
from teesim.kubelet.devicemanager import PodRef
from teesim.kubelet.server import Kubelet

RES = "devices.kubevirt.io/tdx"
WAIT = 10.0
POLL = 0.05

pytestmark = pytest.mark.slow


@pytest.fixture
def node() -> Iterator[GrpcNode]:
    with GrpcNode.create(capacity=8) as n:
        yield n


@pytest.fixture
def processes() -> Iterator[list[PluginProcess]]:
    started: list[PluginProcess] = []
    yield started
    for proc in started:
        proc.stop()


def _start(node: GrpcNode, processes: list[PluginProcess], kind: str, **kwargs) -> PluginProcess:
    proc = node.plugin(kind, poll_interval=POLL, **kwargs)
    processes.append(proc)
    ok = node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    assert ok, f"{kind} plugin did not register:\n{proc.stop()}"
    return proc


def _unhealthy(k: Kubelet) -> set[str]:
    return set(k.snapshot()[RES]["unhealthy"])


def _admit_vm(node: GrpcNode, name: str) -> list[str]:
    """A KubeVirt VMI: the kubelet allocates a device, then the guest starts and the kernel charges it."""
    pod = PodRef("default", f"virt-launcher-{name}")
    node.kubelet.allocate(pod, "compute", RES, 1)
    node.start_guest(PODS_SLICE, name)
    return node.kubelet.device_manager.pod_devices(pod)["compute"][RES]


def test_static_plugin_never_sees_external_vms(node, processes):
    _start(node, processes, "static")
    assert healthy_count(node.kubelet, RES) == 8
    for _ in range(3):
        node.start_guest()
    # Give the static plugin ample time to (not) react: it has no poll loop at all.
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) > 0, 0.5)
    assert node.kubelet.device_manager.allocatable() == {RES: 8}, "the flaw kubevirt-static has"


def test_static_plugin_refuses_a_host_without_misc(processes):
    with GrpcNode.create(capacity=8, profile="no-misc") as node:
        proc = node.plugin("static")
        processes.append(proc)
        assert proc.process.wait(timeout=WAIT) == 2
        assert "misc cgroup controller is not available" in proc.stop()


def test_reconciling_marks_exactly_the_external_keys_and_never_an_allocated_device(node, processes):
    _start(node, processes, "reconciling")
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


def test_reconciling_plugin_reregisters_after_kubelet_restart(node, processes):
    proc = _start(node, processes, "reconciling")
    vm = _admit_vm(node, "a")
    node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    registrations = node.kubelet.registrations

    node.kubelet.restart()
    assert node.kubelet.wait_for(lambda k: k.registrations > registrations and unhealthy_count(k, RES) == 1, WAIT)
    assert proc.alive()
    assert node.kubelet.device_manager.capacity() == {RES: 8}
    assert vm[0] not in _unhealthy(node.kubelet), "the checkpointed allocation is still its own"


def test_plugin_crash_makes_its_devices_unhealthy(node, processes):
    proc = _start(node, processes, "reconciling")
    proc.kill()
    assert node.kubelet.wait_for(lambda k: k.device_manager.allocatable().get(RES) == 0, WAIT)
    assert node.kubelet.device_manager.capacity() == {RES: 8}


def test_reconciling_on_an_old_kernel_sums_the_children(processes):
    with GrpcNode.create(capacity=8, profile="old") as node:
        proc = _start(node, processes, "reconciling")
        node.start_guest()
        node.start_guest()
        assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 2, WAIT)
        proc.stop()  # before its kubelet goes away


def test_unreadable_misc_current_keeps_the_last_verdict(node, processes):
    _start(node, processes, "reconciling")
    node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    node.writer.break_file("sys/fs/cgroup/misc.current")
    node.start_guest()  # the kernel charges it, but nobody can read misc.current now
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) != 1, 6 * POLL)
    node.writer.repair_file("sys/fs/cgroup/misc.current")
    node.writer.sync(node.node.files())
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 2, WAIT)
