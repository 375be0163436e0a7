"""``python -m teesim.plugins.unified`` as a real process: one pool under Kata's resource name,
Kata pods accounted through their RuntimeClass overhead (the kubelet's /pods), VMIs through
pod-resources, and only keys held outside Kubernetes hidden."""

from __future__ import annotations

import pytest
from teesim.grpc_run import PODS_SLICE, GrpcNode, unhealthy_count
from teesim.kubelet.devicemanager import PodRef
from teesim.plugins.unified import main, overhead_keys, parse_count

KEYS = "tdx.intel.com/keys"
WAIT = 60.0  # a bound, not a timing: wait_for returns as soon as the condition holds, and a busy CI machine can be slow
POLL = 0.05


def _ready(status: str) -> list[dict]:
    return [{"type": "PodReadyToStartContainers", "status": status}]


def test_overhead_keys_count_pods_whose_sandbox_exists_only():
    pods = [
        {"spec": {"overhead": {KEYS: "1"}}, "status": {"phase": "Running"}},
        # Sandbox created, containers not running yet: the VM is charged.
        {"spec": {"overhead": {KEYS: "2"}}, "status": {"phase": "Pending", "conditions": _ready("True")}},
        # Bound, sandbox failing with EBUSY and retried: nothing charged.
        {"spec": {"overhead": {KEYS: "4"}}, "status": {"phase": "Pending", "conditions": _ready("False")}},
        {"spec": {"overhead": {KEYS: "8"}}, "status": {"phase": "Pending"}},
        {"spec": {"overhead": {KEYS: "1"}}, "status": {"phase": "Succeeded", "conditions": _ready("True")}},
        {"spec": {"overhead": {"memory": "2Gi"}}, "status": {"phase": "Running"}},
        {"metadata": {"name": "odd"}, "spec": {"overhead": {KEYS: "half"}}, "status": {"phase": "Running"}},
        {"spec": {}, "status": {"phase": "Running"}},
    ]
    assert overhead_keys(pods, KEYS) == 3
    assert parse_count("2000m") == 2 and parse_count("1500m") is None and parse_count(3) == 3


def _start(node: GrpcNode, processes, *extra: str):
    proc = node.plugin(
        "unified", resource_name=KEYS, poll_interval=POLL, extra=["--pods-url", node.kubelet.pods_url, *extra]
    )
    processes.append(proc)
    ok = node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(KEYS, 0) == 8, WAIT)
    assert ok, f"unified plugin did not register:\n{proc.stop()}"
    return proc


def _kata(node: GrpcNode, name: str) -> PodRef:
    """A Kata pod: bound with overhead tdx.intel.com/keys: 1, then its sandbox VM charges a key."""
    pod = PodRef("default", f"kata-{name}", uid=f"kata-{name}")
    node.kubelet.add_pod(pod, ["app"], overhead={KEYS: 1}, runtime_class="kata-qemu-tdx", sandbox_ready=False)
    node.start_guest(PODS_SLICE, f"kata-{name}")
    node.kubelet.set_sandbox_ready(pod)
    return pod


def _vmi(node: GrpcNode, name: str) -> str:
    """A VMI: admitted (a device allocated), listed by pod-resources, then its domain charges a key.
    Until a List shows the device's pod, the plugin counts it as not charged (a key hidden once)."""
    pod = PodRef("default", f"virt-launcher-{name}", uid=f"vmi-{name}")
    lists = node.kubelet.lists_answered
    node.kubelet.allocate(pod, "compute", KEYS, 1)
    assert node.kubelet.wait_for(lambda k: k.lists_answered > lists + 1, WAIT)
    node.start_guest(PODS_SLICE, f"vmi-{name}")
    return node.kubelet.device_manager.pod_devices(pod)["compute"][KEYS][0]


@pytest.mark.slow
def test_unified_hides_only_keys_held_outside_kubernetes(node, processes):
    _start(node, processes)
    _kata(node, "a")
    _kata(node, "b")
    own = _vmi(node, "c")
    # Kata's keys are the scheduler's already (overhead): nothing is hidden once the informer has seen
    # the sandboxes (between a VM's start and that, its key is hidden once: too careful, never too few).
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 0, WAIT)
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) > 0, 6 * POLL)
    external = node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 1, WAIT)
    assert own not in node.kubelet.snapshot()[KEYS]["unhealthy"]
    # Allocatable 7 = 8 - 1 external; the scheduler subtracts 2 Kata + 1 VMI itself: 4 left, as in the kernel.
    assert node.kubelet.device_manager.allocatable() == {KEYS: 7}
    assert node.misc.capacity("tdx") - node.current() == 4
    node.stop_guest(external)
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 0, WAIT)


@pytest.mark.slow
def test_a_kata_pod_retrying_its_sandbox_is_not_taken_for_a_charged_key(node, processes):
    _start(node, processes)
    stuck = PodRef("default", "kata-stuck", uid="kata-stuck")
    node.kubelet.add_pod(stuck, ["app"], overhead={KEYS: 1}, sandbox_ready=False)
    external = node.start_guest()
    # Counting the stuck pod as charged would cancel the external VM out and hide nothing.
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 1, WAIT)
    node.stop_guest(external)
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 0, WAIT)


@pytest.mark.slow
def test_a_vmi_admitted_but_not_started_holds_a_device_and_no_key(node, processes):
    """Issue 19 (the in-process models' rule, now the process's): before it, the admitted VMI's device
    was taken for a charged key, cancelled the external VM out and hid nothing (a phantom slot)."""
    _start(node, processes)
    pod = PodRef("default", "virt-launcher-late", uid="vmi-late")
    node.kubelet.allocate(pod, "compute", KEYS, 1)
    node.kubelet.set_sandbox_ready(pod, False)  # admitted, domain not started: no key yet
    external = node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 1, WAIT)
    # The domain starts: its key is charged and the VMI's own; still only the external one is hidden.
    # (The pod list says so first, as serve's engine does at one instant: the plugin re-reads the pods
    # when misc.current changes, so a pod list later than the kernel would hide the key once more
    # until the next --list-refresh: too careful for a moment, never too few.)
    node.kubelet.set_sandbox_ready(pod, True)
    node.start_guest(PODS_SLICE, "vmi-late")
    # Settled once the plugin listed twice after the change (a poll between the two steps above may
    # have decided from half of it).
    lists = node.kubelet.lists_answered
    assert node.kubelet.wait_for(lambda k: k.lists_answered > lists + 1, WAIT)
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 1, WAIT)
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) != 1, 6 * POLL)
    node.stop_guest(external)
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 0, WAIT)


@pytest.mark.slow
def test_unified_keeps_the_operators_reserve(node, processes):
    _start(node, processes, "--reserve", "2")
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 2, WAIT)
    for _ in range(3):
        node.start_guest()
    assert node.kubelet.wait_for(lambda k: unhealthy_count(k, KEYS) == 3, WAIT)


def test_unified_without_a_pod_list_is_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--host-root", "/nonexistent", "--resource-name", KEYS])
    assert exit_.value.code == 2
    assert "--pods-url is required" in capsys.readouterr().err
