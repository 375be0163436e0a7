"""One scenario under one strategy: the whole cluster on a virtual clock.

Wires the layers below into the life of every guest:

1. a Kata pod or a VMI is created and waits (Pending) until the scheduler finds a node where its needs
   (container requests + ``spec.overhead``) fit the node's allocatable minus what bound pods need;
2. the kubelet admits it: device-plugin resources get one ``Allocate`` per container from the device
   manager (failure = ``UnexpectedAdmissionError``, the pod fails); NFD resources need no allocation;
3. ``launch_delay`` later QEMU creates the guest and KVM charges one key in the pod's cgroup: EBUSY means
   the launch fails, exactly as a real VM start fails;
4. after its lifetime the guest stops, the key is uncharged, the pod succeeds; the scheduler frees its
   requests at once, the kubelet frees its devices lazily.

External libvirt VMs charge ``machine.slice`` directly. NFD re-discovers every ``sleepInterval``;
plugins run as :mod:`teesim.strategies.plugins` models. Faults: kubelet restart (device manager state
lost except the checkpoint, pods wait, plugins re-register), plugin crash (stream broken, restart
later), unreadable ``misc`` file (readers keep going on what they can read).

An :class:`Observer` sees every event; :mod:`teesim.report.metrics` turns that into the metrics.
Simplifications: no pod retries, no CPU/memory, no network or API-server latency.
"""

from __future__ import annotations

import errno
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from teesim.cluster.clock import HeapClock, VirtualClock
from teesim.cluster.nfd import DEFAULT_SLEEP_INTERVAL, NFD_RESOURCES, discover
from teesim.cluster.node import EXTERNAL_CGROUP, SimNode
from teesim.cluster.pods import Consumer, Phase, Pod, kata_pod, vmi_pod
from teesim.cluster.queue import SchedulingQueue
from teesim.cluster.workload import Arrival, FaultSpec
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import CGROUP_ROOT, NodeSpec
from teesim.kubelet.devicemanager import AllocationError, PodRef
from teesim.strategies.base import PLUGIN_RESOURCES, RECONCILING, Strategy
from teesim.strategies.plugins import InProcessPlugin, ReconcilingPlugin, StaticPlugin

_PLUGIN_NAMES = frozenset(PLUGIN_RESOURCES.values())


# (member, value) of each consumer, looked up once: Enum.value is a property, slow in a hot loop.
_CONSUMERS: tuple[tuple[Consumer, str], ...] = tuple((c, c.value) for c in Consumer)


def _node_name(node: SimNode) -> str:
    return node.name


@dataclass(frozen=True)
class Settings:
    """Timing knobs of the modelled components (seconds)."""

    nfd_sleep_interval: float = DEFAULT_SLEEP_INTERVAL
    poll_interval: float = 1.0
    reserved: Mapping[str, int] = field(default_factory=dict)
    kubelet_restart_downtime: float = 10.0
    plugin_restart_delay: float = 10.0
    reregister_delay: float = 1.0
    node_status_interval: float = 10.0


@dataclass(frozen=True)
class World:
    """Everything a run needs besides the strategy."""

    nodes: tuple[NodeSpec, ...]
    arrivals: tuple[Arrival, ...]
    faults: tuple[FaultSpec, ...] = ()
    duration: float = 3600.0
    settings: Settings = Settings()


@dataclass(frozen=True)
class Failure:
    """A guest that did not start: EBUSY/EINVAL at launch, or a kubelet admission error."""

    time: float
    node: str
    consumer: str
    resource: str
    uid: str
    kind: str  # "launch" or "admission"
    message: str
    in_race_window: bool


@dataclass(slots=True)
class ResourceSnapshot:
    """One node's view of one misc resource at one instant (read-only by convention: a frozen
    dataclass costs five times as much to build, and the report builds one per change)."""

    node: str
    resource: str
    capacity: int
    current: int
    vmi_resource: str
    advertised: int  # the kubelet's allocatable of the VMI resource (the advertised device set)
    published: int  # the same as the scheduler sees it (node status, synced periodically)
    requested: int  # what pods bound here need of the VMI resource
    claims: int  # pods bound here whose guest is not charged yet
    nfd_advertised: int
    charged: Mapping[str, int]

    @property
    def schedulable(self) -> int:
        """Keys the scheduler would still give a new VMI here."""
        return max(self.published - self.requested, 0)

    @property
    def truly_free(self) -> int:
        """Keys neither charged nor promised to a bound pod."""
        return max(self.capacity - self.current - self.claims, 0)

    @property
    def stranded(self) -> int:
        """Free in the kernel but not schedulable for a VMI."""
        return max(self.truly_free - self.schedulable, 0)


class Observer(Protocol):
    """Sees the run. ``after_event`` follows every event that changed a node (:attr:`Simulation.changed`)
    or the number of pending pods; the events in between change nothing it could see."""

    def after_event(self, sim: Simulation, now: float) -> None: ...
    def on_kernel_change(self, sim: Simulation, node: str, resource: str, consumer: str, now: float) -> None: ...
    def on_failure(self, sim: Simulation, failure: Failure) -> None: ...


class Simulation:
    """Runs one :class:`World` under one :class:`Strategy`.

    After every event, :attr:`changed` lists the nodes whose snapshot may differ from the last
    event's (the nodes that said they changed, plus those whose allocatable changes with time alone);
    the observer looks at those only. ``incremental=False`` is the reference: every node counts as
    changed after every event, the scheduler tries every pod on every node, plugins and NFD parse
    their files at every read, and the clock is a plain heap (:class:`HeapClock`). It gives the same
    report, slower: the tests and the benchmark compare the two.
    """

    def __init__(self, world: World, strategy: Strategy, *, incremental: bool = True):
        self.world = world
        self.strategy = strategy
        self.settings = world.settings
        self.incremental = incremental
        self.clock = VirtualClock() if incremental else HeapClock()
        self.nodes: dict[str, SimNode] = {}
        self._touched: list[SimNode] = []
        for spec in world.nodes:
            if not spec.profile.has_misc:
                raise ValueError(
                    f"node {spec.name}: kernel profile {spec.profile.name!r} has no misc controller, so no "
                    "strategy can count keys there; use it with `teesim node build` to test detection"
                )
            self.nodes[spec.name] = SimNode(spec, self._node_changed)
        self.queue = SchedulingQueue(self.nodes, incremental)
        # Every node counts as changed by the first event, so the observer starts from a full picture.
        for node in self.nodes.values():
            node.changed = True
            self._touched.append(node)
        self.changed: list[SimNode] = list(self.nodes.values())
        # Nodes with a stopped plugin endpoint inside the kubelet's grace period.
        self._expiring: set[SimNode] = set()
        self._nfd_read: dict[str, object] = {}
        self.plugins: dict[str, list[InProcessPlugin]] = defaultdict(list)
        self.waiting: dict[str, list[Pod]] = defaultdict(list)
        self.pods: list[Pod] = []
        self.failures: list[Failure] = []
        self.launched: dict[str, int] = defaultdict(int)
        self.completed: dict[str, int] = defaultdict(int)
        self._charge_times: dict[tuple[str, str], deque[float]] = defaultdict(lambda: deque(maxlen=64))
        self._external_seq = 0
        self.observer: Observer | None = None

    @property
    def pending(self) -> list[Pod]:
        """Pods not bound yet, in creation order."""
        return self.queue.pending

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
            changed = touched + sorted((n for n in self._expiring if not n.changed), key=_node_name)
            self.changed = changed
            # Only a change of the device manager can start a grace period.
            self._expiring = {n for n in changed if (n.devices_touched or n in self._expiring) and n.expiring(now)}
        for node in touched:
            node.changed = node.devices_touched = False
        touched.clear()

    # -- set-up ------------------------------------------------------------------------------------
    def resources(self, node: SimNode) -> list[str]:
        return node.kernel.misc.resources() if node.kernel.misc else []

    def _setup(self) -> None:
        settings = self.settings
        clock = self.clock
        for node in self.nodes.values():
            clock.every(settings.nfd_sleep_interval, partial(self._nfd, node), start=0.0, until=self.world.duration)
            for resource in self.resources(node):
                kind = self.strategy.plugin_for(resource)
                if kind is None:
                    continue
                name = PLUGIN_RESOURCES[resource]
                cls = ReconcilingPlugin if kind == RECONCILING else StaticPlugin
                plugin = cls(node, clock, name, resource)
                plugin.skip_unchanged = self.incremental
                self.plugins[node.name].append(plugin)
                clock.at(0.0, plugin.start)
                if isinstance(plugin, ReconcilingPlugin):
                    clock.every(
                        settings.poll_interval,
                        plugin.poll,
                        start=settings.poll_interval,
                        until=self.world.duration,
                    )
            # Scheduled after the plugins' start so the first sync at t=0 already sees their devices.
            clock.every(
                settings.node_status_interval,
                partial(self._sync_status, node),
                start=0.0,
                until=self.world.duration,
            )
        for arrival in self.world.arrivals:
            clock.at(arrival.time, partial(self._arrive, arrival))
        for fault in self.world.faults:
            if fault.node not in self.nodes:
                raise ValueError(f"fault {fault.kind} at {fault.at}s names unknown node {fault.node!r}")
            clock.at(fault.at, partial(self._fault, fault))

    def _sync_status(self, node: SimNode) -> None:
        node.sync_status(self.clock.now)

    def _nfd(self, node: SimNode) -> None:
        if self.incremental:
            # Discovery depends on the host files alone: unchanged files, unchanged resources.
            revision = node.files_revision()
            if self._nfd_read.get(node.name) == revision:
                return
            self._nfd_read[node.name] = revision
        reserved = self.settings.reserved if self.strategy.reserve_external else None
        node.nfd = discover(node.read, reserved)

    # -- guests ------------------------------------------------------------------------------------
    def _arrive(self, arrival: Arrival) -> None:
        uid = f"{arrival.consumer.value}-{arrival.seq:05d}"
        if arrival.consumer is Consumer.EXTERNAL:
            self._start_external(arrival, uid)
            return
        now = self.clock.now
        if arrival.consumer is Consumer.KATA:
            pod = kata_pod(uid, arrival.resource, now, arrival.launch_delay, arrival.duration)
        else:
            resource = self.strategy.vmi_resource(arrival.resource)
            pod = vmi_pod(uid, arrival.resource, resource, now, arrival.launch_delay, arrival.duration)
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
            node.charge(Consumer.EXTERNAL, cgroup, arrival.resource)
        except ChargeError as exc:
            self._fail_record(node, Consumer.EXTERNAL, arrival.resource, uid, "launch", exc, now, now)
            return
        self._changed(node, arrival.resource, Consumer.EXTERNAL)
        self.launched[Consumer.EXTERNAL.value] += 1

        def stop() -> None:
            node.uncharge(Consumer.EXTERNAL, cgroup, arrival.resource)
            node.kernel.misc.remove_cgroup(cgroup)  # type: ignore[union-attr]
            self.completed[Consumer.EXTERNAL.value] += 1
            self._changed(node, arrival.resource, Consumer.EXTERNAL, charged=False)

        self.clock.after(arrival.duration, stop)

    def _schedule(self) -> None:
        self.queue.run_pass(self._bind)

    def _bind(self, pod: Pod, node: SimNode) -> None:
        pod.phase, pod.node, pod.bound_at = Phase.BOUND, node.name, self.clock.now
        node.bind(pod)
        if node.kubelet_up:
            self._admit(node, pod)
        else:
            self.waiting[node.name].append(pod)

    @staticmethod
    def _ref(pod: Pod) -> PodRef:
        return PodRef(pod.namespace, pod.name, pod.uid)

    def _admit(self, node: SimNode, pod: Pod) -> None:
        ref = self._ref(pod)
        for resource, count in pod.requests.items():
            if resource not in _PLUGIN_NAMES:
                continue
            try:
                node.devices.allocate(ref, pod.container, resource, count)
            except AllocationError as exc:
                self._fail(node, pod, "admission", exc)
                return
            node.pod_generation += 1
        node.devices.add_pod(ref)
        node.pod_generation += 1
        self.clock.after(pod.launch_delay, lambda: self._launch(node, pod))

    def _launch(self, node: SimNode, pod: Pod) -> None:
        if pod.phase is not Phase.BOUND:
            return
        try:
            node.charge(Consumer(pod.consumer), pod.cgroup, pod.misc_resource)
        except ChargeError as exc:
            self._fail(node, pod, "launch", exc)
            return
        pod.phase, pod.started_at = Phase.RUNNING, self.clock.now
        node.started(pod)
        self.launched[pod.consumer.value] += 1
        self._changed(node, pod.misc_resource, pod.consumer)
        self.clock.after(pod.duration, lambda: self._stop(node, pod))

    def _stop(self, node: SimNode, pod: Pod) -> None:
        node.uncharge(pod.consumer, pod.cgroup, pod.misc_resource)
        pod.phase, pod.ended_at = Phase.SUCCEEDED, self.clock.now
        node.release(pod, was_running=True)
        node.devices.finish_pod(self._ref(pod))
        node.pod_generation += 1
        self.completed[pod.consumer.value] += 1
        self._changed(node, pod.misc_resource, pod.consumer, charged=False)

    def _fail(self, node: SimNode, pod: Pod, kind: str, exc: Exception) -> None:
        now = self.clock.now
        pod.phase, pod.ended_at, pod.reason = Phase.FAILED, now, str(exc)
        node.release(pod, was_running=False)
        node.devices.finish_pod(self._ref(pod))
        node.pod_generation += 1
        since = pod.bound_at if pod.bound_at is not None else now
        self._fail_record(node, pod.consumer, pod.misc_resource, pod.uid, kind, exc, since, now)

    def _fail_record(
        self,
        node: SimNode,
        consumer: Consumer,
        resource: str,
        uid: str,
        kind: str,
        exc: Exception,
        since: float,
        now: float,
    ) -> None:
        # The race window: a plugin poll, then a node status sync, then the guest's launch delay.
        window_start = since - self.settings.poll_interval - self.settings.node_status_interval
        recent = self._charge_times[(node.name, resource)]
        in_race = any(window_start <= t <= now for t in recent)
        message = str(exc)
        if isinstance(exc, OSError) and exc.errno == errno.EBUSY:
            message = f"EBUSY: {exc.strerror}"
        failure = Failure(now, node.name, consumer.value, resource, uid, kind, message, in_race)
        self.failures.append(failure)
        if self.observer is not None:
            self.observer.on_failure(self, failure)

    def _changed(self, node: SimNode, resource: str, consumer: Consumer, charged: bool = True) -> None:
        if charged:
            self._charge_times[(node.name, resource)].append(self.clock.now)
        if self.observer is not None:
            self.observer.on_kernel_change(self, node.name, resource, consumer.value, self.clock.now)

    # -- faults ------------------------------------------------------------------------------------
    def _fault(self, fault: FaultSpec) -> None:
        node = self.nodes[fault.node]
        clock = self.clock
        if fault.kind == "kubelet-restart":
            node.devices.restart(clock.now)
            node.pod_generation += 1
            node.kubelet_up = False
            for plugin in self.plugins[node.name]:
                plugin.generation = None

            def back() -> None:
                node.kubelet_up = True
                for pod in self.waiting.pop(node.name, []):
                    if pod.phase is Phase.BOUND:
                        self._admit(node, pod)
                for plugin in self.plugins[node.name]:
                    clock.after(self.settings.reregister_delay, plugin.register)

            clock.after(self.settings.kubelet_restart_downtime, back)
        elif fault.kind == "plugin-crash":
            for plugin in self.plugins[node.name]:
                plugin.crash()
                clock.after(self.settings.plugin_restart_delay, plugin.start)
        elif fault.kind == "sysfs-unreadable":
            path = f"{CGROUP_ROOT}/{fault.file}"
            node.unreadable.add(path)
            clock.after(fault.duration, lambda: node.unreadable.discard(path))
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    # -- observation -------------------------------------------------------------------------------
    def snapshot(self, node: SimNode, resource: str) -> ResourceSnapshot:
        return self._node_snapshots(node, [resource])[0]

    def snapshots(self, nodes: Iterable[SimNode] | None = None) -> list[ResourceSnapshot]:
        """Snapshots of every misc resource of ``nodes`` (default: every node)."""
        nodes = self.nodes.values() if nodes is None else nodes
        return [snap for node in nodes for snap in self._node_snapshots(node, self.resources(node))]

    def _node_snapshots(self, node: SimNode, resources: Iterable[str]) -> list[ResourceSnapshot]:
        # What is per node (allocatable, node status, requests) is computed once for all its resources.
        allocatable = node.allocatable(self.clock.now)
        published = node.status_allocatable()
        requested = node.requested()
        misc = node.kernel.misc
        assert misc is not None
        snaps = []
        for resource in resources:
            vmi = self.strategy.vmi_resource(resource)
            nfd_name = NFD_RESOURCES.get(resource)
            snaps.append(
                ResourceSnapshot(
                    node=node.name,
                    resource=resource,
                    capacity=misc.capacity(resource),
                    current=misc.usage(resource),
                    vmi_resource=vmi,
                    advertised=allocatable.get(vmi, 0),
                    published=published.get(vmi, 0),
                    requested=requested.get(vmi, 0),
                    claims=node.claims[resource],
                    nfd_advertised=node.nfd.get(nfd_name, 0) if nfd_name else 0,
                    charged={value: node.charged[(consumer, resource)] for consumer, value in _CONSUMERS},
                )
            )
        return snaps

    def run(self, observer: Observer | None = None, progress: Callable[[float], None] | None = None) -> None:
        self.observer = observer
        self._setup()
        duration = self.world.duration
        step = max(duration / 100.0, 1e-9)
        next_report = [0.0]

        pending = self.queue.pending
        seen_pending = [0]

        def after(now: float) -> None:
            if pending:
                self.queue.run_pass(self._bind)
            if self._touched or self._expiring or not self.incremental:
                self._collect_changed(now)
            elif self.changed:
                self.changed = []
            # An event that changed no node and no pending count changes nothing an observer sees.
            if observer is not None and (self.changed or len(pending) != seen_pending[0]):
                seen_pending[0] = len(pending)
                observer.after_event(self, now)
            if progress is not None and now >= next_report[0]:
                progress(min(now / duration, 1.0))
                next_report[0] = now + step

        self.clock.run(duration, after)
        if progress is not None:
            progress(1.0)
