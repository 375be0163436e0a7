"""tee_key_pool_mode: kernel end to end: the real tee-key-agent process keeps a Node's pool on kube-apiserver
v1.37.2 from a teesim host tree, and the real kube-scheduler binds pods against it (scripts/kernel_pool_live.py)."""

from __future__ import annotations

import shutil

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.agent import decision
from kernel_pool_live import KEYS, AgentNode, wait_for


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if shutil.which("go") is None:
        pytest.skip("no go on PATH: the control plane is built from the Go module proxy (make k8s)")
    from kube_control_plane import ControlPlane

    with ControlPlane(scheduler=True) as plane:
        found = AgentNode(plane, tmp_path_factory.mktemp("kernel-pool"), capacity=6)
        found.start_agent(0.2)
        yield found
        if found.process.poll() is None:
            found.stop_agent()


def _unschedulable(pod: dict) -> str | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return condition.get("message")
    return None


def test_the_scheduler_binds_against_the_pool_the_agent_keeps(node):
    # The kernel's free count, advertised: nothing in use.
    assert wait_for(lambda: node.pool() == 6, what="pool 6")
    assert node.condition()["status"] == "True" and node.condition()["reason"] == decision.REASON_OK
    assert node.node()["status"]["capacity"][KEYS] == "6"
    # A VM outside Kubernetes takes 2 keys: the pool follows.
    node.set_current(2)
    wait_for(lambda: node.pool() == 4, what="pool 4 after an external VM took 2 keys")
    # Three Kata pods (RuntimeClass overhead) and two launcher pods (container requests): 4 fit.
    for index in range(3):
        node.create_pod(f"kata-{index}", "kata")
    for index in range(2):
        node.create_pod(f"vmi-{index}", "kubevirt")
    wait_for(lambda: len(node.bound()) == 4, what="4 pods bound")
    pending = wait_for(lambda: [p for p in node.pods() if _unschedulable(p)], what="one pod refused")
    assert len(pending) == 1 and f"Insufficient {KEYS}" in _unschedulable(pending[0])
    kata = [p for p in node.bound() if p["metadata"]["name"].startswith("kata-")]
    assert all(p["spec"]["overhead"][KEYS] == "1" for p in kata), "RuntimeClass admission adds the overhead"
    # The bound guests start: the kernel charges them first, then their pods report it (in that order on a real node:
    # the kubelet sees the sandbox or the domain only once it runs). Meanwhile the agent counts the new keys as
    # outside Kubernetes and may shrink the pool, never grow it; once the pods report, it is 4 again.
    node.set_current(6)
    for pod in node.bound():
        node.start_guest(pod)
    decided = node.once()["pools"][0]
    assert (decided["k8s_running"], decided["external"], decided["pool"]) == (4, 2, 4)
    wait_for(lambda: node.pool() == 4, what="pool 4 once the guests' pods report them running")
    assert len(node.bound()) == 4
    # The external VM stops: its keys return to the pool and the scheduler binds the waiting pod.
    node.set_current(4)
    wait_for(lambda: node.pool() == 6, what="pool 6 after the external VM stopped")
    wait_for(lambda: len(node.bound()) == 5, what="the fifth pod bound")
    # Never more guests placed than the kernel had keys for: 5 bound + 0 external <= 6.
    assert len(node.bound()) <= node.capacity
    events = node.client.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == decision.REASON_OK and e["involvedObject"]["name"] == node.name for e in events)


def test_a_bios_split_and_an_unreadable_usage_file_shrink_the_pool(node):
    node.delete_pods()
    node.set_current(0)
    wait_for(lambda: node.pool() == 6, what="pool 6")
    usage = node.root / "sys" / "fs" / "cgroup" / "misc.current"
    usage.rename(usage.with_suffix(".hidden"))
    usage.mkdir()  # not a regular file: the agent cannot read usage and must shrink
    try:
        wait_for(lambda: node.pool() == 0, what="pool 0 on unreadable usage")
        assert node.condition()["reason"] == decision.REASON_CURRENT_UNKNOWN
    finally:
        usage.rmdir()
        usage.with_suffix(".hidden").rename(usage)
    wait_for(lambda: node.pool() == 6, what="pool back to 6")
    capacity = node.root / "sys" / "fs" / "cgroup" / "misc.capacity"
    capacity.write_text("tdx 3\n")
    wait_for(lambda: node.pool() == 3, what="pool 3 after the capacity changed")
    capacity.write_text("tdx 6\n")
    wait_for(lambda: node.pool() == 6, what="pool 6 again")


def test_sigterm_stops_the_agent_cleanly_and_the_pool_stays(node):
    assert node.stop_agent() == 0
    assert node.pool() == 6
    assert "tdx.intel.com/keys = 6" in node.log.read_text()
