"""One scenario under one strategy: the whole cluster on a virtual clock.

Wires the layers below into the life of every guest:

1. a Kata pod or a VMI is created and waits (Pending) until the scheduler finds a node where its needs
   (container requests + ``spec.overhead``) fit the node's allocatable minus what bound pods need, or
   the free devices of a DRA ResourceSlice behind the name; DRA devices are allocated at binding;
2. the kubelet admits it: device-plugin resources of the *container requests* get one ``Allocate``
   per container from the device manager (failure: ``UnexpectedAdmissionError``), then the resource
   predicate checks requests and overhead against the node as the kubelet sees it (failure:
   ``OutOf<resource>``); either way the pod fails;
3. ``launch_delay`` later QEMU creates the guest and KVM charges one key in the pod's cgroup. EBUSY is a
   failed launch: virt-handler retries a VMI with its workqueue's exponential back-off
   (:mod:`teesim.cluster.virthandler`); a Kata pod's sandbox is retried by the kubelet 10 to 15 s
   later (:mod:`teesim.kubelet.podworkers`); every try another failed launch until one succeeds;
4. after its lifetime the guest stops, the key is uncharged, the pod succeeds; the scheduler frees its
   requests and DRA claims at once, the kubelet frees its devices lazily.

External libvirt VMs charge ``machine.slice`` directly. NFD re-discovers every ``sleepInterval``;
advertisers run as :mod:`teesim.strategies.plugins` models wired by :mod:`teesim.strategies.wiring`.
Faults: kubelet restart (device manager state lost except the checkpoint, pods wait, plugins
re-register), plugin crash (stream broken, restart later), unreadable ``misc`` file.

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
from teesim.cluster.clock import HeapClock, VirtualClock
from teesim.cluster.nfd import DEFAULT_SLEEP_INTERVAL, discover
from teesim.cluster.node import DEFAULT_COMPUTE, EXTERNAL_CGROUP, SimNode
from teesim.cluster.pods import Consumer, Phase, Pod, kata_pod, vmi_pod
from teesim.cluster.queue import SchedulingQueue
from teesim.cluster.workload import Arrival, FaultSpec
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import CGROUP_ROOT, NodeSpec
from teesim.kubelet.admission import AdmissionRejection, admission_need, check_fit, sanitize_allocatable
from teesim.kubelet.devicemanager import AllocationError, PodRef
from teesim.kubelet.podworkers import sandbox_retry_at
from teesim.kubelet.ratelimit import TokenBucket
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


class Observer(Protocol):
    def after_event(self, sim: Simulation, now: float) -> None: ...
    def on_kernel_change(self, sim: Simulation, node: str, resource: str, consumer: str, now: float) -> None: ...
    def on_failure(self, sim: Simulation, failure: Failure) -> None: ...


def _node_name(node: SimNode) -> str:
    return node.name


def _created(pod: Pod) -> tuple[float, str]:
    return (pod.created, pod.uid)


class Simulation:
    """Runs one :class:`World` under one :class:`Strategy`.

    ``incremental=False`` is the reference engine: every node counts as changed after every event,
    the scheduler tries every pending pod on every node, plugins and NFD parse their files at every
    read, and the clock is one plain heap (:class:`HeapClock`). It gives the same report, slower;
    the tests and the benchmark compare the two.
    """

    def __init__(self, world: World, strategy: Strategy, *, incremental: bool = True):
        self.world = world
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
        self.queue = SchedulingQueue(self.nodes, self.scheduler_need, incremental)
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
        self.waiting: dict[str, list[Pod]] = defaultdict(list)
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
            s.min_list_interval, s.plugin_list_latency, s.plugin_tracks_allocate, s.external_reserve, s.api_latency
        )

    def _setup(self) -> None:
        settings, clock, until = self.settings, self.clock, self.world.duration
        options = self._plugin_options()
        for node in self.nodes.values():
            wiring = wire_node(self.strategy, node, clock, self.resources(node), options)
            node.watch_dra()
            self.wiring[node.name] = wiring
            self.plugins[node.name] = wiring.plugins
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
            self._fail_record(node, Consumer.EXTERNAL, arrival.resource, uid, "launch", exc, now, now)
            return
        self._changed(node, arrival.resource, Consumer.EXTERNAL)
        self.launched[Consumer.EXTERNAL.value] += 1

        def stop() -> None:
            node.uncharge(Consumer.EXTERNAL, cgroup, arrival.resource, arrival.kind.value)
            node.kernel.misc.remove_cgroup(cgroup)  # type: ignore[union-attr]
            self.completed[Consumer.EXTERNAL.value] += 1
            self._changed(node, arrival.resource, Consumer.EXTERNAL, charged=False)

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
        if node.kubelet_up:
            self._admit(node, pod)
        else:
            self.waiting[node.name].append(pod)

    @staticmethod
    def _ref(pod: Pod) -> PodRef:
        return PodRef(pod.namespace, pod.name, pod.uid)

    def _plugin(self, node: SimNode, resource: str):
        return next((p for p in self.plugins[node.name] if p.resource_name == resource), None)

    def _admit(self, node: SimNode, pod: Pod) -> None:
        if self._allocate_devices(node, pod):
            self._admitted(node, pod)

    def _allocate_devices(self, node: SimNode, pod: Pod) -> bool:
        """The device manager's ``Allocate`` per container request; False (the pod failed) on error."""
        ref, now = self._ref(pod), self.clock.now
        for resource, count in sorted(pod.requests.items()):
            if not node.devices.is_device_plugin_resource(resource, now):
                continue
            try:
                ids = node.devices.allocate(ref, pod.container, resource, count, now=now)
            except AllocationError as exc:
                self._admission_error(node, pod, exc)
                return False
            plugin = self._plugin(node, resource)
            if plugin is not None and ids:
                plugin.allocate(ids)
        return True

    def _admission_error(self, node: SimNode, pod: Pod, exc: AllocationError) -> None:
        message = f"UnexpectedAdmissionError: Allocate failed due to {exc}, which is unexpected"
        self._fail(node, pod, "admission", RuntimeError(message))

    def _admitted(self, node: SimNode, pod: Pod) -> None:
        """Devices allocated: the resource predicate, then the guest's launch ``launch_delay`` later."""
        ref = self._ref(pod)
        rejection = self._predicate(node, pod)
        if rejection is not None:
            self._fail(node, pod, "admission", RuntimeError(str(rejection)))
            return
        node.devices.add_pod(ref)
        self.clock.after(pod.launch_delay, lambda: self._launch(node, pod))

    def _predicate(
        self, node: SimNode, pod: Pod, admitted: Mapping[str, int] | None = None
    ) -> AdmissionRejection | None:
        """The kubelet's resource predicate against the node object it last published; the other
        pods are those bound here, or ``admitted`` (what the pods admitted before need)."""
        held = {r: len(node.devices.allocated_ids(r)) for r in pod.requests}
        holds = node.devices.holds_devices(self._ref(pod))
        allocatable = sanitize_allocatable(node.status_allocatable(), held, holds)
        overhead: Mapping[str, int] = pod.overhead  # read, never written
        if self.strategy.dra_overhead_served:
            overhead = {r: n for r, n in overhead.items() if r not in self._dra_names}
        need = admission_need(pod.requests, overhead, allocatable)
        if admitted is not None:
            return check_fit(need, allocatable, admitted)
        others = dict(node.requested())
        for resource, amount in pod.scheduled_need.items():
            others[resource] = others.get(resource, 0) - amount
        return check_fit(need, allocatable, others)

    def _launch(self, node: SimNode, pod: Pod) -> None:
        if pod.phase is not Phase.BOUND:
            return
        pod.attempts += 1
        if pod.first_launch_at is None:
            pod.first_launch_at = self.clock.now
        try:
            node.charge(Consumer(pod.consumer), pod.cgroup, pod.misc_resource, pod.guest.value)
        except ChargeError as exc:
            if pod.consumer is Consumer.KATA:
                # FailedCreatePodSandBox: the pod worker retries the sandbox 10-15 s later, forever.
                self._attempt_failed(node, pod, exc)
                retry = sandbox_retry_at(self.clock.now, self.retry_rng)
                self.clock.at(retry, lambda: self._launch(node, pod))
            elif virthandler.fails_for_good(str(exc)):
                self._fail(node, pod, "launch", exc)
            else:
                # virt-handler's sync failed: AddRateLimited, 5 ms doubling to 1000 s, until it starts.
                self._attempt_failed(node, pod, exc)
                self.clock.after(self._vmi_backoff.delay(pod.attempts), lambda: self._launch(node, pod))
            return
        pod.phase, pod.started_at = Phase.RUNNING, self.clock.now
        node.bound.started(pod)
        self._after_api(partial(node.bound.observe_started, pod))
        self.launched[pod.consumer.value] += 1
        self._changed(node, pod.misc_resource, pod.consumer)
        self.clock.after(pod.duration, lambda: self._stop(node, pod))

    def _after_api(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when a write to the API server reaches the informers."""
        latency = self.settings.api_latency
        if latency > 0:
            self.clock.after(latency, callback)
        else:
            callback()

    def _release(self, node: SimNode, pod: Pod, was_running: bool) -> None:
        delayed = self.settings.api_latency > 0
        if node.bound.release(pod, was_running, keep_seen=delayed) and delayed:
            self.clock.after(self.settings.api_latency, partial(node.bound.observe_released, pod))
        node.devices.finish_pod(self._ref(pod))
        for name in pod.dra_devices:
            node.dra[name].release(pod.uid)

    def _stop(self, node: SimNode, pod: Pod) -> None:
        if pod.phase is not Phase.RUNNING:
            return  # rejected when the kubelet restarted: its guest was stopped then
        node.uncharge(pod.consumer, pod.cgroup, pod.misc_resource, pod.guest.value)
        pod.phase, pod.ended_at = Phase.SUCCEEDED, self.clock.now
        self._release(node, pod, was_running=True)
        self.completed[pod.consumer.value] += 1
        self._changed(node, pod.misc_resource, pod.consumer, charged=False)

    def _window(self, pod: Pod) -> tuple[float, float]:
        """A pod's race window runs from its binding to its first launch: a retry fails because of
        what happened then, not because the node is busy later."""
        now = self.clock.now
        since = pod.bound_at if pod.bound_at is not None else now
        return since, pod.first_launch_at if pod.first_launch_at is not None else now

    def _attempt_failed(self, node: SimNode, pod: Pod, exc: Exception) -> None:
        since, until = self._window(pod)
        failure = self._fail_record(
            node,
            pod.consumer,
            pod.misc_resource,
            pod.uid,
            "launch",
            exc,
            since,
            until,
            pod.attempts,
            pod.in_race_window,
        )
        pod.in_race_window = failure.in_race_window

    def _fail(self, node: SimNode, pod: Pod, kind: str, exc: Exception, was_running: bool = False) -> None:
        now = self.clock.now
        pod.phase, pod.ended_at, pod.reason = Phase.FAILED, now, str(exc)
        self._release(node, pod, was_running=was_running)
        since, until = self._window(pod)
        attempt = max(pod.attempts, 1)
        self._fail_record(
            node, pod.consumer, pod.misc_resource, pod.uid, kind, exc, since, until, attempt, pod.in_race_window
        )

    def _fail_record(
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
    ) -> Failure:
        # The race window: a plugin poll, then a node status sync, then the guest's launch delay.
        now = self.clock.now
        if in_race is None:
            window_start = since - self.settings.poll_interval - self.settings.node_status_interval
            recent = self._charge_times[(node.name, resource)]
            in_race = any(window_start <= t <= until for t in recent)
        message = str(exc)
        error = errno.errorcode.get(exc.errno, "") if isinstance(exc, OSError) and exc.errno else ""
        if error:
            message = f"{error}: {exc.strerror}"
        failure = Failure(now, node.name, consumer.value, resource, uid, kind, message, in_race, attempt, error)
        self.failures.append(failure)
        if self.observer is not None:
            self.observer.on_failure(self, failure)
        return failure

    def _changed(self, node: SimNode, resource: str, consumer: Consumer, charged: bool = True) -> None:
        if charged:
            self._charge_times[(node.name, resource)].append(self.clock.now)
        if self.observer is not None:
            self.observer.on_kernel_change(self, node.name, resource, consumer.value, self.clock.now)

    # -- faults ------------------------------------------------------------------------------------
    def _kubelet_restart(self, node: SimNode) -> None:
        clock = self.clock
        node.devices.restart(clock.now)
        node.kubelet_up = False
        for plugin in self.plugins[node.name]:
            plugin.kubelet_restarted()

        def back() -> None:
            node.kubelet_up = True
            # fastStatusUpdateOnce: the first node status comes from the restored device manager,
            # whose stopped endpoints count 0 devices until their plugins register again.
            node.sync_status(clock.now)
            waiting = self.waiting.pop(node.name, [])
            self._readmit(node, {id(p) for p in waiting})
            for pod in waiting:
                if pod.phase is Phase.BOUND:
                    self._admit(node, pod)
            for plugin in self.plugins[node.name]:
                clock.after(self.settings.reregister_delay, plugin.register)

        clock.after(self.settings.kubelet_restart_downtime, back)

    def _readmit(self, node: SimNode, skip: set[int]) -> None:
        """A restarted kubelet admits again every pod it had admitted (``HandlePodAdditions`` in
        ``pkg/kubelet/kubelet.go``, v1.34: the pods sorted by creation time, each through
        ``canAdmitPod`` against the pods admitted before it). The predicate counts requests and
        overhead against the node object; ``sanitizeNodeAllocatable`` raises a device-plugin resource
        to the devices pods hold only when *this* pod holds devices, so a pod that takes its key
        through overhead alone finds that resource at 0 while its plugin has not registered again and
        is rejected: its guest is stopped and the pod fails (``rejectPod``)."""
        pods = sorted(
            (p for p in node.bound.pods() if id(p) not in skip and p.phase in (Phase.BOUND, Phase.RUNNING)),
            key=_created,
        )
        admitted: dict[str, int] = {}
        for pod in pods:
            rejection = self._predicate(node, pod, admitted)
            if rejection is None:
                for resource, amount in pod.scheduled_need.items():
                    admitted[resource] = admitted.get(resource, 0) + amount
                continue
            running = pod.phase is Phase.RUNNING
            if running:
                node.uncharge(pod.consumer, pod.cgroup, pod.misc_resource, pod.guest.value)
                self._changed(node, pod.misc_resource, pod.consumer, charged=False)
            self._fail(node, pod, "readmission", RuntimeError(str(rejection)), was_running=running)

    def _fault(self, fault: FaultSpec) -> None:
        node = self.nodes[fault.node]
        if fault.kind == "kubelet-restart":
            self._kubelet_restart(node)
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
        if self.strategy.advertiser in (Advertiser.UNIFIED, Advertiser.DRA):
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
