"""``teesim run --real-node``'s real side: one node of a scenario played, paced, on a real node (issue 46, item 4).

:func:`play` starts a :class:`kube_control_plane.ControlPlane` with the real kube-scheduler and a
:class:`kube_node.RealNode` with the node's TDX keys in teesim's kernel, then what the strategy's node runs
(``teesim.report.real_node.NodePlan``):

* NFD's count under Kata's resource name (``tdx.intel.com/keys``), patched into the Node's status capacity as
  nfd-master does, where the strategy has NFD's rule serve it (lowered by the scenario's ``reserved`` for
  ``secure-guest-resources``);
* KubeVirt v1.9.0's own TDX device plugin (``upstream/build.sh kubevirt-plugins``) against the real kubelet, as
  ``tests/node/test_real_node.py`` runs it, where the strategy's VMIs request ``devices.kubevirt.io/tdx``;
* the collection's node agent (``tee-key-agent``, ``tee_key_pool_mode: kernel``) for the kernel-pool strategies: it
  keeps ``tdx.intel.com/keys`` at what the kernel has free less its ``--reserve``, polling at the model's interval
  divided by the pace; VMIs and Kata pods both take that name;
* the collection's ``kata-qemu-tdx`` RuntimeClass with the strategy's key in its overhead (its CPU and memory
  overhead left out: the node is this machine, whose CPUs would refuse pods the model's node takes).

Each arrival comes at its time divided by the pace: a Kata pod (the RuntimeClass), a virt-launcher-shaped pod (the
strategy's VMI request in its ``compute`` container) or, for a VM outside Kubernetes, a process in the node's own
cgroup launching through the kernel's socket. A pod's guest launches the model's launch delay / pace after the
pod's creation, or when its container starts if later (``teesim-guest -not-before``), holds its key for its
duration / pace (``-hold``), then exits 0. A refused launch is tried again by the guest itself, after the model's waits
divided by the pace (``real_node.retry_flags``: virt-handler's back-off for a VMI, the kubelet's sandbox retry for a
Kata pod), its pod keeping its device and its place in the scheduler's count meanwhile; a VM outside Kubernetes is
not retried. At the scenario's end (divided by the pace) :func:`observe` reads what happened: the pods from the API
server (binding, the kubelet's admission reasons), every launch from the guests' logs, the VMs' answers and
``misc.current``. Everything started is stopped and removed on the way out, also on Ctrl-C or a failure
(``RealNode.stop``, the plane's ``__exit__``).
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kube_control_plane import REPO_ROOT, ControlPlane
from kube_node import (
    KATA_HANDLERS,
    TDX_NODE_LABELS,
    RealNode,
    guest_pod,
    kubevirt_tdx_plugin,
    outside_vm,
    runtimeclasses,
    tee_key_agent,
)

sys.path.insert(0, str(REPO_ROOT / "simulator"))
from teesim._collection import tee
from teesim.cluster.pods import Consumer, Guest
from teesim.cluster.workload import Arrival
from teesim.report.real_node import NodePlan, empty_outcome, launch_errors, retry_flags, uid
from teesim.sim.simulation import Settings

NAMESPACE = "tee-real-run"
KATA_CLASS = runtimeclasses.class_name("tdx", False)


def play(node_plan: NodePlan, pace: float, say: Callable[[str], None]) -> dict:
    """Run the node, paced; returns what the real node showed (``teesim.report.real_node.empty_outcome``'s shape)."""
    started = time.monotonic()
    with ControlPlane(scheduler=True) as plane:
        options = {"runtime_handlers": KATA_HANDLERS, "capacity": {"tdx": node_plan.keys}, "labels": TDX_NODE_LABELS}
        with RealNode(plane, node_plan.node.name, **options) as node:
            say(f"node {node.name} up in {time.monotonic() - started:.0f} s (workdir {node.workdir})")
            advertise(plane, node, node_plan, pace)
            began = datetime.datetime.now(datetime.UTC)
            externals = arrive(plane, node, node_plan, pace, say)
            return observe(plane, node, node_plan, externals, Clock(began, pace))


def advertise(plane: ControlPlane, node: RealNode, node_plan: NodePlan, pace: float) -> None:
    """What the strategy's node advertises, and the namespace and RuntimeClass the pods use."""
    if node_plan.nfd_keys is not None:
        patch = {"status": {"capacity": {tee.NFD_TDX_KEYS: str(node_plan.nfd_keys)}}}
        plane.kubectl("patch", "node", node.name, "--subresource=status", "--type=merge", "-p", json.dumps(patch))
        node.wait_allocatable(tee.NFD_TDX_KEYS, node_plan.nfd_keys)
    if node_plan.kubevirt_plugin:
        node.start_plugin("kubevirt", kubevirt_tdx_plugin(node), run_dirs=("tdx-qgs",))
        node.wait_allocatable(tee.KUBEVIRT_TDX, node_plan.keys)
    if node_plan.agent_reserve is not None:
        interval = node_plan.scenario.world.settings.poll_interval / pace  # the model's poll, in wall time
        reserve = {"tdx": node_plan.agent_reserve}
        node._spawn("agent", *tee_key_agent(node, plane.admin_kubeconfig, interval, reserve))
        node.wait_allocatable(tee.NFD_TDX_KEYS, max(node_plan.keys - node_plan.agent_reserve, 0))
    key = node_plan.strategy.kata_key_name("tdx")
    kata_class = runtimeclasses.kata_classes({"kata": {"tdx": {"resource": key}}}, overheads={KATA_CLASS: {}})[0]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}}
    apply(plane, namespace, account, kata_class)


def apply(plane: ControlPlane, *objects: dict) -> None:
    text = "\n---\n".join(json.dumps(o) for o in objects)
    plane.kubectl("apply", "--server-side", "--field-manager=teesim-real-run", "-f", "-", input=text)


def arrive(
    plane: ControlPlane, node: RealNode, node_plan: NodePlan, pace: float, say: Callable[[str], None]
) -> list[str]:
    """Create each arrival at its time / ``pace``; returns, at the scenario's end / ``pace``, the VMs started
    outside Kubernetes."""
    start, duration = time.monotonic(), node_plan.scenario.world.duration
    vmi_requests, settings = node_plan.strategy.vmi_requests(Guest.TDX), node_plan.scenario.world.settings
    pending = sorted(node_plan.arrivals)
    externals: list[str] = []
    next_report = 0.0
    while True:
        now = (time.monotonic() - start) * pace  # scenario time
        due = [a for a in pending if a.time <= now]
        pending = pending[len(due) :]
        created = time.time()
        made = {"vmi_requests": vmi_requests, "settings": settings, "created": created}
        pods = [pod(a, node, pace, **made) for a in due if a.consumer is not Consumer.EXTERNAL]
        if pods:
            apply(plane, *pods)
        for arrival in (a for a in due if a.consumer is Consumer.EXTERNAL):
            externals.append(uid(arrival))
            node._spawn(uid(arrival), outside_vm(node.kernel_socket, arrival.duration / pace))
        if now >= next_report:
            created = len(node_plan.arrivals) - len(pending)
            say(f"{now:6.0f} of {duration:g} s: {created} of {len(node_plan.arrivals)} guests created")
            next_report += duration / 10
        if now >= duration:
            return externals
        upcoming = min([pending[0].time if pending else duration, next_report, duration])
        time.sleep(min(max((upcoming - now) / pace, 0.05), 1.0))


def pod(
    arrival: Arrival, node: RealNode, pace: float, *, vmi_requests: dict[str, int], settings: Settings, created: float
) -> dict:
    """A Kata pod or a virt-launcher-shaped pod whose guest launches the model's launch delay / ``pace`` after the
    pod's creation (``created``, Unix time; or as soon as it runs) and holds one TDX key for the arrival's
    duration / ``pace``."""
    if arrival.kind is not Guest.TDX:
        raise ValueError(f"{uid(arrival)}: a {arrival.kind.value} guest; the real node runs TDX guests only")
    kata = arrival.consumer is Consumer.KATA
    return guest_pod(
        uid(arrival),
        node,
        guest_args=(
            f"-not-before={created + arrival.launch_delay / pace:.3f}",
            "-hold",
            f"{arrival.duration / pace:.3f}s",
            *retry_flags(arrival.consumer, settings, pace),
        ),
        requests=None if kata else vmi_requests,
        runtime_class=KATA_CLASS if kata else None,
        container="workload" if kata else "compute",
        namespace=NAMESPACE,
        labels={"teesim.dev/consumer": arrival.consumer.value},
    )


@dataclass(frozen=True)
class Clock:
    """Wall-clock stamps as scenario seconds since the first arrival could come."""

    began: datetime.datetime
    pace: float

    def scenario_time(self, stamp: str) -> float:
        seen = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        return round((seen - self.began).total_seconds() * self.pace)


def observe(plane: ControlPlane, node: RealNode, node_plan: NodePlan, externals: list[str], clock: Clock) -> dict:
    """What the real node shows now, counted as the model's outcome is (``real_node.model_outcome``): the pods from
    the API server, their guests' launches from the containers' logs, the VMs' answers, ``misc.current``."""
    out, failed = empty_outcome(), []
    for arrival in node_plan.arrivals:
        out["arrived"][arrival.consumer.value] += 1
    for item in json.loads(plane.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]:
        consumer, reason = item["metadata"]["labels"]["teesim.dev/consumer"], item["status"].get("reason", "")
        guest = launches(node, item, clock)
        out["guests"][item["metadata"]["name"]] = guest
        if reason.startswith("OutOf") or reason == "UnexpectedAdmissionError":  # the kubelet's admission
            out["admission_rejected"][consumer] += 1
            continue
        if guest["errors"]:
            out["failed_launch"][consumer] += 1
            failed.append((consumer, guest["errors"][0]))
        if guest["started"] is not None:
            out["started"][consumer] += 1
        elif not guest["errors"]:
            out["unscheduled" if guest["bound"] is None else "not_started"][consumer] += 1
    for name in externals:
        answer = node.log_tail(name).partition("\n")[0].split()
        if answer[:1] == ["ok"]:
            out["started"]["external"] += 1
        elif answer[:1] == ["error"]:
            out["failed_launch"]["external"] += 1
            failed.append(("external", answer[1]))
        else:
            out["not_started"]["external"] += 1
    out["launch_errors"] = launch_errors(failed)
    out["misc_current"] = int((node.root / "sys/fs/cgroup/misc.current").read_text().split()[1])
    for guest in out["guests"].values():
        del guest["errors"]
    return out


def launches(node: RealNode, item: dict, clock: Clock) -> dict:
    """A pod's binding and its guest's launches, in scenario seconds, from its container's log in the kubelet's
    ``podLogsDirectory`` (CRI format: ``<RFC 3339 time> <stream> <tag> <line>``): each refused launch is a line
    ``teesim-guest: launch of tdx 1 failed: ENOSPC: ...``, the one that succeeds ``... charged to ...``."""
    scheduled = [c for c in item["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    bound = scheduled[0]["lastTransitionTime"] if scheduled and scheduled[0]["status"] == "True" else None
    meta = item["metadata"]
    errors, started = [], None
    for log in sorted((node.workdir / "pod-logs").glob(f"{meta['namespace']}_{meta['name']}_{meta['uid']}/*/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            stamp, _, message = line.partition(" ")
            if "failed: " in message:
                errors.append(message.split("failed: ", 1)[1].split(":", 1)[0])
            elif " charged to " in message and started is None:
                started = clock.scenario_time(stamp)
    return {
        "bound": None if bound is None else clock.scenario_time(bound),
        "started": started,
        "tries": len(errors) + (started is not None),
        "errors": errors,
    }
