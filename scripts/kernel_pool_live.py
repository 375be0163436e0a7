#!/usr/bin/env python3
"""The kernel pool end to end: the real ``tee-key-agent`` process, a real kube-apiserver and kube-scheduler.

Used by ``tests/live/test_kernel_pool_agent_live.py`` (what must hold) and ``benchmarks/kernel_pool_race.py`` (how
long the race window is). :class:`AgentNode` registers a Node as its kubelet would, writes a teesim host tree
(``teesim node build``) for it, runs the agent against the API server with that tree as its host root, and changes
the tree's ``misc.current`` the way the kernel does when a VM outside Kubernetes starts or stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kube_control_plane import ControlPlane
from teesim.fixtures import k8s_objects

REPO = Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / ".build" / "collections"
sys.path.insert(0, str(COLLECTIONS))
from ansible_collections.confidential.tee.plugins.module_utils.agent import decision, kube  # noqa: E402

KEYS = decision.POOL_RESOURCES["tdx"]
AGENT = "ansible_collections.confidential.tee.plugins.module_utils.agent.cli"
RUNTIME_CLASS = "kata-qemu-tdx"


def wait_for(condition, timeout: float = 60.0, every: float = 0.02, what: str = "condition"):
    """Poll ``condition`` until it returns something true; that value, or AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout:.0f} s")
        time.sleep(every)


class AgentNode:
    """One Node, its host tree and its agent process on ``plane``."""

    def __init__(self, plane: ControlPlane, workdir: Path, name: str = "kp-node", capacity: int = 6) -> None:
        self.plane, self.name, self.capacity = plane, name, capacity
        self.root = workdir / "host"
        self.client = kube.KubeClient(kube.from_kubeconfig(str(plane.admin_kubeconfig)))
        self.process: subprocess.Popen | None = None
        self.log = workdir / "agent.log"
        teesim = Path(sys.executable).with_name("teesim")
        command = [str(teesim)] if teesim.exists() else [sys.executable, "-m", "teesim.cli"]
        subprocess.run(
            [*command, "node", "build", "--vendor", "intel", "--capacity", f"tdx={capacity}", "--out", str(self.root)],
            check=True,
            capture_output=True,
        )
        node = k8s_objects.node(name, "10.0.0.21", {}, {}, "6.16.0", "Debian GNU/Linux 13 (trixie)")
        plane.load_objects([node])
        runtime = k8s_objects.runtime_class(RUNTIME_CLASS, RUNTIME_CLASS, {KEYS: "1"}, {})
        plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(runtime))

    # -- the kernel -------------------------------------------------------------------------------------------
    def set_current(self, used: int) -> None:
        """Write the root ``misc.current`` whole (rename), as the kernel shows a changed count."""
        path = self.root / "sys" / "fs" / "cgroup" / "misc.current"
        temporary = path.with_suffix(".new")
        temporary.write_text(f"tdx {used}\n")
        os.replace(temporary, path)

    # -- the agent --------------------------------------------------------------------------------------------
    def start_agent(self, interval: float = 0.2, *extra: str) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
        command = [sys.executable, "-m", AGENT, "--kubeconfig", str(self.plane.admin_kubeconfig), "--node", self.name]
        command += ["--host-root", str(self.root), "--interval", str(interval), *extra]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        return self.process

    def stop_agent(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def agent_cpu_seconds(self) -> float:
        """User + system CPU of the agent process so far (/proc/<pid>/stat, clock ticks)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # -- what the API server holds ----------------------------------------------------------------------------
    def node(self) -> dict:
        return self.client.node(self.name)

    def pool(self) -> int | None:
        value = (self.node().get("status") or {}).get("allocatable", {}).get(KEYS)
        return None if value is None else int(value)

    def condition(self) -> dict | None:
        for found in self.node()["status"].get("conditions", []):
            if found["type"] == decision.CONDITION_TYPE:
                return found
        return None

    def pods(self) -> list[dict]:
        return self.client.request("GET", "/api/v1/namespaces/default/pods")["items"]

    def bound(self) -> list[dict]:
        return [p for p in self.pods() if p["spec"].get("nodeName") == self.name]

    # -- guests -----------------------------------------------------------------------------------------------
    def create_pod(self, name: str, kind: str) -> None:
        """A Kata pod (the RuntimeClass's overhead requests the pool) or a virt-launcher-shaped pod (its compute
        container requests it, as the admission policy adds)."""
        container = {"name": "compute", "image": "registry.invalid/guest:1"}
        metadata = {"name": name, "namespace": "default", "labels": {}}
        spec: dict = {"containers": [container]}
        if kind == "kata":
            spec["runtimeClassName"] = RUNTIME_CLASS
        else:
            metadata["labels"]["kubevirt.io"] = "virt-launcher"
            container["resources"] = {"requests": {KEYS: "1"}, "limits": {KEYS: "1"}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
        self.client.request("POST", "/api/v1/namespaces/default/pods", pod)

    def start_guest(self, pod: dict) -> None:
        """What the kubelet writes once the pod's guest runs (its key is charged)."""
        conditions = [
            {"type": decision.SANDBOX_CONDITION, "status": "True"},
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
        ]
        name = pod["metadata"]["name"]
        self.client.request(
            "PATCH",
            f"/api/v1/namespaces/default/pods/{name}/status",
            {"status": {"phase": "Running", "conditions": conditions}},
            kube.STRATEGIC_MERGE,
        )

    def delete_pods(self) -> None:
        self.client.request("DELETE", "/api/v1/namespaces/default/pods?gracePeriodSeconds=0")
