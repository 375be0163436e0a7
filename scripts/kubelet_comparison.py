"""Scenarios run on the real node and through teesim's kubelet model, compared step by step (issue 46).

Three scenarios, :data:`SCENARIOS`, on one TDX node with 3 keys, each step at ``STEP * k`` seconds of the model's
clock:

* ``reconciling``: teesim's reconciling device plugin (``teesim.plugins.reconciling``, the process of ``teesim
  grpc``) advertises ``devices.kubevirt.io/tdx`` from ``misc.current`` and marks the devices of keys used elsewhere
  Unhealthy. A VM outside Kubernetes starts (one device turns Unhealthy), three VMIs arrive (the third finds no
  healthy free device and stays Pending), the plugin dies, a VMI bound by name (``spec.nodeName``) meanwhile is
  refused by the device manager, the plugin comes back, the kubelet restarts with the VMIs running, the outside
  VM stops (its device turns Healthy and the third VMI starts).
* ``double-pool``: KubeVirt v1.9.0's own TDX plugin (``make upstream``) advertises ``devices.kubevirt.io/tdx`` from
  ``misc.capacity`` and NFD's ``tdx.intel.com/keys`` (published on the Node as nfd-master does) is the Kata
  RuntimeClass's overhead: the collection's double pool. A VM outside Kubernetes, a Kata pod and a VMI take the
  3 keys; a second VMI and a second Kata pod are admitted by both pools and fail to launch in the kernel
  (``ENOSPC``); the kubelet restarts, KubeVirt's plugin does not register again (kubevirt/kubevirt#17122) and a
  third VMI waits.
* ``kernel-pool``: the cure, ``tee_key_pool_mode: kernel``: the collection's node agent (``tee-key-agent``, with
  ``--reserve tdx=1`` of headroom for VMs outside Kubernetes) keeps ``tdx.intel.com/keys`` at what the kernel has
  free for Kubernetes; VMIs request it, Kata pods hold it by overhead. A VM outside Kubernetes shrinks the pool and
  its end grows it; a VMI and a Kata pod wait Pending where the kernel's last free key is the headroom. (No pod waits
  while the pool grows: the scheduler may then bind it before the kubelet's Node informer has the new capacity, and
  the kubelet rejects it; docs/simulator.md.)

After each step :func:`observe_model` reads, from a run of :class:`teesim.sim.simulation.Simulation` (the
scenario's strategy, the same arrivals and faults) stopped just before the next step, what :meth:`RealRun.observe`
reads from the real node once it has settled: every pod's phase, the kubelet's admission rejections, the devices
the device manager holds per pod, the pod-resources API's ``List`` and ``GetAllocatableResources``, failed
launches, the Node's capacity and allocatable of the resources, and ``misc.current``. :func:`compare` runs the
real side step by step, waiting for each state, and returns every difference; the test
(tests/node/test_kubelet_model_comparison.py) accepts only those explained in docs/simulator.md ("The real kubelet
against the model").
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
from kube_node import (
    KATA_HANDLERS,
    TDX_NODE_LABELS,
    RealNode,
    guest_pod,
    kubevirt_tdx_plugin,
    outside_vm,
    tee_key_agent,
)

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

sys.path.insert(0, str(REPO_ROOT / ".build" / "collections"))
from ansible_collections.confidential.tee.plugins.module_utils.cluster.runtimeclasses import (
    kata_classes,
)
from ansible_collections.confidential.tee.plugins.module_utils.common import tee

RESOURCE = tee.KUBEVIRT_TDX  # devices.kubevirt.io/tdx
NFD_KEYS = tee.NFD_TDX_KEYS  # tdx.intel.com/keys
NODE = "tee-compare-1"  # the model's node (the real one is named by Scenario.node)
KEYS = 3
STEP = 30.0  # model seconds between steps: every effect of a step has settled in the model by the next
FOREVER = 100_000.0
LAUNCH_DELAY = 2.0


@dataclass(frozen=True)
class Step:
    """One action at model time ``at``: ``start`` (the advertisers), ``outside-start``/``outside-stop`` (the VM
    outside Kubernetes), ``vmi``/``kata`` (a pod named ``pod``, the model's uid), ``by-name`` (a VMI created with
    ``spec.nodeName``), ``plugin-kill``/``plugin-start`` (the device plugin), ``kubelet-restart``."""

    name: str
    at: float
    action: str
    pod: str = ""


@dataclass(frozen=True)
class Scenario:
    """A comparison: the strategy the model runs, the advertiser the real node runs (``teesim-reconciling``,
    ``kubevirt``, or ``agent``: tee-key-agent, which publishes NFD's name itself), whether Kata's keys are on NFD's
    name (published as nfd-master does, unless the agent does), the steps and the model's settings."""

    strategy: str
    plugin: str
    nfd_keys: bool
    steps: tuple[Step, ...]
    settings: Settings
    # (step, what, model, real): the differences docs/simulator.md explains, each exactly as it shows.
    explained: frozenset[tuple[str, str, object, object]] = frozenset()
    # Explained differences that show or not depending on when the real kubelet writes a file (its checkpoint):
    # accepted, but not required to show.
    may_show: frozenset[tuple[str, str, object, object]] = frozenset()

    def unexplained(self, found: list[tuple[str, str, object, object]]) -> list[tuple[str, str, object, object]]:
        return [d for d in found if d not in self.explained and d not in self.may_show]

    @property
    def resources(self) -> tuple[str, ...]:
        return (RESOURCE, NFD_KEYS) if self.nfd_keys else (RESOURCE,)

    @property
    def namespace(self) -> str:
        """The real run's namespace: one per scenario, so that one run's pods never meet another's."""
        return f"tee-compare-{self.strategy}"

    def node(self) -> dict:
        """The real node's RealNode arguments: 3 TDX keys, the Kata handlers mapped to runc, the labels the Kata
        RuntimeClass selects; a name of its own."""
        return {
            "name": f"tee-compare-{self.strategy}",
            "capacity": {"tdx": KEYS},
            "runtime_handlers": KATA_HANDLERS,
            "labels": TDX_NODE_LABELS,
        }


def _at(k: float) -> float:
    return k * STEP


# The model's timings set to the real node's: the kubelet's nodeStatusUpdateFrequency (kube_node.py, 5 s), the
# plugin's --poll-interval; the plugin is back (started by hand) within the step, the kubelet at once.
RECONCILING = Scenario(
    strategy="reconciling",
    plugin="teesim-reconciling",
    nfd_keys=False,
    settings=Settings(
        node_status_interval=5.0,
        poll_interval=0.5,
        plugin_restart_delay=STEP / 2,
        kubelet_restart_downtime=2.0,
        reregister_delay=1.0,
    ),
    steps=(
        Step("start: the plugin registered", _at(0), "start"),
        Step("a VM outside Kubernetes charges a key", _at(1), "outside-start"),
        Step("VMI kubevirt-00001", _at(2), "vmi", "kubevirt-00001"),
        Step("VMI kubevirt-00002", _at(3), "vmi", "kubevirt-00002"),
        Step("VMI kubevirt-00003: no healthy free device", _at(4), "vmi", "kubevirt-00003"),
        Step("the plugin dies (SIGKILL)", _at(5), "plugin-kill"),
        Step("VMI kubevirt-00004 bound by name while the plugin is dead", _at(5.25), "by-name", "kubevirt-00004"),
        Step("the plugin is back", _at(5.5), "plugin-start"),
        Step("the kubelet restarts, VMIs running", _at(6), "kubelet-restart"),
        Step("the outside VM stops", _at(7), "outside-stop"),
    ),
)
# Kubernetes 1.37's kubelet posts a Kata pod's status.allocatedResources with its overhead in it and PodRequests
# adds the overhead again (kubernetes/kubernetes#139627): the model's Settings.overhead_counted_twice, shown by
# tests/node/test_real_node.py, is what the real control plane and node here do.
NO_KEY_FOR_VMI = "VMI kubevirt-00004: a free device, no free key"
NO_KEY_FOR_KATA = "Kata kata-00005: NFD's pool has room, the kernel none"
DEAF_PLUGIN = "the kubelet restarts: KubeVirt's plugin does not register again"
NO_DEVICE_AFTER_RESTART = "VMI kubevirt-00007 waits: devices.kubevirt.io/tdx stays 0"
# The guests that failed to launch, as each later step shows them (see DOUBLE_POOL.explained).
_FAILED_GUESTS = (
    ("pods[kubevirt-00004]", "Pending", "Failed"),
    ("pod_resources_list[kubevirt-00004]", 1, None),
    ("pods[kata-00005]", "Pending", "Failed"),
)
DOUBLE_POOL = Scenario(
    strategy="double-pool",
    plugin="kubevirt",
    nfd_keys=True,
    settings=Settings(node_status_interval=5.0, overhead_counted_twice=True),
    steps=(
        Step("start: KubeVirt's plugin registered, NFD's keys published", _at(0), "start"),
        Step("a VM outside Kubernetes charges a key", _at(1), "outside-start"),
        Step("Kata kata-00002", _at(2), "kata", "kata-00002"),
        Step("VMI kubevirt-00003", _at(3), "vmi", "kubevirt-00003"),
        Step(NO_KEY_FOR_VMI, _at(4), "vmi", "kubevirt-00004"),
        Step(NO_KEY_FOR_KATA, _at(5), "kata", "kata-00005"),
        # KubeVirt v1.9.0's TDX plugin never sees its socket removed (kubevirt/kubevirt#17122): the running pods
        # keep their keys, and a new VMI waits (Settings.kubevirt_tdx_reregisters is false in the model).
        Step(DEAF_PLUGIN, _at(6), "kubelet-restart"),
        Step(NO_DEVICE_AFTER_RESTART, _at(7), "vmi", "kubevirt-00007"),
    ),
    # The real node's guest is its container's only process and exits with the kernel's error (restartPolicy
    # Never): the pod ends Failed and the kubelet's pod-resources List, which lists active pods, drops it. On a
    # cluster virt-handler retries the domain's start while virt-launcher runs (teesim.cluster.virthandler) and the
    # kubelet retries a Kata sandbox whose VM did not start; the model follows the cluster (Pending, retried).
    # Admission, allocation and the kernel's error are the same. docs/simulator.md explains it.
    explained=frozenset(
        {
            (NO_KEY_FOR_VMI, "pods[kubevirt-00004]", "Pending", "Failed"),
            (NO_KEY_FOR_VMI, "pod_resources_list[kubevirt-00004]", 1, None),
            *(
                (step, *difference)
                for step in (NO_KEY_FOR_KATA, DEAF_PLUGIN, NO_DEVICE_AFTER_RESTART)
                for difference in _FAILED_GUESTS
            ),
        }
    ),
    # The same failed VMI in the device manager's checkpoint file: the restarted kubelet drops an inactive pod's
    # devices in memory when pod-resources List runs (UpdateAllocatedDevices) and writes the file on its next
    # plugin update, here KubeVirt's generic plugins (kvm, tun, vhost-net) registering again, whichever comes first
    # (pkg/kubelet/cm/devicemanager/manager.go, v1.37.2).
    may_show=frozenset(
        (step, "devices_held[kubevirt-00004]", 1, None) for step in (DEAF_PLUGIN, NO_DEVICE_AFTER_RESTART)
    ),
)
# The cure: tee-key-agent (the collection's node agent, ``tee_key_pool_mode: kernel``) keeps NFD's name at what the
# kernel has free for Kubernetes, less the headroom kept for VMs outside Kubernetes (--reserve tdx=1); Kata pods
# hold it by overhead, VMIs by a container request. Nothing is admitted that the kernel cannot start.
KERNEL_POOL = Scenario(
    strategy="kernel-pool",
    plugin="agent",
    nfd_keys=True,
    settings=Settings(node_status_interval=5.0, poll_interval=0.5, overhead_counted_twice=True, reserved={"tdx": 1}),
    steps=(
        Step("start: the agent published the pool", _at(0), "start"),
        Step("a VM outside Kubernetes charges a key: the pool shrinks", _at(1), "outside-start"),
        Step("VMI kubevirt-00002", _at(2), "vmi", "kubevirt-00002"),
        Step("the outside VM stops: the pool grows", _at(3), "outside-stop"),
        Step("VMI kubevirt-00004", _at(4), "vmi", "kubevirt-00004"),
        Step("VMI kubevirt-00005: the kernel's last free key is the headroom", _at(5), "vmi", "kubevirt-00005"),
        Step("Kata kata-00006: the pool is full", _at(6), "kata", "kata-00006"),
    ),
)
SCENARIOS = {"reconciling": RECONCILING, "double-pool": DOUBLE_POOL, "kernel-pool": KERNEL_POOL}
CONSUMERS = {"vmi": Consumer.KUBEVIRT, "kata": Consumer.KATA}


def world(scenario: Scenario, until: float) -> World:
    """The scenario as teesim's world, run until ``until``."""
    steps = scenario.steps
    outside = [s.at for s in steps if s.action in ("outside-start", "outside-stop")] + [FOREVER]
    arrivals = [Arrival(outside[0], 0, Consumer.EXTERNAL, "tdx", outside[1] - outside[0], 0.0, NODE)]
    for s in steps:
        if s.action in CONSUMERS:
            seq = int(s.pod.rpartition("-")[2])
            arrivals.append(Arrival(s.at, seq, CONSUMERS[s.action], "tdx", FOREVER, LAUNCH_DELAY))
    kinds = {"plugin-kill": "plugin-crash", "kubelet-restart": "kubelet-restart"}
    faults = tuple(FaultSpec(kinds[s.action], s.at, NODE) for s in steps if s.action in kinds)
    node = NodeSpec(NODE, CURRENT, "intel", {"tdx": KEYS})
    return World(nodes=(node,), arrivals=tuple(arrivals), faults=faults, duration=until, settings=scenario.settings)


def observe_model(scenario: Scenario, step: int) -> dict:
    """What the model shows just before the step after ``step`` (or ``STEP`` after the last one)."""
    steps = scenario.steps
    until = steps[step + 1].at - 1 if step + 1 < len(steps) else steps[step].at + STEP
    sim = Simulation(world(scenario, until), get_strategy(scenario.strategy))
    for s in steps:
        if s.action == "by-name" and s.at < until:
            sim.clock.at(s.at, lambda pod=s.pod: bind_by_name(sim, pod))
    sim.run()
    node = sim.nodes[NODE]
    phases = {p.uid: "Pending" if p.phase in (Phase.PENDING, Phase.BOUND) else p.phase.value for p in sim.pods}
    rejected = {f.uid: tuple(f.message.split(": ", 1)) for f in sim.failures if f.kind in ("admission", "readmission")}
    launches = {f.uid: f.error for f in sim.failures if f.kind == "launch"}
    held = {p.uid: len(node.devices.pod_devices(p.uid).get(p.container, {}).get(RESOURCE, [])) for p in sim.pods}
    allocatable = node.status_allocatable()
    return {
        "pods": phases,
        "rejected": rejected,
        "failed_launches": launches,
        "devices_held": {uid: n for uid, n in held.items() if n},
        **model_pod_resources(sim),
        "capacity": node.devices.capacity(sim.clock.now).get(RESOURCE, 0),
        "allocatable": {resource: allocatable.get(resource, 0) for resource in scenario.resources},
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


def bind_by_name(sim: Simulation, name: str) -> None:
    """A pod created with ``spec.nodeName``: no scheduler, straight to the node's kubelet."""
    node, now = sim.nodes[NODE], sim.clock.now
    pod = vmi_pod(name, Guest.TDX, sim.strategy.vmi_requests(Guest.TDX), now, LAUNCH_DELAY, FOREVER)
    sim.pods.append(pod)
    pod.phase, pod.node, pod.bound_at = Phase.BOUND, NODE, now
    node.bound.bind(pod, pod.need())
    sim.kubelets[NODE].bound(pod)


# -- the real node ---------------------------------------------------------------------------------------------
def kata_runtime_class() -> dict:
    """The collection's Kata TDX RuntimeClass, its key on NFD's name, with a CPU and memory overhead of a tenth of
    the default: the real node has 2 CPUs, and Kubernetes 1.37 counts a running Kata pod's overhead twice when it
    has CPU or memory (kubernetes/kubernetes#139627; ``Settings.overhead_counted_twice``), so with the default (1 CPU)
    a second Kata pod is refused for CPU before its key counts (``Insufficient cpu``). The model's Kata pods never
    run short of CPU either (``Settings.node_cpu``)."""
    overhead = {"kata-qemu-tdx": {"cpu": "100m", "memory": "200Mi"}}
    return kata_classes({"kata": {"tdx": {"resource": NFD_KEYS}}}, overheads=overhead)[0]


@dataclass
class RealRun:
    """The scenario's actions on a :class:`RealNode` (``node``) of ``plane``."""

    plane: ControlPlane
    node: RealNode
    scenario: Scenario
    kata_class: dict = field(default_factory=lambda: kata_runtime_class())

    def get(self, *args: str) -> dict:
        return json.loads(self.plane.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, *objects: dict) -> None:
        """Server-side apply; namespaced objects without a namespace (the pods) go to the scenario's."""
        for o in objects:
            if o["kind"] in ("Pod", "ServiceAccount"):
                o["metadata"].setdefault("namespace", self.scenario.namespace)
        text = "\n---\n".join(json.dumps(o) for o in objects)
        self.plane.kubectl("apply", "--server-side", "--field-manager=tee-compare", "-f", "-", input=text)

    def start_plugin(self) -> None:
        """The scenario's advertiser: KubeVirt's TDX plugin, teesim's reconciling plugin or tee-key-agent."""
        node, settings, env = self.node, self.scenario.settings, dict(os.environ)
        if self.scenario.plugin == "kubevirt":
            node.start_plugin("kubevirt", kubevirt_tdx_plugin(node), run_dirs=("tdx-qgs",))
            return
        if self.scenario.plugin == "agent":
            reserve = dict(settings.reserved)
            node._spawn("agent", *tee_key_agent(node, self.plane.admin_kubeconfig, settings.poll_interval, reserve))
            return
        command = [sys.executable, "-m", "teesim.plugins.reconciling"]
        command += ["--host-root", str(node.root), "--resource-name", RESOURCE, "--misc-resource", "tdx"]
        command += ["--poll-interval", str(settings.poll_interval)]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "simulator"), env.get("PYTHONPATH")]))
        node._spawn("plugin-teesim", command, env=env)

    def start(self) -> None:
        """The namespace, the Kata RuntimeClass, NFD's keys on the Node (as nfd-master patches its status), the
        plugin; returns once the Node shows what the advertisers publish, as the model's step 0 does."""
        ns = self.scenario.namespace
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}
        self.apply(namespace, account, self.kata_class)
        if self.scenario.nfd_keys and self.scenario.plugin != "agent":
            patch = json.dumps({"status": {"capacity": {NFD_KEYS: str(KEYS)}}})
            self.plane.kubectl("patch", "node", self.node.name, "--subresource=status", "--type=merge", "-p", patch)
        self.start_plugin()

    def act(self, step: Step) -> None:
        node = self.node
        if step.action == "start":
            self.start()
        elif step.action == "outside-start":
            node._spawn("outside-vm", outside_vm(node.kernel_socket))
        elif step.action == "outside-stop":
            node._end("outside-vm", timeout=10)
        elif step.action == "vmi":
            requests = get_strategy(self.scenario.strategy).vmi_requests(Guest.TDX)
            self.apply(guest_pod(step.pod, node, requests=requests))
        elif step.action == "kata":
            self.apply(guest_pod(step.pod, node, runtime_class=self.kata_class["metadata"]["name"]))
        elif step.action == "by-name":
            self.apply(guest_pod(step.pod, node, requests={RESOURCE: 1}, node_name=node.name))
        elif step.action == "plugin-kill":
            node.processes.pop("plugin-teesim").send_signal(signal.SIGKILL)
        elif step.action == "plugin-start":
            self.start_plugin()
        elif step.action == "kubelet-restart":
            node.restart_kubelet()
        else:
            raise ValueError(f"unknown step action {step.action!r}")

    def observe(self) -> dict:
        node = self.node
        ns = self.scenario.namespace
        pods = self.get("pods", "-n", ns)["items"]
        names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
        events = self.get("events", "-n", ns, "--field-selector", "type=Warning")["items"]
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
            "allocatable": {r: int(status["allocatable"].get(r, 0)) for r in self.scenario.resources},
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


def run_steps(plane: ControlPlane, node: RealNode, scenario: Scenario, timeout: float = 90.0) -> list[dict]:
    """Each step's ``{"step", "model", "real"}``: the real node's state once it equals the model's, or as it is
    ``timeout`` seconds after the step."""
    run, records = RealRun(plane, node, scenario), []
    try:
        for index, step in enumerate(scenario.steps):
            run.act(step)
            expected = observe_model(scenario, index)

            def settled(real: dict, step: Step = step, expected: dict = expected) -> bool:
                found = differences([{"step": step.name, "model": expected, "real": real}])
                return not scenario.unexplained(found)

            began = time.monotonic()
            real = wait_for_state(run.observe, settled, timeout)
            took = round(time.monotonic() - began, 1)
            records.append({"step": step.name, "model": expected, "real": real, "settled_s": took})
    finally:
        # What this run created and others on the plane would meet: its pods (a Pending one would be bound to the
        # next node that has room) and its RuntimeClass (cluster-wide, with this run's overhead).
        ns = scenario.namespace
        plane.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false", check=False)
        plane.kubectl("delete", "runtimeclass", run.kata_class["metadata"]["name"], "--ignore-not-found", check=False)
    return records


def differences(records: list[dict]) -> list[tuple[str, str, object, object]]:
    """Every (step, what, model, real) that differs; ``what`` names the entry (``pods[kubevirt-00004]``) where
    the observation is a mapping, so that an explained difference covers that entry and nothing else."""
    found = []
    for record in records:
        model, real = record["model"], record["real"]
        for key in model:
            mine, theirs = model[key], real.get(key)
            if isinstance(mine, dict) and isinstance(theirs, dict):
                found += [
                    (record["step"], f"{key}[{entry}]", mine.get(entry), theirs.get(entry))
                    for entry in sorted(mine.keys() | theirs.keys())
                    if mine.get(entry) != theirs.get(entry)
                ]
            elif mine != theirs:
                found.append((record["step"], key, mine, theirs))
    return found


def compare(
    plane: ControlPlane, node: RealNode, scenario: Scenario, timeout: float = 90.0
) -> tuple[list[tuple[str, str, object, object]], list[tuple[str, str, object, object]]]:
    """The differences the scenario does not explain, and the explained ones that did not show, once the real node
    had ``timeout`` seconds to reach the model's state after each step (both empty: the model holds)."""
    found = differences(run_steps(plane, node, scenario, timeout))
    return scenario.unexplained(found), sorted(scenario.explained - set(found), key=str)


def wait_for_state(observe: Callable[[], dict], settled: Callable[[dict], bool], timeout: float) -> dict:
    """The real node's state once ``settled`` accepts it, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen = observe()
    while not settled(seen) and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = observe()
    return seen
