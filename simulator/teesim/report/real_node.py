"""``teesim run --real-node``: one node of a scenario played on a real node, beside the model's run of it.

This module is the part that needs no root: what may run (:func:`plan`, refusing what is not driven yet), whether
this machine can run it (:func:`unavailable`), the model's outcome for the same node (:func:`model_outcome`) and
the side-by-side table (:func:`format_outcomes`). The real node itself is ``scripts/real_node_run.py`` of the
checkout this package lives in (``scripts/kube_node.py``'s ``RealNode`` joined to ``scripts/kube_control_plane.py``'s
``ControlPlane``, issue 46): those scripts are not part of the installed package, so outside a checkout the option
is refused.

Which guests the node gets: every arrival of a one-node scenario; on a scenario of several nodes, the pods the
model's scheduler bound to this node in a run of the whole scenario under the same strategy, and the VMs outside
Kubernetes started on this node. The model's column is a run of those same arrivals on this node alone.

Both columns count the same things: guests that arrived, started, failed a launch (with the kernel's errors), were
refused by the kubelet's admission, were never scheduled, were bound with no launch tried at the end, and
``misc.current`` at the end. The model counts a pod's RuntimeClass overhead once (its default): the real node's pods
have no CPU or memory request or overhead (the node is this machine), so their ``status.resources`` holds no
requests and v1.37.2's ``AggregateContainerRequests`` does not take ``status.allocatedResources``, where the
overhead would count a second time (k8s.io/component-helpers v0.37.2 ``resource/helpers.go``;
kubernetes/kubernetes#139627 needs a pod with CPU or memory requests, as in tests/node/test_real_node.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teesim._collection import CHECKOUT
from teesim.cluster.pods import Consumer, Guest, Phase
from teesim.cluster.workload import Arrival
from teesim.kernel.node import NodeSpec
from teesim.kubelet import podworkers
from teesim.sim.scenario import Scenario
from teesim.sim.simulation import Settings, Simulation, World
from teesim.strategies.base import STRATEGIES, Advertiser, Strategy, get_strategy

# Strategies whose node needs only what a real node here can run: KubeVirt v1.9.0's own TDX device plugin (its
# static count of misc.capacity), NFD's count patched into the Node's status as nfd-master does, and the collection's
# node agent (tee-key-agent, the kernel pool). The reconciling, unified and DRA strategies need teesim's plugins or a
# DRA driver wired to the real kubelet: not driven yet.
DRIVEN_ADVERTISERS = (Advertiser.STATIC, Advertiser.NFD, Advertiser.KERNEL)
SUPPORTED = tuple(name for name, s in STRATEGIES.items() if s.advertiser in DRIVEN_ADVERTISERS and not s.split_nodes)
# A bundled scenario in about three minutes of wall time by default.
DEFAULT_WALL_S = 180.0
CONSUMERS = tuple(c.value for c in (Consumer.KATA, Consumer.KUBEVIRT, Consumer.EXTERNAL))
BUILDS = "make k8s node upstream"


class RealNodeRefused(ValueError):
    """Why ``teesim run --real-node`` does not run (one line; ``teesim run: error: ...``)."""


@dataclass(frozen=True)
class NodePlan:
    """One node of a scenario, under one strategy, as both the real node and the model play it."""

    scenario: Scenario
    node: NodeSpec
    strategy: Strategy
    arrivals: tuple[Arrival, ...]

    @property
    def keys(self) -> int:
        return self.node.resolved_capacity()["tdx"]

    @property
    def world(self) -> World:
        """The model's world for this node alone (the overhead counted once: see the module docstring)."""
        whole = self.scenario.world
        settings = dataclasses.replace(whole.settings, overhead_counted_twice=False)
        return World((self.node,), self.arrivals, (), whole.duration, settings, whole.seed)

    @property
    def nfd_keys(self) -> int | None:
        """The count NFD's rule publishes under Kata's resource name here, or None where no rule serves it."""
        layout = self.strategy.layout("tdx")
        if not layout.nfd_keys:
            return None
        reserved = self.scenario.world.settings.reserved.get("tdx", 0) if layout.nfd_reserved else 0
        return max(self.keys - reserved, 0)

    @property
    def kubevirt_plugin(self) -> bool:
        return self.strategy.layout("tdx").plugin is Advertiser.STATIC

    @property
    def agent_reserve(self) -> int | None:
        """The node agent's ``--reserve`` of TDX keys where the strategy is the kernel pool, else None: the scenario's
        headroom (``reserved``) for ``kernel-pool``, ``external_reserve`` (default none) for the variant without it,
        as the model wires it (``teesim.strategies.wiring``)."""
        if self.strategy.layout("tdx").plugin is not Advertiser.KERNEL:
            return None
        settings = self.scenario.world.settings
        return (settings.reserved if self.strategy.reserve_external else settings.external_reserve).get("tdx", 0)

    def default_pace(self) -> float:
        return max(self.scenario.world.duration / DEFAULT_WALL_S, 1.0)


def uid(arrival: Arrival) -> str:
    """The model's name of the guest (``Simulation._arrive``), also its pod's name on the real node."""
    return f"{arrival.consumer.value}-{arrival.seq:05d}"


def plan(scenario: Scenario, node_name: str | None, strategies: list[str] | None) -> NodePlan:
    """What ``teesim run --real-node`` plays, or :class:`RealNodeRefused` saying why it cannot."""
    strategy = _one_strategy(strategies)
    nodes = {n.name: n for n in scenario.world.nodes}
    name = node_name or scenario.world.nodes[0].name
    if name not in nodes:
        raise RealNodeRefused(f"--node {name}: scenario {scenario.name} has nodes {', '.join(nodes)}")
    node = nodes[name]
    if node.vendor != "intel" or set(node.resolved_capacity()) != {"tdx"}:
        raise RealNodeRefused(
            f"--real-node drives TDX nodes only (KubeVirt's TDX plugin); node {name} of {scenario.name} is "
            f"{node.vendor} with {', '.join(sorted(node.resolved_capacity()))}"
        )
    faults = [f"{f.kind} at {f.at:g} s" for f in scenario.world.faults if f.node == name]
    if faults:
        raise RealNodeRefused(f"--real-node does not inject faults yet; node {name} has {', '.join(faults)}")
    return NodePlan(scenario, node, strategy, _arrivals_of(scenario, name, strategy))


def _one_strategy(strategies: list[str] | None) -> Strategy:
    chosen = strategies or ["double-pool"]
    if len(chosen) > 1:
        raise RealNodeRefused(f"--real-node runs one --strategy, got {', '.join(chosen)}")
    if chosen[0] not in SUPPORTED:
        raise RealNodeRefused(
            f"--real-node drives {', '.join(SUPPORTED)} (KubeVirt's static TDX plugin, NFD's count, the node agent); "
            f"{chosen[0]} needs teesim's plugins or a DRA driver on the real kubelet: not driven yet"
        )
    return get_strategy(chosen[0])


def _arrivals_of(scenario: Scenario, name: str, strategy: Strategy) -> tuple[Arrival, ...]:
    world = scenario.world
    if len(world.nodes) == 1:
        return world.arrivals
    settings = dataclasses.replace(world.settings, overhead_counted_twice=False)
    sim = Simulation(dataclasses.replace(world, settings=settings), strategy)
    sim.run()
    bound_here = {p.uid for p in sim.pods if p.node == name}
    return tuple(
        a for a in world.arrivals if (a.node == name if a.consumer is Consumer.EXTERNAL else uid(a) in bound_here)
    )


def retry_flags(consumer: Consumer, settings: Settings, pace: float) -> list[str]:
    """``teesim-guest``'s retry of a refused launch, the model's rule with its waits divided by ``pace``: a VMI's
    is virt-handler's back-off (``teesim.cluster.virthandler``: the base doubling to the cap), a Kata pod's the
    kubelet's sandbox retry (``teesim.kubelet.podworkers.sandbox_retry_at``: the back-off period plus up to half
    of it at random; the sync loop's 1 s tick left out)."""
    if consumer is Consumer.KUBEVIRT:
        first, factor, cap, jitter = settings.virt_handler_backoff_base, 2.0, settings.virt_handler_backoff_max, 0.0
    else:
        first, factor, cap, jitter = podworkers.BACKOFF_PERIOD, 1.0, 0.0, podworkers.JITTER_FACTOR
        jitter *= podworkers.BACKOFF_PERIOD
    waits = {"-retry": first, "-retry-max": cap, "-retry-jitter": jitter}
    return [*(f"{flag}={seconds / pace:.6f}s" for flag, seconds in waits.items()), f"-retry-factor={factor:g}"]


# -- the machine --------------------------------------------------------------------------------------------------
def scripts_dir() -> Path:
    """The checkout's ``scripts/`` holding the real node's code; refused outside a checkout."""
    scripts = CHECKOUT / "scripts"
    if not (scripts / "real_node_run.py").is_file() or not (scripts / "kube_node.py").is_file():
        raise RealNodeRefused(
            f"--real-node runs the real node of a confidential.tee checkout (scripts/kube_node.py); teesim here is "
            f"installed from {CHECKOUT}, not a checkout: run it from one"
        )
    return scripts


def unavailable(node_plan: NodePlan) -> str | None:
    """Why this machine cannot run the node (root, tools, builds), in one line; None when it can."""
    scripts = scripts_dir()
    if os.geteuid() != 0:
        return "--real-node needs root (cgroups, mount namespaces, runc): run it as root"
    for tool in ("go", "unshare", "nsenter", "runc"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin") is None:
            return f"--real-node needs {tool} (make sysdeps; Go for the builds)"
    checks = [("k8s", [sys.executable, str(scripts / "build_k8s.py"), "--print"])]
    checks.append(("node", [sys.executable, str(scripts / "build_node.py"), "--print"]))
    if node_plan.kubevirt_plugin:
        checks.append(("upstream", [str(CHECKOUT / "upstream" / "build.sh"), "--print", "kubevirt-plugins"]))
    missing = [name for name, command in checks if subprocess.run(command, capture_output=True).returncode != 0]
    if missing:
        return f"--real-node needs the builds of `{BUILDS}` ({', '.join(missing)} not built): run it in {CHECKOUT}"
    return None


def play(node_plan: NodePlan, pace: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The real node's outcome (``scripts/real_node_run.py`` of the checkout, imported from there)."""
    sys.path.insert(0, str(scripts_dir()))
    import real_node_run  # type: ignore[import-not-found]  # the checkout's scripts/, not part of the package

    return real_node_run.play(node_plan, pace, say)


# -- the model's column --------------------------------------------------------------------------------------------
def empty_outcome() -> dict[str, Any]:
    counts = ("arrived", "started", "failed_launch", "admission_rejected", "unscheduled", "not_started")
    empty = {key: dict.fromkeys(CONSUMERS, 0) for key in counts}
    return {**empty, "launch_errors": {}, "misc_current": 0, "guests": {}}


def model_outcome(node_plan: NodePlan) -> dict[str, Any]:
    """The model's run of the node's arrivals, counted as :func:`format_outcomes` shows them."""
    sim = Simulation(node_plan.world, node_plan.strategy)
    sim.run()
    out = empty_outcome()
    for arrival in node_plan.arrivals:
        out["arrived"][arrival.consumer.value] += 1
    for consumer, count in sim.launched.items():
        out["started"][consumer] += count
    first_failure: dict[str, Any] = {}
    for failure in sim.failures:
        if failure.kind == "launch":
            first_failure.setdefault(failure.uid, failure)
        elif failure.kind == "admission":
            out["admission_rejected"][failure.consumer] += 1
    for failure in first_failure.values():
        out["failed_launch"][failure.consumer] += 1
    out["launch_errors"] = launch_errors((f.consumer, f.error) for f in first_failure.values())
    for pod in sim.pods:
        if pod.phase is Phase.PENDING:
            out["unscheduled"][pod.consumer.value] += 1
        elif pod.phase is Phase.BOUND and not pod.attempts:
            out["not_started"][pod.consumer.value] += 1
    out["misc_current"] = sim.nodes[node_plan.node.name].usage(Guest.TDX.misc_resource)
    out["guests"] = {
        pod.uid: {
            "bound": None if pod.bound_at is None else round(pod.bound_at),
            "started": None if pod.started_at is None else round(pod.started_at),
            "tries": pod.attempts,
        }
        for pod in sim.pods
    }
    return out


def launch_errors(pairs: Iterable[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """``{consumer: {errno name: count}}`` from (consumer, errno name) pairs."""
    counted = Counter(pairs)
    out: dict[str, dict[str, int]] = {}
    for (consumer, error), count in sorted(counted.items()):
        out.setdefault(consumer, {})[error or "?"] = count
    return out


# -- the table ---------------------------------------------------------------------------------------------------
ROWS = (
    ("guests arrived", "arrived"),
    ("guests started", "started"),
    ("failed a launch", "failed_launch"),
    ("rejected at admission", "admission_rejected"),
    ("never scheduled", "unscheduled"),
    ("bound, no launch tried at the end", "not_started"),
)


def format_outcomes(node_plan: NodePlan, pace: float, real: dict[str, Any], model: dict[str, Any]) -> str:
    """The real node's numbers beside the model's, per consumer."""
    scenario, world = node_plan.scenario, node_plan.scenario.world
    lines = [
        f"scenario {scenario.name} (seed {scenario.seed}), node {node_plan.node.name} ({node_plan.keys} TDX keys), "
        f"strategy {node_plan.strategy.name}: {world.duration:g} s at pace {pace:.3g} ({world.duration / pace:.0f} s)"
    ]
    rows = [("", "real", "model")]
    for label, key in ROWS:
        rows.append((label, str(sum(real[key].values())), str(sum(model[key].values()))))
        rows += [(f"  {c}", str(real[key][c]), str(model[key][c])) for c in CONSUMERS if real[key][c] or model[key][c]]
    for consumer in CONSUMERS:
        shown = [_shown(side["launch_errors"].get(consumer, {})) for side in (real, model)]
        if any(shown):
            rows.append((f"launch errors: {consumer}", *shown))
    rows.append(("misc.current at the end", str(real["misc_current"]), str(model["misc_current"])))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        lines.append(f"{row[0].ljust(widths[0])}  {row[1].rjust(widths[1])}  {row[2].rjust(widths[2])}".rstrip())
    lines.append("a refused launch is tried again on both, after the model's waits (on the real node divided by the")
    lines.append('pace, by the guest); "failed a launch" counts guests refused at least once (docs/simulator.md)')
    return "\n".join(lines) + "\n"


def _shown(errors: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(errors.items()))
