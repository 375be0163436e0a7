"""One scenario under one strategy: the whole cluster on a virtual clock.

:class:`Simulation` is the environment, as SimPy's ``Environment`` is: it builds the world and wires it,
and leaves the life of a pod on a node to that node's kubelet (:class:`~teesim.sim.node_kubelet.NodeKubelet`:
admission, device allocation, the resource predicate, launch and its retries, stop, release, restart and
re-admission). What stays here:

1. set-up: one :class:`~teesim.cluster.node.SimNode` and one ``NodeKubelet`` per node, the advertisers a
   strategy runs there (:mod:`teesim.plugins.models` wired by :mod:`teesim.strategies.wiring`), NFD
   re-discovering every ``sleepInterval``, node status syncs;
2. arrivals: a Kata pod or a VMI is created and waits (Pending) until the scheduler finds a node where
   its needs (container requests + ``spec.overhead``) fit the node's allocatable minus what bound pods
   need, or the free devices of a DRA ResourceSlice behind the name; DRA devices are allocated at
   binding, and the pod is handed to its node's kubelet. External libvirt VMs charge ``machine.slice``
   directly;
3. faults: kubelet restart (handed to the node's kubelet), plugin crash (stream broken, restart later),
   unreadable ``misc`` file;
4. observation: the failure records (the failure sink the kubelets write to), the kernel-change hook.

An :class:`Observer` sees every event; :mod:`teesim.report.metrics` turns that into the metrics.
After every event :attr:`Simulation.changed` lists the nodes whose state may differ from the last
event's, so that observing a fleet costs what changed, not what exists.
Simplifications: no network or API-server latency, VMIs are not re-created.
"""

from __future__ import annotations

import errno
import random
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from teesim.cluster import virthandler
from teesim.cluster.nfd import DEFAULT_SLEEP_INTERVAL, discover
from teesim.cluster.node import DEFAULT_COMPUTE, EXTERNAL_CGROUP, SimNode
from teesim.cluster.pods import CONSUMER_VALUE, Consumer, Phase, Pod, kata_pod, vmi_pod
from teesim.cluster.queue import Placer, SchedulingQueue
from teesim.cluster.workload import Arrival, FaultSpec
from teesim.engine.clock import HeapClock, VirtualClock
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import CGROUP_ROOT, NodeSpec
from teesim.kubelet.ratelimit import TokenBucket
from teesim.sim.node_kubelet import NodeKubelet, NodeKubeletFactory
from teesim.strategies.base import Advertiser, Strategy
from teesim.strategies.observe import ResourcePlan, ResourceSnapshot, planned_snapshot
from teesim.strategies.wiring import NodeWiring, PluginOptions, nfd_names, node_roles, wire_node

__all__ = ["Failure", "Observer", "ResourceSnapshot", "Settings", "Simulation", "World"]


@dataclass(frozen=True)
class Settings:
    """Timing and deployment knobs of the modelled components (seconds where a time)."""

    nfd_sleep_interval: float = DEFAULT_SLEEP_INTERVAL
    poll_interval: float = 1.0
    reserved: Mapping[str, int] = field(default_factory=dict)
    kubelet_restart_downtime: float = 10.0
    plugin_restart_delay: float = 10.0
    reregister_delay: float = 1.0
    node_status_interval: float = 10.0
    # Keys the unified plugin keeps for VMs outside Kubernetes (an operator's choice; default none).
    external_reserve: Mapping[str, int] = field(default_factory=dict)
    # Reconciling plugins: time between their pod-resources List and their publish, whether they
    # learn allocations from Allocate, and how often they may List.
    plugin_list_latency: float = 0.0
    plugin_tracks_allocate: bool = True
    min_list_interval: float = 0.1
    # Other pod-resources clients on every node (their calls per second, taken from the 100 QPS).
    pod_resources_background_qps: float = 0.0
    # split-nodes: the nodes NFD's rule matches (default: every second node by name).
    kata_nodes: tuple[str, ...] | None = None
    # virt-handler's workqueue back-off for a VMI whose domain did not start (teesim.cluster.virthandler).
    virt_handler_backoff_base: float = virthandler.BASE_DELAY
    virt_handler_backoff_max: float = virthandler.MAX_DELAY
    # Every node's allocatable CPU (cores) and memory (MiB), what the scheduler scores by.
    node_cpu: float = DEFAULT_COMPUTE["cpu"] / 1000
    node_memory: float = DEFAULT_COMPUTE["memory"]
    # What a plugin outside the kubelet learns through the API server, this much later: a pod's
    # PodReadyToStartContainers (the status manager's patch, then a watch) and deletion, and a DRA
    # ResourceSlice write reaching the scheduler. Default: the p99 bound of the API latency SLO for
    # mutating single-object calls, 1 s (kubernetes/community sig-scalability/slos/api_call_latency.md).
    api_latency: float = 1.0
    # Kubernetes 1.36 and 1.37 (InPlacePodLevelResourcesVerticalScaling, beta and on since 1.36): the kubelet posts a
    # pod's status.allocatedResources with its RuntimeClass overhead in it (pkg/kubelet/kubelet_pods.go
    # generateAPIPodStatus, v1.37.2) and PodRequests adds the overhead to that again (k8s.io/component-helpers
    # resource/helpers.go AggregateContainerRequests, v0.37.2), so the scheduler and the kubelet count a pod's overhead
    # twice once that status reaches them (kubernetes/kubernetes#139627, open). Measured on the real kubelet v1.37.2
    # (tests/node/test_real_node.py). Off: the rule before 1.36 and after the proposed fix, what the sweep assumes.
    overhead_counted_twice: bool = False
    # KubeVirt v1.9.0's TDX plugin does not register again after a kubelet restart: devices.kubevirt.io/tdx stays
    # at 0 until virt-handler restarts (kubevirt/kubevirt#17122; shown on the real kubelet by
    # tests/node/test_kubelet_restart.py). True: a KubeVirt with the fix proposed in #18669.
    kubevirt_tdx_reregisters: bool = False


@dataclass(frozen=True)
class World:
    """Everything a run needs besides the strategy."""

    nodes: tuple[NodeSpec, ...]
    arrivals: tuple[Arrival, ...]
    faults: tuple[FaultSpec, ...] = ()
    duration: float = 3600.0
    settings: Settings = Settings()
    seed: int = 0


@dataclass(frozen=True)
class Failure:
    """A guest that did not start: a launch error from KVM, or a kubelet admission error.

    ``error`` is the errno name the launch failed with, as QEMU reports it: ``ENOSPC`` when TDX KeyIDs are
    exhausted (``KVM_TDX_INIT_VM``), ``EBUSY`` at a cgroup's ``misc.max`` and for SEV/SNP ASIDs (QEMU's
    ``ret=-16``), ``ENOTTY`` for an SEV-ES guest without an ASID range, ``EINVAL`` without capacity; empty
    for an admission error (:mod:`teesim.kernel.kvm`).
    """

    time: float
    node: str
    consumer: str
    resource: str
    uid: str
    kind: str  # "launch", "admission", or "readmission" (a pod rejected when its kubelet restarted)
    message: str
    in_race_window: bool
    attempt: int = 1
    error: str = ""
    # An external VM that failed while VMs outside Kubernetes already held the node's declared headroom
    # (settings.reserved) or more: no pool can promise it a key without stopping a running guest (docs/key-pools.md).
    over_headroom: bool = False


class Observer(Protocol):
    def after_event(self, sim: Simulation, now: float) -> None: ...
    def on_kernel_change(self, sim: Simulation, node: str, resource: str, consumer: str, now: float) -> None: ...
    def on_failure(self, sim: Simulation, failure: Failure) -> None: ...


def _node_name(node: SimNode) -> str:
    return node.name


# Compiled (teesim._native), and so are its subclasses (teesim serve's): an interpreted subclass's
# overrides are not seen by compiled code, so none is allowed (tests/simulator/test_native_subclasses.py).
class Simulation:
    """Runs one :class:`World` under one :class:`Strategy`.

    ``incremental=False`` is the reference engine: every node counts as changed after every event,
    the scheduler tries every pending pod on every node, plugins and NFD parse their files at every
    read, and the clock is one plain heap (:class:`HeapClock`). It gives the same report, slower;
    the tests and the benchmark compare the two.

    ``node_kubelet`` builds each node's kubelet (teesim serve passes one that admits through the real
    gRPC kubelet): a collaborator passed in, since compiled code ignores an interpreted subclass's
    class attributes. ``placer`` likewise hands the scheduler's decisions to a scheduler outside the model
    (:class:`teesim.sim.kube_scheduler.KubeScheduler`: the real kube-scheduler; see :mod:`teesim.cluster.queue`).
    """

    def __init__(
        self,
        world: World,
        strategy: Strategy,
        *,
        incremental: bool = True,
        node_kubelet: NodeKubeletFactory = NodeKubelet,
        placer: Placer | None = None,
    ):
        self.world = world
        self.node_kubelet = node_kubelet
        self.strategy = strategy
        self.settings = world.settings
        self.incremental = incremental
        self.clock = VirtualClock() if incremental else HeapClock()
        self._touched: list[SimNode] = []
        # (node, misc resource) whose usage an advertiser published since the observer last looked.
        self.published: list[tuple[str, str]] = []
        self.retry_rng = random.Random(f"{world.seed}/kubelet-retries")
        self._vmi_backoff = virthandler.Backoff(
            self.settings.virt_handler_backoff_base, self.settings.virt_handler_backoff_max
        )
        roles = node_roles(strategy, [s.name for s in world.nodes], self.settings.kata_nodes)
        self.nodes: dict[str, SimNode] = {}
        for spec in world.nodes:
            if not spec.profile.has_misc:
                raise ValueError(
                    f"node {spec.name}: kernel profile {spec.profile.name!r} has no misc controller, so no "
                    "strategy can count keys there; use it with `teesim node build` to test detection"
                )
            node = SimNode(
                spec,
                random.Random(f"{world.seed}/{spec.name}/devices"),
                roles[spec.name].value,
                self._node_changed,
                {"cpu": round(self.settings.node_cpu * 1000), "memory": round(self.settings.node_memory)},
            )
            node.usage_published_at.on_publish = partial(self._usage_published, spec.name)
            node.pod_resources = TokenBucket(background_qps=self.settings.pod_resources_background_qps)
            self.nodes[spec.name] = node
        self.queue = SchedulingQueue(self.nodes, self.scheduler_need, incremental, placer)
        # Every node counts as changed by the first event, so the observer starts from a full picture.
        for node in self.nodes.values():
            node.changed = True
            self._touched.append(node)
        self.changed: list[SimNode] = list(self.nodes.values())
        # Nodes with a stopped plugin endpoint inside the kubelet's grace period.
        self._expiring: set[SimNode] = set()
        self._nfd_read: dict[str, object] = {}
        self.wiring: dict[str, NodeWiring] = {}
        self.plugins: dict[str, list] = defaultdict(list)
        self.kubelets: dict[str, NodeKubelet] = {}  # one per node, built with its plugins in _setup
        self.pods: list[Pod] = []
        self.failures: list[Failure] = []
        self.launched: dict[str, int] = defaultdict(int)
        self.completed: dict[str, int] = defaultdict(int)
        self._charge_times: dict[tuple[str, str], deque[float]] = defaultdict(lambda: deque(maxlen=64))
        self._external_seq = 0
        self._dra_names = strategy.dra_names()
        self._plans: dict[str, ResourcePlan] = {}  # misc resource -> what its snapshots need
        self.observer: Observer | None = None

    @property
    def pending(self) -> list[Pod]:
        """Pods not bound yet, in creation order."""
        return self.queue.pending

    def _usage_published(self, node: str, resource: str) -> None:
        self.published.append((node, resource))

    def _node_changed(self, node: SimNode) -> None:
        self._touched.append(node)
        self.queue.node_changed(node)

    def _collect_changed(self, now: float) -> None:
        """Set :attr:`changed` for the event that just ran and start listening afresh."""
        touched = self._touched
        if not self.incremental:
            self.changed = list(self.nodes.values())
        elif not touched and not self._expiring:
            self.changed = []
            return
        else:
            # Touched nodes in the order they changed, then the rest of the expiring ones by name:
            # a deterministic order, so that the report is the same on every run.
            changed = touched[:]
            if self._expiring:  # rare (a grace period running): no empty sort after every event
                changed += sorted((n for n in self._expiring if not n.changed), key=_node_name)
            self.changed = changed
            # Only a change of the device manager can start a grace period.
            self._expiring = {n for n in changed if (n.devices_touched or n in self._expiring) and n.expiring(now)}
        for node in touched:
            node.changed = node.devices_touched = False
        touched.clear()

    # -- set-up ------------------------------------------------------------------------------------
    def resources(self, node: SimNode) -> list[str]:
        return node.kernel.misc.resources() if node.kernel.misc else []

    def _plugin_options(self) -> PluginOptions:
        s = self.settings
        return PluginOptions(
            s.min_list_interval,
            s.plugin_list_latency,
            s.plugin_tracks_allocate,
            s.external_reserve,
            s.api_latency,
            s.reserved,
            s.kubevirt_tdx_reregisters,
        )

    def _setup(self) -> None:
        settings, clock, until = self.settings, self.clock, self.world.duration
        options = self._plugin_options()
        for node in self.nodes.values():
            wiring = wire_node(self.strategy, node, clock, self.resources(node), options)
            node.watch_dra()
            self.wiring[node.name] = wiring
            self.plugins[node.name] = wiring.plugins
            self.kubelets[node.name] = self._node_kubelet(node, wiring.plugins)
            for plugin in wiring.plugins:
                plugin.skip_unchanged = self.incremental
            clock.every(settings.nfd_sleep_interval, partial(self._nfd, node), start=0.0, until=until)
            for plugin in wiring.plugins:
                clock.at(0.0, plugin.start)
            for plugin in wiring.pollers:
                clock.every(settings.poll_interval, plugin.poll, start=settings.poll_interval, until=until)
            # Scheduled after the plugins' start so the first sync at t=0 already sees their devices.
            clock.every(settings.node_status_interval, partial(self._sync_status, node), start=0.0, until=until)
        for arrival in self.world.arrivals:
            clock.at(arrival.time, partial(self._arrive, arrival))
        for fault in self.world.faults:
            if fault.node not in self.nodes:
                raise ValueError(f"fault {fault.kind} at {fault.at}s names unknown node {fault.node!r}")
            clock.at(fault.at, partial(self._fault, fault))

    def _node_kubelet(self, node: SimNode, plugins: list) -> NodeKubelet:
        served = frozenset(self._dra_names) if self.strategy.dra_overhead_served else frozenset()
        return self.node_kubelet(self, node, plugins, self._vmi_backoff, served)

    def _sync_status(self, node: SimNode) -> None:
        node.sync_status(self.clock.now)

    def _nfd(self, node: SimNode) -> None:
        if self.incremental:
            # Discovery reads misc.capacity alone: the same capacities (and the same unreadable
            # files), the same resources, however many guests were charged since.
            revision = node.capacity_revision()
            if self._nfd_read.get(node.name) == revision:
                return
            self._nfd_read[node.name] = revision
        wiring = self.wiring[node.name]
        reserved = self.settings.reserved if wiring.nfd_reserved else None
        names = nfd_names(wiring.nfd_misc)
        node.nfd = {k: v for k, v in discover(node.read, reserved).items() if k in names}

    # -- guests ------------------------------------------------------------------------------------
    def _arrive(self, arrival: Arrival) -> None:
        uid = f"{arrival.consumer.value}-{arrival.seq:05d}"
        if arrival.consumer is Consumer.EXTERNAL:
            self._start_external(arrival, uid)
            return
        now, guest = self.clock.now, arrival.kind
        if arrival.consumer is Consumer.KATA:
            overhead = self.strategy.kata_overhead(guest.misc_resource)
            pod = kata_pod(uid, guest, now, arrival.launch_delay, arrival.duration, overhead)
        else:
            requests = self.strategy.vmi_requests(guest)
            pod = vmi_pod(uid, guest, requests, now, arrival.launch_delay, arrival.duration)
        self.pods.append(pod)
        self.queue.add(pod)

    def _start_external(self, arrival: Arrival, uid: str) -> None:
        node = self.nodes.get(arrival.node or "") if arrival.node else next(iter(self.nodes.values()))
        if node is None:
            raise ValueError(f"external VM {uid} names unknown node {arrival.node!r}")
        self._external_seq += 1
        cgroup = f"{EXTERNAL_CGROUP}/machine-qemu-{self._external_seq}-{uid}.scope"
        now = self.clock.now
        try:
            node.charge(Consumer.EXTERNAL, cgroup, arrival.resource, arrival.kind.value)
        except ChargeError as exc:
            held = node.charged[(Consumer.EXTERNAL, arrival.resource)]
            over = held >= self.settings.reserved.get(arrival.resource, 0)
            self.record_failure(
                node, Consumer.EXTERNAL, arrival.resource, uid, "launch", exc, now, now, over_headroom=over
            )
            return
        self.kernel_changed(node, arrival.resource, Consumer.EXTERNAL)
        self.launched[Consumer.EXTERNAL.value] += 1

        misc = node.kernel.misc
        assert misc is not None  # charged above

        def stop() -> None:
            node.uncharge(Consumer.EXTERNAL, cgroup, arrival.resource, arrival.kind.value)
            misc.remove_cgroup(cgroup)
            self.completed[Consumer.EXTERNAL.value] += 1
            self.kernel_changed(node, arrival.resource, Consumer.EXTERNAL, charged=False)

        self.clock.after(arrival.duration, stop)

    def scheduler_need(self, pod: Pod) -> dict[str, int]:
        """What the scheduler counts for ``pod``: requests plus overhead, except overhead naming a
        DRA-backed resource when that is not served (KEP-5004 allocates for container requests)."""
        need = pod.need()
        if self._dra_names and not self.strategy.dra_overhead_served:
            for name, amount in pod.overhead.items():
                if name in self._dra_names:
                    need[name] -= amount
                    if not need[name]:
                        del need[name]
        return need

    def _bind(self, node: SimNode, pod: Pod, need: dict[str, int]) -> None:
        pod.phase, pod.node, pod.bound_at = Phase.BOUND, node.name, self.clock.now
        if node.dra:  # most strategies publish no ResourceSlices: no sets to build and sort
            for name in sorted(set(need) & set(node.dra)):
                pod.dra_devices[name] = node.dra[name].allocate(pod.uid, need[name])
        node.bound.bind(pod, need)
        self.kubelets[node.name].bound(pod)

    def record_failure(
        self,
        node: SimNode,
        consumer: Consumer,
        resource: str,
        uid: str,
        kind: str,
        exc: Exception,
        since: float,
        until: float,
        attempt: int = 1,
        in_race: bool | None = None,
        over_headroom: bool = False,
    ) -> Failure:
        # The race window: a plugin poll, then a node status sync, then the guest's launch delay.
        now = self.clock.now
        if in_race is None:
            window_start = since - self.settings.poll_interval - self.settings.node_status_interval
            recent = self._charge_times[(node.name, resource)]
            in_race = any(window_start <= t <= until for t in recent)
        message, error = str(exc), ""
        if isinstance(exc, OSError) and exc.errno:
            error = errno.errorcode.get(exc.errno, "")
            if error:
                message = f"{error}: {exc.strerror}"
        who = CONSUMER_VALUE[consumer]
        failure = Failure(now, node.name, who, resource, uid, kind, message, in_race, attempt, error, over_headroom)
        self.failures.append(failure)
        if self.observer is not None:
            self.observer.on_failure(self, failure)
        return failure

    def kernel_changed(self, node: SimNode, resource: str, consumer: Consumer, charged: bool = True) -> None:
        if charged:
            self._charge_times[(node.name, resource)].append(self.clock.now)
        if self.observer is not None:
            self.observer.on_kernel_change(self, node.name, resource, CONSUMER_VALUE[consumer], self.clock.now)

    # -- faults ------------------------------------------------------------------------------------
    def _fault(self, fault: FaultSpec) -> None:
        node = self.nodes[fault.node]
        if fault.kind == "kubelet-restart":
            self.kubelets[node.name].restart()
        elif fault.kind == "plugin-crash":
            for plugin in self.plugins[node.name]:
                plugin.crash()
                self.clock.after(self.settings.plugin_restart_delay, plugin.start)
        elif fault.kind == "sysfs-unreadable":
            path = f"{CGROUP_ROOT}/{fault.file}"
            node.unreadable.add(path)
            self.clock.after(fault.duration, lambda: node.unreadable.discard(path))
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    # -- observation -------------------------------------------------------------------------------
    def reserve(self, resource: str) -> int:
        """Keys the VMI pool's advertiser keeps for VMs outside Kubernetes."""
        if self.strategy.reserve_external:
            return self.settings.reserved.get(resource, 0)
        if self.strategy.advertiser in (Advertiser.UNIFIED, Advertiser.DRA, Advertiser.KERNEL):
            return self.settings.external_reserve.get(resource, 0)
        return 0

    def snapshot(self, node: SimNode, resource: str) -> ResourceSnapshot:
        plan = self._plans.get(resource)
        if plan is None:
            plan = self._plans[resource] = ResourcePlan.of(self.strategy, resource, self.reserve(resource))
        return planned_snapshot(self.strategy, node, plan, self.clock.now)

    def snapshots(self, nodes: Iterable[SimNode] | None = None) -> list[ResourceSnapshot]:
        """Snapshots of every misc resource of ``nodes`` (default: every node)."""
        nodes = self.nodes.values() if nodes is None else nodes
        return [self.snapshot(node, r) for node in nodes for r in self.resources(node)]

    def run(self, observer: Observer | None = None, progress: Callable[[float], None] | None = None) -> None:
        self.observer = observer
        self._setup()
        duration = self.world.duration
        step = max(duration / 100.0, 1e-9)
        next_report = [0.0]

        pending = self.queue.pending
        run_pass, bind = self.queue.run_pass, self._bind  # looked up once, not after every event

        def after(now: float) -> None:
            if pending:
                run_pass(bind)
            if self._touched or self._expiring or not self.incremental:
                self._collect_changed(now)
            elif self.changed:
                self.changed = []
            if observer is not None:
                observer.after_event(self, now)
            elif self.published:
                self.published.clear()
            if progress is not None and now >= next_report[0]:
                progress(min(now / duration, 1.0))
                next_report[0] = now + step

        self.clock.run(duration, after)
        if progress is not None:
            progress(1.0)
