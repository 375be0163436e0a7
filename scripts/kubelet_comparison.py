"""The same small scenario on the real node and through teesim's kubelet model, compared step by step (issue 46).

One TDX node with 3 keys; teesim's reconciling device plugin (``teesim.plugins.reconciling``, the process of
``teesim grpc``) advertises ``devices.kubevirt.io/tdx`` from ``misc.current`` and marks the devices of keys used
elsewhere Unhealthy. The steps, :data:`STEPS`, each at ``STEP * k`` seconds of the model's clock: a VM outside
Kubernetes starts (one device turns Unhealthy), three VMIs arrive (the third finds no healthy free device and
stays Pending), the plugin dies, a VMI bound by name (``spec.nodeName``) meanwhile is refused by the device
manager, the plugin comes back, the kubelet restarts with the VMIs running, the outside VM stops
(its device turns Healthy and the third VMI starts).

After each step :func:`observe_model` reads, from a run of :class:`teesim.sim.simulation.Simulation` (strategy
``reconciling``, the same arrivals and faults) stopped just before the next step, what :meth:`RealRun.observe` reads
from the real node once it has settled: every pod's phase, the kubelet's admission rejections, the devices the
device manager holds per pod, the pod-resources API's ``List`` and ``GetAllocatableResources``, failed launches, the
Node's capacity and allocatable of the resource, and ``misc.current``. :func:`compare` runs the real side step by
step, waiting for each state, and returns every difference; the test (tests/node/test_kubelet_model_comparison.py)
accepts only those explained in docs/simulator.md ("The real kubelet against the model").
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kube_control_plane import REPO_ROOT, ControlPlane
from kube_node import RealNode

sys.path.insert(0, str(REPO_ROOT / "simulator"))
from teesim.cluster.pods import Consumer, Guest, Phase, vmi_pod
from teesim.cluster.workload import Arrival
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import CURRENT
from teesim.kubelet import sockets
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.sim.scenario import FaultSpec
from teesim.sim.simulation import Settings, Simulation, World
from teesim.strategies import get_strategy

RESOURCE = "devices.kubevirt.io/tdx"
NAMESPACE = "tee-compare"
NODE = "tee-compare-1"
KEYS = 3
STEP = 30.0  # model seconds between steps: every effect of a step has settled in the model by the next
FOREVER = 100_000.0
LAUNCH_DELAY = 2.0
# The model's timings set to the real node's: the kubelet's nodeStatusUpdateFrequency (kube_node.py, 5 s), the
# plugin's --poll-interval; the plugin is back (started by hand) within the step, the kubelet at once.
SETTINGS = Settings(
    node_status_interval=5.0,
    poll_interval=0.5,
    plugin_restart_delay=STEP / 2,
    kubelet_restart_downtime=2.0,
    reregister_delay=1.0,
)
VMIS = ("kubevirt-00001", "kubevirt-00002", "kubevirt-00003")
# Bound by name (spec.nodeName: no scheduler) while the plugin is dead: the kubelet's device manager must refuse it.
BY_NAME = "kubevirt-00004"


@dataclass(frozen=True)
class Step:
    name: str
    at: float


STEPS = (
    Step("start: the plugin registered", 0 * STEP),
    Step("a VM outside Kubernetes charges a key", 1 * STEP),
    Step(f"VMI {VMIS[0]}", 2 * STEP),
    Step(f"VMI {VMIS[1]}", 3 * STEP),
    Step(f"VMI {VMIS[2]}: no healthy free device", 4 * STEP),
    Step("the plugin dies (SIGKILL)", 5 * STEP),
    Step(f"VMI {BY_NAME} bound by name while the plugin is dead", 5.25 * STEP),
    Step("the plugin is back", 5.5 * STEP),
    Step("the kubelet restarts, VMIs running", 6 * STEP),
    Step("the outside VM stops", 7 * STEP),
)


def world(until: float) -> World:
    """The scenario as teesim's world, run until ``until``."""
    arrivals = [
        Arrival(STEPS[1].at, 0, Consumer.EXTERNAL, "tdx", STEPS[-1].at - STEPS[1].at, 0.0, NODE),
        *(Arrival(STEPS[2 + i].at, 1 + i, Consumer.KUBEVIRT, "tdx", FOREVER, LAUNCH_DELAY) for i in range(3)),
    ]
    faults = (FaultSpec("plugin-crash", STEPS[5].at, NODE), FaultSpec("kubelet-restart", STEPS[8].at, NODE))
    node = NodeSpec(NODE, CURRENT, "intel", {"tdx": KEYS})
    return World(nodes=(node,), arrivals=tuple(arrivals), faults=faults, duration=until, settings=SETTINGS)


def observe_model(step: int) -> dict:
    """What the model shows just before the step after ``step`` (or ``STEP`` after the last one)."""
    until = STEPS[step + 1].at - 1 if step + 1 < len(STEPS) else STEPS[step].at + STEP
    sim = Simulation(world(until), get_strategy("reconciling"))
    if until > STEPS[6].at:
        sim.clock.at(STEPS[6].at, lambda: bind_by_name(sim))
    sim.run()
    node = sim.nodes[NODE]
    phases = {p.uid: "Pending" if p.phase in (Phase.PENDING, Phase.BOUND) else p.phase.value for p in sim.pods}
    rejected = {f.uid: tuple(f.message.split(": ", 1)) for f in sim.failures if f.kind in ("admission", "readmission")}
    launches = {f.uid: f.error for f in sim.failures if f.kind == "launch"}
    held = {p.uid: len(node.devices.pod_devices(p.uid).get(p.container, {}).get(RESOURCE, [])) for p in sim.pods}
    return {
        "pods": phases,
        "rejected": rejected,
        "failed_launches": launches,
        "devices_held": {uid: n for uid, n in held.items() if n},
        **model_pod_resources(sim),
        "capacity": node.devices.capacity(sim.clock.now).get(RESOURCE, 0),
        "allocatable": node.status_allocatable().get(RESOURCE, 0),
        "misc_current": node.usage("tdx"),
    }


def model_pod_resources(sim: Simulation) -> dict:
    """The pod-resources API's answers in the model: ``List`` (it frees finished pods first) and
    ``GetAllocatableResources`` (healthy devices), as teesim's gRPC kubelet answers them (teesim.kubelet.server)."""
    manager = sim.nodes[NODE].devices
    manager.release_finished_pods()
    listed = {}
    for ref in manager.active_pods():
        count = sum(len(r.get(RESOURCE, [])) for r in manager.pod_devices(ref).values())
        if count:
            listed[ref.name] = count
    return {"pod_resources_list": listed, "pod_resources_allocatable": len(manager.allocatable_devices(RESOURCE))}


def bind_by_name(sim: Simulation) -> None:
    """A pod created with ``spec.nodeName``: no scheduler, straight to the node's kubelet."""
    node, now = sim.nodes[NODE], sim.clock.now
    pod = vmi_pod(BY_NAME, Guest.TDX, sim.strategy.vmi_requests(Guest.TDX), now, LAUNCH_DELAY, FOREVER)
    sim.pods.append(pod)
    pod.phase, pod.node, pod.bound_at = Phase.BOUND, NODE, now
    node.bound.bind(pod, pod.need())
    sim.kubelets[NODE].bound(pod)


# -- the real node ---------------------------------------------------------------------------------------------
# A VM outside Kubernetes: a process in the node's own cgroup (not kubepods) holding one launch through teesim's
# kernel socket (the protocol of simulator/teesim/kernel/service.py) until SIGTERM.
OUTSIDE_VM = """
import signal, socket, sys, time
kernel = socket.socket(socket.AF_UNIX)
kernel.connect(sys.argv[1])
kernel.sendall(b"launch tdx 1\\n")
print(kernel.makefile().readline(), flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
"""


def vmi(name: str, image: str, kernel_dir: str, node_name: str | None = None) -> dict:
    """A virt-launcher-shaped pod: one container requesting a device, launching one TDX guest."""
    devices = {RESOURCE: "1"}
    container = {
        "name": "compute",
        "image": image,
        "imagePullPolicy": "Never",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "args": ["-socket", "/run/teesim/kernel.sock", "tdx"],
        "resources": {"limits": devices, "requests": devices},
        "volumeMounts": [{"name": "teesim-kernel", "mountPath": "/run/teesim"}],
    }
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [{"name": "teesim-kernel", "hostPath": {"path": kernel_dir, "type": "Directory"}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


@dataclass
class RealRun:
    """The scenario's actions on a :class:`RealNode` (``node``) of ``plane``."""

    plane: ControlPlane
    node: RealNode
    plugin_log: list[str] = field(default_factory=list)

    def get(self, *args: str) -> dict:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, *objects: dict) -> None:
        text = "\n---\n".join(json.dumps(o) for o in objects)
        self.plane.kubectl("apply", "--server-side", "--field-manager=tee-compare", "-f", "-", input=text)

    def start_plugin(self) -> None:
        command = [sys.executable, "-m", "teesim.plugins.reconciling", "--host-root", str(self.node.root)]
        command += [
            "--resource-name",
            RESOURCE,
            "--misc-resource",
            "tdx",
            "--poll-interval",
            str(SETTINGS.poll_interval),
        ]
        path = os.pathsep.join(filter(None, [str(REPO_ROOT / "simulator"), os.environ.get("PYTHONPATH")]))
        self.node._spawn("plugin-teesim", command, env={**os.environ, "PYTHONPATH": path})

    def act(self, step: int) -> None:
        node = self.node
        image, kernel_dir = node.build["images"]["guest"], str(node.kernel_socket.parent)
        if step == 0:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            account = {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": NAMESPACE},
            }
            self.apply(namespace, account)
            self.start_plugin()
        elif step == 1:
            node._spawn("outside-vm", [sys.executable, "-c", OUTSIDE_VM, str(node.kernel_socket)])
        elif step in (2, 3, 4):
            self.apply(vmi(VMIS[step - 2], image, kernel_dir))
        elif step == 5:
            node.processes.pop("plugin-teesim").send_signal(signal.SIGKILL)
        elif step == 6:
            self.apply(vmi(BY_NAME, image, kernel_dir, node_name=node.name))
        elif step == 7:
            self.start_plugin()
        elif step == 8:
            node.restart_kubelet()
        elif step == len(STEPS) - 1:
            node._end("outside-vm", timeout=10)

    def observe(self) -> dict:
        node = self.node
        pods = self.get("pods", "-n", NAMESPACE)["items"]
        names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
        events = self.get("events", "-n", NAMESPACE, "--field-selector", "type=Warning")["items"]
        rejected = {
            e["involvedObject"]["name"]: (e["reason"], e["message"])
            for e in events
            if e["reason"].startswith("OutOf") or e["reason"] == "UnexpectedAdmissionError"
        }
        status = self.get("node", node.name)["status"]
        return {
            "pods": {p["metadata"]["name"]: p["status"].get("phase") for p in pods},
            "rejected": rejected,
            "failed_launches": {p["metadata"]["name"]: e for p in pods if (e := launch_error(p))},
            "devices_held": {names.get(uid, uid): n for uid, n in checkpoint_devices(node.root).items()},
            **real_pod_resources(node.root / "var/lib/kubelet/pod-resources/kubelet.sock"),
            "capacity": int(status["capacity"].get(RESOURCE, 0)),
            "allocatable": int(status["allocatable"].get(RESOURCE, 0)),
            "misc_current": int((node.root / "sys/fs/cgroup/misc.current").read_text().split()[1]),
        }


def launch_error(pod: dict) -> str | None:
    """The kernel's errno name a guest's launch failed with (its termination message), if it failed."""
    for status in pod["status"].get("containerStatuses", []):
        message = status.get("state", {}).get("terminated", {}).get("message", "")
        if "failed: " in message:
            return message.split("failed: ", 1)[1].split(":", 1)[0]
    return None


def real_pod_resources(socket_path: Path) -> dict:
    """The real kubelet's pod-resources v1 answers: ``List`` (devices of ``RESOURCE`` per pod) and
    ``GetAllocatableResources`` (how many devices of ``RESOURCE``)."""
    channel = sockets.channel(socket_path)
    try:
        stub = pr_grpc.PodResourcesListerStub(channel)
        listed = stub.List(pr.ListPodResourcesRequest(), wait_for_ready=True, timeout=30)
        allocatable = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), wait_for_ready=True, timeout=30)
    finally:
        channel.close()
    per_pod = {}
    for pod in listed.pod_resources:
        count = sum(len(d.device_ids) for c in pod.containers for d in c.devices if d.resource_name == RESOURCE)
        if count:
            per_pod[pod.name] = count
    devices = sum(len(d.device_ids) for d in allocatable.devices if d.resource_name == RESOURCE)
    return {"pod_resources_list": per_pod, "pod_resources_allocatable": devices}


def checkpoint_devices(root: Path) -> dict[str, int]:
    """Pod UID -> devices of ``RESOURCE`` in the device manager's checkpoint (kubelet_internal_checkpoint)."""
    path = root / "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    if not path.exists():
        return {}
    held: dict[str, int] = {}
    for entry in json.loads(path.read_text())["Data"].get("PodDeviceEntries") or []:
        if entry["ResourceName"] == RESOURCE:
            held[entry["PodUID"]] = held.get(entry["PodUID"], 0) + sum(len(v) for v in entry["DeviceIDs"].values())
    return held


def run_steps(plane: ControlPlane, node: RealNode, timeout: float = 90.0) -> list[dict]:
    """Each step's ``{"step", "model", "real"}``: the real node's state once it equals the model's, or as it is
    ``timeout`` seconds after the step."""
    run, records = RealRun(plane, node), []
    for index, step in enumerate(STEPS):
        run.act(index)
        expected = observe_model(index)
        records.append({"step": step.name, "model": expected, "real": wait_for_state(run.observe, expected, timeout)})
    return records


def differences(records: list[dict]) -> list[tuple[str, str, object, object]]:
    """Every (step, what, model, real) that differs."""
    return [
        (r["step"], key, r["model"][key], r["real"].get(key))
        for r in records
        for key in r["model"]
        if r["model"][key] != r["real"].get(key)
    ]


def compare(plane: ControlPlane, node: RealNode, timeout: float = 90.0) -> list[tuple[str, str, object, object]]:
    """Every (step, what, model, real) that differs once the real node had ``timeout`` seconds to reach the
    model's state after each step."""
    return differences(run_steps(plane, node, timeout))


def wait_for_state(observe: Callable[[], dict], expected: dict, timeout: float) -> dict:
    """The real node's state once it equals ``expected``, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen = observe()
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = observe()
    return seen
