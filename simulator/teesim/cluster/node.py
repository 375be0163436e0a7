"""One simulated Kubernetes node: the kernel, the kubelet's device manager, NFD's node status, its pods.

Models what lives on one worker: the kernel (:class:`teesim.kernel.node.Node` with its misc
controller), the kubelet's device manager (:class:`teesim.kubelet.devicemanager.DeviceManager`,
written by the gRPC engineer and shared with the real-socket kubelet), the extended resources NFD
patched into the node status, and the pods bound to it. In-process readers (NFD, plugins) read files
through :meth:`SimNode.read`, which renders the kernel's text and honours "sysfs unreadable" faults, so
they parse exactly what a real reader would.

State that readers cache on has one owner that keeps its generation: :class:`BoundPods` (the pods
bound to the node, what an informer on ``spec.nodeName`` sees) and the device manager (what
pod-resources ``List`` answers, ``devices.pod_generation``). Callers change pods only through them.
"""

from __future__ import annotations

import errno
import random
from collections import Counter
from collections.abc import Callable, Mapping

from mypy_extensions import mypyc_attr

from teesim.cluster.dra import DRAPool
from teesim.cluster.pods import Consumer, Pod
from teesim.cluster.scheduler import NodeView, sum_needs
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import CGROUP_ROOT, Node, NodeSpec
from teesim.kubelet.devicemanager import ENDPOINT_STOP_GRACE_PERIOD, DeviceManager
from teesim.kubelet.ratelimit import TokenBucket

EXTERNAL_CGROUP = "machine.slice"
_NONE: frozenset[str] = frozenset()


# A node's allocatable CPU (millicores) and memory (MiB) unless the scenario says otherwise: a
# two-socket TEE host, large enough that keys, not CPU or memory, are what runs out.
DEFAULT_COMPUTE: dict[str, int] = {"cpu": 128_000, "memory": 512 * 1024}


# A subclass of a builtin type: a plain Python class in the native build (teesim._native).
@mypyc_attr(native_class=False)
class PublishTimes(dict[str, float]):
    """misc resource -> when an advertiser last published a count computed from ``misc.current``.
    A write to a resource in ``watched`` (one with a change not yet seen, as the report says) is also
    reported to ``on_publish(resource)``: the report looks at those instead of asking every node
    after every event."""

    def __init__(self, on_publish: Callable[[str], None] | None = None):
        super().__init__()
        self.on_publish = on_publish
        self.watched: set[str] = set()

    def __setitem__(self, resource: str, when: float) -> None:
        super().__setitem__(resource, when)
        if resource in self.watched and self.on_publish is not None:
            self.on_publish(resource)


def _add(counter: Counter[str], amounts: Mapping[str, int]) -> None:
    """``counter.update(amounts)`` for a mapping, without Counter.update's type checks (a hot path)."""
    get = counter.get
    for key, amount in amounts.items():
        counter[key] = get(key, 0) + amount


def _sub(counter: Counter[str], amounts: Mapping[str, int]) -> None:
    """``counter.subtract(amounts)`` for a mapping, the same way."""
    get = counter.get
    for key, amount in amounts.items():
        counter[key] = get(key, 0) - amount


class BoundPods:
    """The pods bound to one node and what the scheduler counts for them.

    Every change goes through :meth:`bind`, :meth:`started` and :meth:`release`, which bump
    ``generation`` and call ``on_change``; readers that cache what they derive from the pods (the
    unified plugin's overhead count) compare it.
    """

    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}
        self._requested: Counter[str] = Counter()
        # Pods bound here whose guest is not charged yet, per misc resource.
        self.claims: Counter[str] = Counter()
        self.generation = 0
        # Keys taken through spec.overhead by every bound pod, and by those whose guest started,
        # kept with every change (the unified plugin asks at every poll that follows one).
        self._overhead: Counter[str] = Counter()
        self._overhead_started: Counter[str] = Counter()
        # Pods whose start reached the API server and an informer (PodReadyToStartContainers through
        # the kubelet's status manager, then a watch): what a plugin outside the kubelet can know.
        # A released pod stays here until its deletion reaches the informer too.
        self._seen: set[str] = set()
        self.seen_revision = 0  # bumped whenever _seen changes (readers cache on it)
        self._overhead_seen: Counter[str] = Counter()
        # Container requests of pods whose guest started: the devices a plugin's own pods hold whose
        # key the kernel already charges (a VMI admitted but not started holds a device, no key).
        self._requests_started: Counter[str] = Counter()
        self._started: set[str] = set()
        # Pods whose posted status made the scheduler count their overhead a second time (overhead_counted_twice).
        self._status_counted: set[str] = set()
        # What requested() answers until the next change (the report and the kubelet ask per event).
        self._requested_view: dict[str, int] | None = None
        self.on_change: Callable[[], None] | None = None
        # Called instead of on_change when only what informers show moved (the scheduler's view did not).
        self.on_observe: Callable[[], None] | None = None

    def _changed(self) -> None:
        self.generation += 1
        self._requested_view = None
        if self.on_change is not None:
            self.on_change()

    def _observed(self) -> None:
        self.generation += 1
        self.seen_revision += 1
        if self.on_observe is not None:
            self.on_observe()
        elif self.on_change is not None:
            self.on_change()

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    def pods(self) -> list[Pod]:
        return list(self._pods.values())

    def bind(self, pod: Pod, need: dict[str, int]) -> None:
        """The scheduler bound ``pod`` counting ``need`` (requests + overhead as it sees them)."""
        self._pods[pod.uid] = pod
        pod.scheduled_need = dict(need)
        _add(self._requested, need)
        _add(self._overhead, pod.overhead)
        self.claims[pod.misc_resource] += 1
        self._changed()

    def status_posted(self, pod: Pod) -> None:
        """The kubelet's status of ``pod``, ``allocatedResources`` with the overhead in it, reached the scheduler
        and the kubelet's pod manager: both count the overhead again from now on (Kubernetes 1.36 and 1.37,
        ``Settings.overhead_counted_twice``, kubernetes/kubernetes#139627)."""
        if pod.uid not in self._pods or pod.uid in self._status_counted or not pod.overhead:
            return
        self._status_counted.add(pod.uid)
        need = pod.scheduled_need
        for resource, amount in pod.overhead.items():
            need[resource] = need.get(resource, 0) + amount
        _add(self._requested, pod.overhead)
        self._changed()

    def started(self, pod: Pod) -> None:
        """The pod's guest is charged: its claim became kernel usage."""
        self.claims[pod.misc_resource] -= 1
        if pod.started_at is not None and pod.uid not in self._started:
            self._started.add(pod.uid)
            _add(self._overhead_started, pod.overhead)
            _add(self._requests_started, pod.requests)
        self._changed()

    def observe_started(self, pod: Pod) -> None:
        """The pod's start reached the informers (still bound: a pod released first is never seen)."""
        if pod.uid in self._pods and pod.uid in self._started and pod.uid not in self._seen:
            self._seen.add(pod.uid)
            _add(self._overhead_seen, pod.overhead)
            self._observed()

    def observe_released(self, pod: Pod) -> None:
        """The pod's end reached the informers."""
        if pod.uid in self._seen and pod.uid not in self._pods:
            self._seen.discard(pod.uid)
            _sub(self._overhead_seen, pod.overhead)
            self._observed()

    def seen_started_uids(self) -> set[str]:
        """The UIDs :meth:`seen_started` answers True for (do not modify the result): a reader counting
        many pods tests membership without a call per pod."""
        return self._seen

    def seen_started(self, uid: str) -> bool:
        """Whether an informer shows the pod started (and not yet gone)."""
        return uid in self._seen

    def release(self, pod: Pod, was_running: bool, keep_seen: bool = False) -> bool:
        """The pod terminated: the scheduler stops counting it. False when it was not bound here.
        ``keep_seen``: informers still show it started until :meth:`observe_released`."""
        if self._pods.pop(pod.uid, None) is None:
            return False
        if pod.uid in self._seen and not keep_seen:
            self._seen.discard(pod.uid)
            _sub(self._overhead_seen, pod.overhead)
            self.seen_revision += 1
        _sub(self._requested, pod.scheduled_need)
        self._status_counted.discard(pod.uid)
        _sub(self._overhead, pod.overhead)
        if pod.uid in self._started:
            self._started.discard(pod.uid)
            _sub(self._overhead_started, pod.overhead)
            _sub(self._requests_started, pod.requests)
        if not was_running:
            self.claims[pod.misc_resource] -= 1
        self._changed()
        return True

    def requested(self) -> dict[str, int]:
        """What the scheduler counts for the bound pods, per resource (do not modify the result)."""
        view = self._requested_view
        if view is None:
            view = self._requested_view = {k: v for k, v in self._requested.items() if v}
        return view

    def requested_recount(self) -> dict[str, int]:
        """The same as :meth:`requested`, recomputed from the pods (a consistency check for tests)."""
        return sum_needs(p.scheduled_need for p in self._pods.values() if p.holds_resources)

    def get(self, uid: str) -> Pod | None:
        return self._pods.get(uid)

    def overhead_of(self, resource: str, *, started_only: bool = False) -> int:
        """Keys of ``resource`` that bound pods take through ``spec.overhead``, what an informer sees
        (every pod here is Pending or Running; terminated ones are released). ``started_only``: only
        pods an informer shows started (a Kata pod's sandbox exists, ``PodReadyToStartContainers``,
        as :meth:`observe_started` was told), i.e. whose key the kernel charges, plus ended pods
        whose deletion has not reached the informer yet. Kept with every change."""
        return (self._overhead_seen if started_only else self._overhead)[resource]

    def started_requests_of(self, resource: str) -> int:
        """Devices of ``resource`` that bound pods whose guest runs hold through container requests:
        the own allocations whose key the kernel charges. Kept with every change."""
        return self._requests_started[resource]


class SimNode:
    """A worker node under simulation.

    ``on_change(node)`` is called the first time anything the scheduler or the report can see changes
    (kernel usage, device counts, node status, NFD's resources, bound pods, DRA slices and claims)
    after ``changed`` was reset; the simulation collects those nodes so that an event costs the same
    on a fleet of 1,000 nodes as on one. The owners of that state say when it changes: the device
    manager, :class:`BoundPods` and each :class:`DRAPool` through their ``on_change``, the kernel
    through ``MiscController.revision`` (for readers of its files), this class for the rest.
    """

    def __init__(
        self,
        spec: NodeSpec,
        rng: random.Random | None = None,
        role: str = "both",
        on_change: Callable[[SimNode], None] | None = None,
        compute: Mapping[str, int] | None = None,
    ):
        self.kernel = Node(spec)
        self.name = spec.name
        self.role = role
        self.on_change = on_change
        self.changed = False
        self.devices = DeviceManager(rng)
        self.devices.on_change = self._devices_changed
        # The device manager's allocatable, kept until it changes (None: compute it again). While a
        # stopped endpoint is inside its grace period it depends on the time too, and is not kept.
        self._device_allocatable: dict[str, int] | None = None
        self.devices_touched = False
        # Bumped by every change of the device manager (what allocatable() is merged from).
        self.devices_revision = 0
        # status_allocatable() and allocatable() as last merged, kept until a part changes (None: merge
        # again); the report asks for them for every changed node after every event.
        self._status: dict[str, int] | None = None
        self._allocatable: dict[str, int] | None = None
        self._nfd: dict[str, int] = {}
        # Extended resources the kernel-pool agent patched into the node status (tee_key_pool_mode: kernel).
        self._agent: dict[str, int] = {}
        # Allocatable CPU (millicores) and memory (MiB): what NodeResourcesFit filters and scores by.
        self.compute: dict[str, int] = dict(DEFAULT_COMPUTE if compute is None else compute)
        # Device-plugin resources as last written to the node status (the kubelet syncs it periodically).
        self.status_devices: dict[str, int] = {}
        self.bound = BoundPods()
        self.bound.on_change = self._view_changed
        self.bound.on_observe = self._touch
        # Bumped by every change of what view() depends on (node status, NFD, bound pods, DRA pools):
        # a node touched only by a kernel charge keeps the scheduler's view it had.
        self.view_revision = 0
        self.dra: dict[str, DRAPool] = {}
        # The pod-resources API's token bucket, shared by every client on the node.
        self.pod_resources = TokenBucket()
        self.unreadable: set[str] = set()
        self.kubelet_up = True
        # Keys charged right now, per (consumer, misc resource): the timeline's "allocated by consumer".
        self.charged: Counter[tuple[Consumer, str]] = Counter()
        # misc resource -> when an advertiser last published a count computed from misc.current.
        self.usage_published_at = PublishTimes()

    @property
    def claims(self) -> Counter[str]:
        return self.bound.claims

    # -- change notification ------------------------------------------------------------------------
    def _touch(self) -> None:
        if not self.changed:
            self.changed = True
            if self.on_change is not None:
                self.on_change(self)

    def _view_changed(self) -> None:
        self.view_revision += 1
        self._touch()

    def _devices_changed(self) -> None:
        self._device_allocatable = self._allocatable = None
        self.devices_revision += 1
        self.devices_touched = True
        self._touch()

    def devices_changed(self) -> None:
        """The device manager changed where its ``on_change`` could not say so (another thread's
        change, taken in by ``teesim serve`` on the simulation's own thread)."""
        self._devices_changed()

    def watch_dra(self) -> None:
        """Hear about changes of the DRA pools the wiring put on this node."""
        for pool in self.dra.values():
            pool.on_change = self._view_changed

    @property
    def nfd(self) -> dict[str, int]:
        """Extended resources NFD patched into the node status."""
        return self._nfd

    @nfd.setter
    def nfd(self, values: dict[str, int]) -> None:
        if values != self._nfd:
            self._nfd = values
            self._status = self._allocatable = None
            self._view_changed()

    @property
    def agent_pool(self) -> dict[str, int]:
        """Extended resources the kernel-pool agent patched into the node status (capacity = allocatable)."""
        return self._agent

    @agent_pool.setter
    def agent_pool(self, values: dict[str, int]) -> None:
        if values != self._agent:
            self._agent = values
            self._status = self._allocatable = None
            self._view_changed()

    def expiring(self, now: float) -> bool:
        """Whether a stopped device-plugin endpoint is still inside the kubelet's grace period, so the
        node's allocatable will change with time alone (the resource vanishes when it ends)."""
        for resource in self.devices.resources():
            endpoint = self.devices.endpoint(resource)
            stopped_at = endpoint.stopped_at if endpoint is not None else None
            if stopped_at is not None and now - stopped_at <= ENDPOINT_STOP_GRACE_PERIOD:
                return True
        return False

    def observed_revision(self, now: float) -> tuple[int, int, int] | None:
        """Changes whenever what a report snapshot of this node reads may have changed: the kernel's
        files (usage and the keys charged per consumer move with them), the scheduler's view (node
        status, NFD, bound pods' requests and claims, DRA slices and claims: every BoundPods change
        goes through ``_view_changed``) and the device manager. None while a stopped endpoint's grace
        period makes allocatable depend on the time alone: then no two instants compare equal."""
        self.device_allocatable(now)
        if self._device_allocatable is None:
            return None
        misc = self.kernel.misc
        return (misc.revision if misc is not None else -1, self.view_revision, self.devices_revision)

    def device_allocatable(self, now: float | None = None) -> dict[str, int]:
        """``devices.allocatable(now)``, kept while it cannot change (do not modify the result)."""
        cached = self._device_allocatable
        if cached is None:
            cached = self.devices.allocatable(now)
            if not self.expiring(now if now is not None else 0.0):
                self._device_allocatable = cached
        return cached

    # -- files --------------------------------------------------------------------------------------
    def files_revision(self) -> tuple[int, frozenset[str]]:
        """Changes whenever what :meth:`read` returns for some path may have changed: readers that
        poll (plugins every second, NFD every minute) parse again only then."""
        misc = self.kernel.misc
        return (misc.revision if misc is not None else -1, frozenset(self.unreadable) if self.unreadable else _NONE)

    def current_revision(self) -> tuple[int, frozenset[str]]:
        """Like :meth:`files_revision` for the ``misc.current`` files a usage reader reads (the root's,
        or the top-level cgroups'): it does not move when a launch fails (``misc.events`` and a
        guest's scope made and removed again), so the plugins polling usage parse again only when a
        guest really started or stopped."""
        misc = self.kernel.misc
        return (
            misc.current_revision if misc is not None else -1,
            frozenset(self.unreadable) if self.unreadable else _NONE,
        )

    def capacity_revision(self) -> tuple[int, frozenset[str]]:
        """Like :meth:`files_revision` for ``misc.capacity`` alone: a reader of that file only (NFD)
        need not parse it again after a guest's charge."""
        misc = self.kernel.misc
        return (
            misc.capacity_revision if misc is not None else -1,
            frozenset(self.unreadable) if self.unreadable else _NONE,
        )

    def read(self, relpath: str) -> str:
        """Read a host file as a plugin would; raises ``OSError`` like the real read would."""
        if relpath in self.unreadable:
            raise OSError(errno.EISDIR, f"cannot read {relpath}: Is a directory")
        misc = self.kernel.misc
        directory, _, filename = relpath.rpartition("/")
        if misc is not None and filename.startswith("misc.") and (directory + "/").startswith(CGROUP_ROOT + "/"):
            cgroup = directory[len(CGROUP_ROOT) + 1 :]
            if misc.has_cgroup(cgroup):
                text = misc.render(cgroup).get(f"{cgroup}/{filename}" if cgroup else filename)
                if text is not None:
                    return text
        else:
            text = self.kernel.static_files().get(relpath)
            if text is not None:
                return text
        raise FileNotFoundError(errno.ENOENT, f"no such file: {relpath}")

    def top_level_cgroups(self) -> list[str]:
        """``ls /sys/fs/cgroup``: the directories an old-kernel reader sums."""
        misc = self.kernel.misc
        return [c for c in misc.cgroups() if c and "/" not in c] if misc else []

    # -- kernel charges -------------------------------------------------------------------------------
    def capacity(self, resource: str) -> int:
        return self.kernel.misc.capacity(resource) if self.kernel.misc else 0

    def usage(self, resource: str) -> int:
        return self.kernel.misc.usage(resource) if self.kernel.misc else 0

    def charge(self, consumer: Consumer, cgroup: str, resource: str, guest: str | None = None) -> None:
        """Start a guest (``guest``: ``snp`` or ``sev-es`` on ``sev_es``): charge one key; raises
        :class:`ChargeError` with the errno KVM returns (ENOSPC, EBUSY, ENOTTY, EINVAL; teesim.kernel.kvm)."""
        misc = self.kernel.misc
        if misc is None:
            raise ChargeError(errno.EINVAL, cgroup, resource, 1, None, "no misc controller on this kernel")
        # ensure_cgroup moves the revision exactly when it creates a cgroup: cheaper than asking
        # has_cgroup first, which normalises the path of every scope not made yet (each launch's).
        before = misc.revision
        misc.ensure_cgroup(cgroup)
        created = misc.revision != before
        try:
            misc.try_charge(cgroup, resource, 1, guest=guest)
        except ChargeError:
            if created:
                # The guest never started, so its scope goes away again (the charge left nothing behind).
                misc.remove_cgroup(cgroup)
            raise
        self.charged[(consumer, resource)] += 1
        self._touch()

    def uncharge(self, consumer: Consumer, cgroup: str, resource: str, guest: str | None = None) -> None:
        misc = self.kernel.misc
        assert misc is not None
        misc.uncharge(cgroup, resource, 1, guest=guest)
        if cgroup.startswith("kubepods") and not any(misc.usage(r, cgroup) for r in misc.resources()):
            misc.remove_cgroup(cgroup)
        self.charged[(consumer, resource)] -= 1
        self._touch()

    # -- scheduling view ---------------------------------------------------------------------------
    def allocatable(self, now: float | None = None) -> dict[str, int]:
        """The kubelet's current allocatable: device plugins' healthy devices plus NFD's resources
        (do not modify the result)."""
        merged = self._allocatable
        if merged is None:
            merged = dict(self.device_allocatable(now))
            merged.update(self._nfd)
            merged.update(self._agent)
            merged.update(self.compute)
            if self._device_allocatable is not None:  # not time-dependent (no grace period running)
                self._allocatable = merged
        return merged

    def sync_status(self, now: float) -> None:
        """The kubelet's node status update (every ``nodeStatusUpdateFrequency``, 10 s by default)."""
        if self.kubelet_up:
            status = self.device_allocatable(now)
            if status != self.status_devices:
                self.status_devices = dict(status)
                self._status = None
                self._view_changed()

    def status_allocatable(self) -> dict[str, int]:
        """What the scheduler sees: the last synced device counts plus NFD's (patched directly); do
        not modify the result."""
        merged = self._status
        if merged is None:
            merged = self._status = dict(self.status_devices)
            merged.update(self._nfd)
            merged.update(self._agent)
            merged.update(self.compute)
        return merged

    def dynamic(self) -> dict[str, int]:
        """Free devices per DRA-backed extended resource name (from the published ResourceSlices)."""
        return {name: pool.free() for name, pool in self.dra.items()}

    def requested(self) -> dict[str, int]:
        return self.bound.requested()

    def requested_recount(self) -> dict[str, int]:
        return self.bound.requested_recount()

    def view(self) -> NodeView:
        return NodeView(
            self.name, self.status_allocatable(), self.requested(), dynamic=self.dynamic(), pods=len(self.bound)
        )
