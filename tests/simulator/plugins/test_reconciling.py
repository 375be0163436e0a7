"""``python -m teesim.plugins.reconciling`` as a real process: the kernel model writes the node's misc
files, the real-socket kubelet allocates, external VMs take keys."""

from __future__ import annotations

import time

import pytest
from teesim._collection import HostReader
from teesim.grpc_run import PODS_SLICE, GrpcNode, unhealthy_count
from teesim.kubelet.devicemanager import PodRef
from teesim.kubelet.ratelimit import TokenBucket
from teesim.kubelet.server import Kubelet
from teesim.plugins.reconciling import Reconciler

RES = "devices.kubevirt.io/tdx"
WAIT = 60.0  # a bound, not a timing: wait_for returns as soon as the condition holds, and a busy CI machine can be slow
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


def test_with_a_pod_list_an_admitted_vmi_without_a_domain_leaves_no_phantom_slot(node, processes):
    """Issue 19: with --pods-url the process counts an own device as charged only while its pod's guest
    runs. Without it (the old behaviour, still the default) the admitted VMI's device cancels the
    external VM out and nothing is hidden."""
    proc = node.plugin("reconciling", poll_interval=POLL, extra=["--pods-url", node.kubelet.pods_url])
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    pod = PodRef("default", "virt-launcher-late")
    node.kubelet.allocate(pod, "compute", RES, 1)
    node.kubelet.set_sandbox_ready(pod, False)
    external = node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    held = node.kubelet.device_manager.pod_devices(pod)["compute"][RES]
    assert not set(held) & _unhealthy(node.kubelet)
    node.stop_guest(external)
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 0, WAIT)


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
    before, started = limiter.allowed + limiter.rejected, time.monotonic()
    # The kernel changes all the time (a guest every 10 ms): every poll wants a List, until a few were made.
    while limiter.allowed + limiter.rejected - before < 3 and time.monotonic() - started < 60.0:
        node.stop_guest(node.start_guest())
        time.sleep(0.01)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        node.stop_guest(node.start_guest())
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    calls = limiter.allowed + limiter.rejected - before
    # --min-list-interval 0.1 caps the Lists by the time that really passed, at any machine speed.
    assert 3 <= calls <= elapsed / 0.1 + 2, f"{calls} List calls in {elapsed:.1f} s: keep to --min-list-interval"
    assert limiter.rejected == 0


def _polls_reach(proc, count: int, timeout: float) -> dict:
    """The plugin's stats once it has polled ``count`` times more (a condition, not a rate: any load)."""
    start = proc.stats()["polls"]
    deadline = time.monotonic() + timeout
    while True:
        stats = proc.stats()
        if stats["polls"] - start >= count or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def test_a_quiet_node_costs_a_read_per_poll_and_a_list_per_refresh(node, processes):
    """Nothing changes: the plugin reads misc.current and stops there, asking the kubelet only every
    --list-refresh (what ends without ever charging a key is seen within that).

    Load-proof: the test waits for a number of polls (however long a busy machine takes) and bounds the
    Lists by the wall-clock time that really passed, an upper bound that holds at any speed."""
    limiter = node.kubelet.pod_resources_limiter
    refresh = 1.0
    proc = node.plugin("reconciling", poll_interval=0.02, extra=["--list-refresh", str(refresh)])
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    first, before, started = proc.stats(), limiter.allowed + limiter.rejected, time.monotonic()
    second = _polls_reach(proc, 40, timeout=60.0)
    elapsed = time.monotonic() - started
    calls = limiter.allowed + limiter.rejected - before
    polls = second["polls"] - first["polls"]
    quiet = second["quiet_polls"] - first["quiet_polls"]
    assert polls >= 40, polls
    # At most one List per refresh period (plus the one a period boundary can add), never one per poll.
    lists = second["lists"] - first["lists"]
    # The plugin counts a List when the answer is back, the kubelet when the call arrives: a List in flight
    # at either snapshot is counted on one side only, so the two agree within one.
    assert calls <= elapsed / refresh + 2 and abs(lists - calls) <= 1, (calls, lists, elapsed)
    assert quiet >= polls - lists, (polls, quiet, lists)
    assert second["cpu_s"] >= first["cpu_s"] > 0 and second["pid"] == proc.process.pid
    # A change is still seen at the next poll, with a List.
    node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)


class RefusingBucket(TokenBucket):
    """A kubelet budget driven by the test instead of the clock: Lists 2 to 4 are refused, the rest allowed.

    A budget per wall-clock second would throttle only if the plugin got to ask often enough, which a busy
    machine does not guarantee; this one throttles at the same calls at any speed."""

    def __init__(self) -> None:
        super().__init__(qps=1, burst=1)
        self.calls = 0

    def allow(self, now: float) -> bool:
        self.calls += 1
        refused = 2 <= self.calls <= 4
        self.rejected += refused
        self.allowed += not refused
        return not refused


def test_the_plugin_says_so_when_the_kubelet_throttles_it(node, processes):
    node.kubelet.pod_resources_limiter = RefusingBucket()
    proc = node.plugin("reconciling", poll_interval=0.05, extra=["--min-list-interval", "0.05"])
    processes.append(proc)
    assert node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
    # The kernel keeps changing, so every poll wants a List, until the kubelet has refused some and allowed
    # one again.
    deadline = time.monotonic() + 60.0
    while node.kubelet.pod_resources_limiter.calls < 6 and time.monotonic() < deadline:
        node.stop_guest(node.start_guest())
        time.sleep(0.01)
    assert node.kubelet.pod_resources_limiter.rejected == 3
    node.start_guest()
    # Throttled polls keep the last list, the rest still reconcile.
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) == 1, WAIT)
    output = proc.stop()
    assert "the kubelet refused pod-resources List (rejected by rate limit)" in output
    assert "refusals so far" in output


def test_a_poll_decides_from_the_bytes_it_files_its_decision_under(tmp_path, monkeypatch):
    """A guest stops between the poll's first read of misc.current and its full read, and another starts
    before the next poll: the file shows the bytes of the first read again. The decision filed under
    those bytes must be the one they show (one key hidden), or it would stand while the file stays so.
    Found in the test above, which toggles guests while the plugin polls (it failed 2 runs in 7)."""
    cgroup = tmp_path / "sys" / "fs" / "cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "misc.capacity").write_text("tdx 8\n")
    current = cgroup / "misc.current"
    current.write_text("tdx 1\n")
    sent: list[int] = []

    class Service:
        resource_name = RES

        def set_devices(self, devices) -> bool:
            sent.append(sum(1 for d in devices if not d.healthy))
            return True

    reconciler = Reconciler(Service(), HostReader(str(tmp_path)), "tdx", tmp_path / "kubelet")
    monkeypatch.setattr(reconciler, "_refresh_own", lambda: True)  # no kubelet here: no own devices
    reconciler.poll()
    assert sent == [1]
    full_read = reconciler.read_kernel

    def racing_read():
        current.write_text("tdx 0\n")  # the guest stops after the first read...
        try:
            return full_read()
        finally:
            current.write_text("tdx 1\n")  # ...and another starts before the next poll

    monkeypatch.setattr(reconciler, "read_kernel", racing_read)
    current.write_text("tdx 1\n")
    reconciler.poll()
    reconciler.poll()
    assert sent[1:] == [1, 1]
