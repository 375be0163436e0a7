"""``python -m teesim.plugins.reconciling`` as a real process: the kernel model writes the node's misc
files, the real-socket kubelet allocates, external VMs take keys."""

from __future__ import annotations

import time

import pytest
from teesim.grpc_run import PODS_SLICE, GrpcNode, unhealthy_count
from teesim.kubelet.devicemanager import PodRef
from teesim.kubelet.ratelimit import TokenBucket
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
    assert len(set(own)) == 2
    # Own VMs are charged in the kernel but are the plugin's own: nothing is foreign yet.
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) > 0, 4 * POLL)

    external = [node.start_guest() for _ in range(3)]
    assert node.current() == 5
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 3, WAIT)
    assert not set(own) & _unhealthy(node.kubelet)
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


def test_an_allocation_between_polls_is_never_published_unhealthy(node, processes):
    """The kubelet picks free devices in no particular order; the plugin learns them from Allocate."""
    proc = node.plugin("reconciling", poll_interval=0.5, extra=["--min-list-interval", "5"])
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    for _ in range(6):
        node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 6, WAIT)
    # Two devices are free; List answers are 5 s old, so only Allocate tells the plugin what follows.
    # Without it, the kernel's 8 keys against no known allocation would hide all 8 devices.
    held = _admit_vm(node, "a") + _admit_vm(node, "b")
    for _ in range(4):
        assert not set(held) & _unhealthy(node.kubelet)
        node.kubelet.wait_for(lambda k: False, 0.3)
    assert node.kubelet.device_manager.allocated_marked_unhealthy == 0


def test_the_plugin_stays_within_the_pod_resources_rate_limit(node, processes):
    limiter = node.kubelet.pod_resources_limiter
    proc = node.plugin("reconciling", poll_interval=0.01)  # 100 polls a second, the whole node budget
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    before = limiter.allowed + limiter.rejected
    # The kernel changes all the time (a guest every 10 ms): every poll wants a List.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        node.stop_guest(node.start_guest())
        time.sleep(0.01)
    calls = limiter.allowed + limiter.rejected - before
    assert 5 <= calls <= 25, f"{calls} List calls in 2 s: the plugin must keep to --min-list-interval 0.1"
    assert limiter.rejected == 0


def test_a_quiet_node_costs_a_read_per_poll_and_a_list_per_refresh(node, processes):
    """Nothing changes: the plugin reads misc.current and stops there, asking the kubelet only every
    --list-refresh (what ends without ever charging a key is seen within that)."""
    limiter = node.kubelet.pod_resources_limiter
    proc = node.plugin("reconciling", poll_interval=0.02, extra=["--list-refresh", "1"])
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    first, before = proc.stats(), limiter.allowed + limiter.rejected
    node.kubelet.wait_for(lambda k: False, 3.0)
    second, calls = proc.stats(), limiter.allowed + limiter.rejected - before
    polls = second["polls"] - first["polls"]
    quiet = second["quiet_polls"] - first["quiet_polls"]
    assert 1 <= calls <= 5 and second["lists"] - first["lists"] == calls, calls
    assert polls > 20 and quiet >= polls - calls, (polls, quiet)
    assert second["cpu_s"] >= first["cpu_s"] > 0 and second["pid"] == proc.process.pid
    # A change is still seen at the next poll, with a List.
    node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)


def test_the_plugin_says_so_when_the_kubelet_throttles_it(node, processes):
    node.kubelet.pod_resources_limiter = TokenBucket(qps=2, burst=1)
    proc = node.plugin("reconciling", poll_interval=0.05, extra=["--min-list-interval", "0.05"])
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    # The kernel keeps changing, so every poll wants a List: 20 a second against a budget of 2.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        node.stop_guest(node.start_guest())
        time.sleep(0.01)
    node.start_guest()
    # Throttled polls keep the last list, the rest still reconcile.
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    assert node.kubelet.pod_resources_limiter.rejected > 0
    output = proc.stop()
    assert "the kubelet refused pod-resources List (rejected by rate limit)" in output
    assert "refusals so far" in output
