"""In-process models of the advertisers, talking to the kubelet's device manager (or, for DRA, to the
node's ResourceSlice).

Each device plugin registers with :class:`~teesim.kubelet.devicemanager.DeviceManager` (``Register``),
sends device lists (``ListAndWatch`` responses), answers ``Allocate``, has its stream broken when it
crashes, and re-registers after a kubelet restart (all but KubeVirt v1.9.0's TDX plugin). They read host
files through :meth:`SimNode.read` and parse them with the collection's parser, so a torn or unreadable
file affects them as it would the real processes.

* :class:`StaticPlugin`: KubeVirt's TDX / SEV-ESID plugin: ``misc.capacity`` read when virt-handler
  builds it; a missing line (or an unreadable file) means no plugin is registered at all. KubeVirt
  v1.9.0's TDX plugin does not register again after a kubelet restart (kubevirt/kubevirt#17122).
* :class:`GenericPlugin`: KubeVirt's ``/dev/sev`` plugin: a fixed number of slots (1000).
* :class:`ReconcilingPlugin`: polls ``misc.current`` every ``poll_interval`` and applies
  :func:`teesim.plugins.reconcile.next_unhealthy`, the function the real gRPC plugin runs. Its own
  allocations are what pod-resources ``List`` reports (through the node's rate limiter, at most every
  ``min_list_interval``) plus every ``Allocate`` since. ``list_latency`` puts time between the
  ``List`` and the publish, to show the race when ``track_allocate`` is off.
* :class:`UnifiedPlugin`: the same under Kata's resource name, also subtracting the keys started
  pods take through RuntimeClass overhead (as a pod informer sees them, ``api_latency`` late) and
  keeping ``reserve`` keys for VMs outside Kubernetes.
* :class:`DRADriver`: publishes the node's ResourceSlice from the kernel's free count; its own
  devices are those in allocated claims (it sees claims through the API, no pod-resources needed);
  it keeps ``reserve`` keys out of the slice like the unified plugin.

Simplifications: gRPC latency is zero; a plugin restart takes ``restart_delay`` seconds; a crashed
DRA driver leaves its last ResourceSlice published.

Cost: a poll parses ``misc.current`` again only when that file may have changed
(:meth:`SimNode.current_revision`: a guest started or stopped, not a launch that failed) and decides
again only when what it decides from changed; both are
pure functions of those inputs, so the result is what a full poll gives (``skip_unchanged = False``
does the full poll every time: the reference engine).
"""

from __future__ import annotations

from functools import partial

from teesim._collection import parse_misc_text
from teesim.cluster.dra import DRAPool
from teesim.cluster.node import SimNode
from teesim.engine.clock import VirtualClock
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, Device
from teesim.plugins.reconcile import capacity_from_misc, device_ids, next_unhealthy

CAPACITY_FILE = "sys/fs/cgroup/misc.capacity"
CURRENT_FILE = "sys/fs/cgroup/misc.current"
PENDING_ALLOCATION_TTL = 5.0
_NONE: frozenset[str] = frozenset()


class CurrentReader:
    """:func:`read_current` for one node and resource, parsed again only when the files changed."""

    def __init__(self, node: SimNode, misc_resource: str):
        self.node = node
        self.misc_resource = misc_resource
        self._read: tuple[object, int | None] | None = None

    def __call__(self, skip_unchanged: bool = True) -> int | None:
        revision = self.node.current_revision()
        if skip_unchanged and self._read is not None and self._read[0] == revision:
            return self._read[1]
        value = read_current(self.node, self.misc_resource)
        self._read = (revision, value)
        return value


def read_capacity(node: SimNode, misc_resource: str) -> int | None:
    """Capacity of ``misc_resource`` as a plugin reads it; None when the file cannot be read."""
    try:
        parsed = parse_misc_text(node.read(CAPACITY_FILE), CAPACITY_FILE)
    except OSError:
        return None
    if any(issue.line_number is None for issue in parsed.issues):
        return None
    return capacity_from_misc(parsed.values, misc_resource)


def read_current(node: SimNode, misc_resource: str) -> int | None:
    """Host-wide usage: root ``misc.current``, or on old kernels the sum of top-level children."""
    try:
        parsed = parse_misc_text(node.read(CURRENT_FILE), CURRENT_FILE, signed=True)
        return parsed.values.get(misc_resource, 0)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    total = 0
    for child in sorted(node.top_level_cgroups()):
        path = f"sys/fs/cgroup/{child}/misc.current"
        try:
            value = parse_misc_text(node.read(path), path, signed=True).values.get(misc_resource, 0)
        except OSError:
            return None
        if value is None:
            return None
        total += value
    return total


class InProcessPlugin:
    """Shared life cycle: start, register, send lists, crash, re-register."""

    def __init__(self, node: SimNode, clock: VirtualClock, resource_name: str, misc_resource: str):
        self.node = node
        self.clock = clock
        self.resource_name = resource_name
        self.misc_resource = misc_resource
        self.ids: tuple[str, ...] = ()
        self.generation: int | None = None
        self.running = False
        self._sent_state: object = None
        self.registrations = 0
        # False: read and decide at every poll, as the process does (the reference engine).
        self.skip_unchanged = True
        # (ids, id -> Healthy device, id -> Unhealthy device): a Device is immutable, so a list sent
        # again reuses them instead of building hundreds of dataclasses (1,000 /dev/sev slots).
        self._device_objects: tuple[tuple[str, ...], dict[str, Device], dict[str, Device]] | None = None

    def capacity(self) -> int | None:
        return read_capacity(self.node, self.misc_resource)

    def start(self) -> None:
        """Process start: read capacity, register, send the first list."""
        self.ids = device_ids(self.misc_resource, self.capacity() or 0)
        self.running = True
        self.register()

    def register(self) -> None:
        if not self.running or not self.node.kubelet_up:
            return
        self.generation = self.node.devices.register(self.resource_name).generation
        self.registrations += 1
        self._sent_state = None
        self.refresh()

    def device_objects(self) -> tuple[dict[str, Device], dict[str, Device]]:
        """Each ID's Healthy and Unhealthy :class:`Device`, built once per list of IDs."""
        cached = self._device_objects
        if cached is None or cached[0] is not self.ids:
            healthy = {i: Device(i, HEALTHY) for i in self.ids}
            cached = self._device_objects = (self.ids, healthy, {i: Device(i, UNHEALTHY) for i in self.ids})
        return cached[1], cached[2]

    def devices(self) -> list[Device]:
        healthy = self.device_objects()[0]
        return [healthy[i] for i in self.ids]

    def refresh(self) -> None:
        """Send a ListAndWatch response when the list changed."""
        if not self.running or self.generation is None:
            return
        state = self.state()
        if state != self._sent_state:
            self.node.devices.update_devices(self.resource_name, self.devices(), self.generation)
            self._sent_state = state

    def state(self) -> object:
        """What the device list depends on (cheap to compare)."""
        return self.ids

    def allocate(self, ids: list[str]) -> None:
        """The kubelet's ``Allocate`` for one container (nothing to prepare for a key)."""

    def kubelet_restarted(self) -> None:
        """The kubelet deleted our socket: the stream is gone, register again when it is back."""
        self.generation = None

    def crash(self) -> None:
        if not self.running:
            return
        self.running = False
        if self.generation is not None:
            self.node.devices.stream_broken(self.resource_name, self.generation, self.clock.now)
        self.generation = None


class StaticPlugin(InProcessPlugin):
    """KubeVirt's key plugin: N = ``misc.capacity`` read at start, every device Healthy. Without a
    positive capacity virt-handler builds no plugin (``updateTdxDevice`` returns an error).

    ``reregisters=False`` is KubeVirt v1.9.0's TDX plugin: its health check never watches the kubelet's
    device-plugin directory, so it does not see the new kubelet remove its socket and never registers again;
    only a virt-handler restart (:meth:`crash` then :meth:`start`) builds and registers it again."""

    def __init__(
        self, node: SimNode, clock: VirtualClock, resource_name: str, misc_resource: str, reregisters: bool = True
    ):
        super().__init__(node, clock, resource_name, misc_resource)
        self.reregisters = reregisters
        # The kubelet restarted under a plugin that does not notice: nothing registers until virt-handler restarts.
        self.deaf_until_restart = False

    def start(self) -> None:
        capacity = self.capacity()
        if not capacity:
            self.running = False
            return
        self.deaf_until_restart = False
        super().start()

    def register(self) -> None:
        if self.deaf_until_restart:
            return
        super().register()

    def kubelet_restarted(self) -> None:
        super().kubelet_restarted()
        self.deaf_until_restart = not self.reregisters


class GenericPlugin(InProcessPlugin):
    """KubeVirt's generic device plugin: a fixed number of slots (``--max-devices``, 1000)."""

    def __init__(self, node: SimNode, clock: VirtualClock, resource_name: str, misc_resource: str, slots: int):
        super().__init__(node, clock, resource_name, misc_resource)
        self.slots = slots

    def capacity(self) -> int | None:
        return self.slots


class ReconcilingPlugin(InProcessPlugin):
    """Polls ``misc.current`` and advertises ``current - own`` free devices as Unhealthy."""

    def __init__(
        self,
        node: SimNode,
        clock: VirtualClock,
        resource_name: str,
        misc_resource: str,
        *,
        min_list_interval: float = 0.1,
        list_latency: float = 0.0,
        track_allocate: bool = True,
        reserve: int = 0,
    ):
        super().__init__(node, clock, resource_name, misc_resource)
        # Keys kept out of the pool for VMs outside Kubernetes: the unified plugin's option (KubeVirt's
        # own plugins, one per resource, keep none; the wiring passes 0 for them).
        self._reserve = reserve
        self.min_list_interval = min_list_interval
        self.list_latency = list_latency
        self.track_allocate = track_allocate
        self.unhealthy: frozenset[str] = frozenset()
        self.polls = 0
        self.throttled = 0
        self._listed: frozenset[str] | None = None
        self._listed_at = float("-inf")  # when the last List was tried (answered or refused)
        self._pending: dict[str, float] = {}
        self._current: int | None = None
        self._read_current = CurrentReader(node, misc_resource)
        # (inputs, result) of the last next_unhealthy: the same inputs give the same set.
        self._decided: tuple[tuple, frozenset[str]] | None = None
        # _quiet_key() after the last publish, when the next poll may skip the work if it is unchanged.
        self._quiet: tuple | None = None

    # -- inputs --------------------------------------------------------------------------------------
    def _list(self) -> bool:
        """pod-resources ``List`` through the node's rate limiter; False when refused or impossible."""
        now = self.clock.now
        if self._listed is not None and now - self._listed_at < self.min_list_interval:
            return True
        if not self.node.kubelet_up:
            return False
        if now - self._listed_at < self.min_list_interval:
            return False  # refused a moment ago: do not hammer the shared budget
        self._listed_at = now
        if not self.node.pod_resources.allow(now):
            self.throttled += 1
            return False
        self.node.devices.release_finished_pods()  # List runs UpdateAllocatedDevices first
        listed = self.node.devices.active_device_ids(self.resource_name)
        self._listed = listed
        if self._pending:
            self._pending = {
                i: t for i, t in self._pending.items() if i not in listed and now - t < PENDING_ALLOCATION_TTL
            }
        return True

    def own_allocated(self) -> frozenset[str]:
        """Own devices: the last ``List`` answer plus the ``Allocate`` calls not yet in one."""
        if not self._pending:
            return self._listed or _NONE
        return (self._listed or _NONE) | frozenset(self._pending)

    def accounted_elsewhere(self) -> int:
        return 0

    def own_charged(self, own: frozenset[str]) -> int:
        """How many own devices the kernel already charges: those of pods whose guest started.

        virt-handler, where KubeVirt's plugins run, knows each VMI's domain state (its domain
        informer, ``pkg/virt-handler/vm.go``); a VMI admitted but not started holds a device and no
        key. Counting every own device as charged (what the model did before issue 19) hid one key
        too few per such VMI: the scheduler placed a guest on that phantom key, which failed, freed
        the slot, and the next one was placed there again."""
        return min(len(own), self.node.bound.started_requests_of(self.resource_name))

    def reserve(self) -> int:
        return self._reserve

    # -- decision ------------------------------------------------------------------------------------
    def poll(self) -> None:
        if not self.running or not self.node.kubelet_up:
            return
        self.polls += 1
        if self._quiet is not None and self._quiet == self._quiet_key():
            # The inputs of the last publish: the same reading, List answer and decision, no new
            # device list. Only the List call (its rate-limit token) and the publish time are new.
            if self._list():
                self._record_publish()
            return
        self._current = self._read_current(self.skip_unchanged)
        if not self._list():
            return
        if self.list_latency > 0:
            self.clock.after(self.list_latency, self._publish)
        else:
            self._publish()

    def _quiet_key(self) -> tuple:
        """Everything a poll reads, as cheap revisions: the host files, the kubelet's pods, the bound
        pods (the unified plugin's overhead), the stream, the device list and the set last decided."""
        node = self.node
        return (
            node.current_revision(),
            node.devices.pod_generation,
            node.bound.generation,
            self.generation,
            self.ids,
            self.unhealthy,
        )

    def _decide(self) -> None:
        own, accounted, reserve = self.own_allocated(), self.accounted_elsewhere(), self.reserve()
        charged = self.own_charged(own)
        inputs = (self.ids, own, self._current, accounted, reserve, charged)
        decided = self._decided
        # next_unhealthy(x, next_unhealthy(x, p)) == next_unhealthy(x, p): with the same inputs and our
        # own last answer as the previous set, the answer is that set again.
        if self.skip_unchanged and decided is not None and decided[1] is self.unhealthy and decided[0] == inputs:
            return
        self.unhealthy = next_unhealthy(
            self.ids,
            own,
            self._current,
            self.unhealthy,
            accounted_elsewhere=accounted,
            reserve=reserve,
            own_charged=charged,
        )
        self._decided = (inputs, self.unhealthy)

    def _publish(self) -> None:
        if not self.running or self._listed is None:
            return
        self._decide()
        self.refresh()
        self._record_publish()
        # The next poll may take the quiet path if nothing it reads has moved by then (polls that
        # publish at once, with no Allocate waiting for a List and no finished pod to release).
        quiet = (
            self.skip_unchanged
            and self.list_latency <= 0
            and not self._pending
            and not self.node.devices.has_finished_pods()
            and self.generation is not None
            and self._sent_state is not None
        )
        self._quiet = self._quiet_key() if quiet else None

    def _record_publish(self) -> None:
        """The count just sent was computed from a ``misc.current`` reading (what detection waits for)."""
        if self._current is not None and self.generation is not None:
            self.node.usage_published_at[self.misc_resource] = self.clock.now

    def allocate(self, ids: list[str]) -> None:
        if not self.track_allocate:
            return
        self._pending.update(dict.fromkeys(ids, self.clock.now))
        if self.unhealthy & set(ids):
            self._publish()

    def start(self) -> None:
        self._listed, self._pending = None, {}
        super().start()

    def register(self) -> None:
        if self.running and self.node.kubelet_up:
            self._current = self._read_current(self.skip_unchanged)
            self._listed_at = float("-inf")
            if self._list():
                self._decide()
        super().register()

    def devices(self) -> list[Device]:
        healthy, unhealthy = self.device_objects()
        hidden = self.unhealthy
        return [unhealthy[i] if i in hidden else healthy[i] for i in self.ids]

    def state(self) -> object:
        return (self.ids, self.unhealthy)


class UnifiedPlugin(ReconcilingPlugin):
    """One pool under Kata's resource name: the keys of Kata pods whose sandbox exists (their VM is
    charged) come from a pod informer through the API server (``PodReadyToStartContainers`` arrives
    ``api_latency`` after the VM started; until then the key is hidden twice, too careful for a
    moment). A Kata pod still waiting for its sandbox (bound, or retrying after EBUSY) is counted by
    the scheduler but charges nothing: counting it here too would hide too little for as long as it
    retries."""

    def accounted_elsewhere(self) -> int:
        return self.node.bound.overhead_of(self.resource_name, started_only=True)


class DRADriver:
    """A DRA driver's kubelet plugin: publishes the node's key devices as a ResourceSlice."""

    def __init__(
        self,
        node: SimNode,
        clock: VirtualClock,
        pool: DRAPool,
        misc_resource: str,
        reserve: int = 0,
        publish_latency: float = 0.0,
    ):
        self.node = node
        # A slice written now reaches the scheduler's informer this much later.
        self.publish_latency = publish_latency
        self.clock = clock
        self.pool = pool
        self.misc_resource = misc_resource
        self.reserve = reserve
        self.ids: tuple[str, ...] = ()
        self.hidden: frozenset[str] = frozenset()
        self.running = False
        self.polls = 0
        self.registrations = 0
        self.skip_unchanged = True
        self._read_current = CurrentReader(node, misc_resource)
        # What the last slice was decided from: the host files, the claims, the bound pods.
        self._decided_on: tuple[object, ...] | None = None
        # (IDs, hidden devices) of the slice last published: the same pair publishes the same slice.
        self._published: tuple[tuple[str, ...], frozenset[str]] | None = None
        # ((claims revision, what informers show started), charged_claims()): a kernel charge alone
        # moves the files, not the claims.
        self._charged_claims: tuple[tuple[int, int], int] | None = None

    @property
    def resource_name(self) -> str:
        return self.pool.resource

    def start(self) -> None:
        self.ids = device_ids(self.misc_resource, read_capacity(self.node, self.misc_resource) or 0)
        self.running = True
        self.registrations += 1
        self.poll()

    def poll(self) -> None:
        if not self.running:
            return
        self.polls += 1
        current = self._read_current(self.skip_unchanged)
        node = self.node
        inputs = (node.current_revision(), self.pool.claims_revision, node.bound.generation, self.ids, self.hidden)
        if self.skip_unchanged and inputs == self._decided_on:
            # Same kernel reading, claims and pods: the same slice (next_unhealthy is idempotent).
            if current is not None:
                node.usage_published_at[self.misc_resource] = self.clock.now
            return
        self.hidden = next_unhealthy(
            self.ids, self.pool.claimed(), current, self.hidden, reserve=self.reserve, own_charged=self.charged_claims()
        )
        if self._published != (self.ids, self.hidden):
            hidden = self.hidden
            devices = [i for i in self.ids if i not in hidden]
            if self.publish_latency > 0:
                self.clock.after(self.publish_latency, partial(self.pool.publish, devices))
            else:
                self.pool.publish(devices)
            self._published = (self.ids, hidden)
        self._decided_on = (
            node.current_revision(),
            self.pool.claims_revision,
            node.bound.generation,
            self.ids,
            self.hidden,
        )
        if current is not None:
            self.node.usage_published_at[self.misc_resource] = self.clock.now

    def charged_claims(self) -> int:
        """Allocated devices whose key the kernel charges, as far as the driver can tell from the
        claims' pods: those an informer shows started (a VMI's domain, a Kata pod's sandbox). A
        claim of a pod not started yet holds a device and no key (see :meth:`ReconcilingPlugin.own_charged`)."""
        key = (self.pool.claims_revision, self.node.bound.seen_revision)
        if self._charged_claims is not None and self._charged_claims[0] == key:
            return self._charged_claims[1]
        seen = self.node.bound.seen_started_uids()
        count = sum(1 for uid in self.pool.allocated.values() if uid in seen)
        self._charged_claims = (key, count)
        return count

    def crash(self) -> None:
        self.running = False

    def kubelet_restarted(self) -> None:
        """The slice lives in the API server: a kubelet restart does not touch it."""

    def register(self) -> None:
        """DRA drivers register with the kubelet's plugin watcher; the slice is unaffected."""
