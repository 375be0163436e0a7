"""In-process models of the two KubeVirt device plugins, talking to the kubelet's device manager.

Each plugin registers with :class:`~teesim.kubelet.devicemanager.DeviceManager` (``Register``), sends
device lists (``ListAndWatch`` responses), has its stream broken when it crashes, and re-registers
after a kubelet restart. They read host files through :meth:`SimNode.read` and parse them with the
collection's parser, so a torn or unreadable file affects them as it would the real processes.

* :class:`StaticPlugin`: today's KubeVirt TDX plugin: ``misc.capacity`` read once when it starts.
* :class:`ReconcilingPlugin`: polls ``misc.current`` every ``poll_interval`` (the kernel notifies
  nothing) and applies :func:`teesim.plugins.reconcile.next_unhealthy`, the function the real gRPC
  plugin runs; its own allocations are the device IDs pod-resources ``List`` reports for active pods.

Simplifications: gRPC latency is zero; a plugin restart takes ``restart_delay`` seconds.
"""

from __future__ import annotations

from teesim._collection import parse_misc_text
from teesim.cluster.clock import VirtualClock
from teesim.cluster.node import SimNode
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, Device
from teesim.plugins.reconcile import capacity_from_misc, device_ids, next_unhealthy

CAPACITY_FILE = "sys/fs/cgroup/misc.capacity"
CURRENT_FILE = "sys/fs/cgroup/misc.current"


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
        # False: read and decide at every poll, as the process does (the reference for tests).
        self.skip_unchanged = True

    def start(self) -> None:
        """Process start: read capacity, register, send the first list."""
        capacity = read_capacity(self.node, self.misc_resource)
        self.ids = device_ids(self.misc_resource, capacity or 0)
        self.running = True
        self.register()

    def register(self) -> None:
        if not self.running or not self.node.kubelet_up:
            return
        self.generation = self.node.devices.register(self.resource_name).generation
        self.registrations += 1
        self._sent_state = None
        self.refresh()

    def devices(self) -> list[Device]:
        return [Device(i, HEALTHY) for i in self.ids]

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

    def crash(self) -> None:
        if not self.running:
            return
        self.running = False
        if self.generation is not None:
            self.node.devices.stream_broken(self.resource_name, self.generation, self.clock.now)
        self.generation = None


class StaticPlugin(InProcessPlugin):
    """N = ``misc.capacity`` read once at start, every device Healthy."""


class ReconcilingPlugin(InProcessPlugin):
    """Polls ``misc.current`` and advertises ``current - own`` free devices as Unhealthy."""

    def __init__(self, node: SimNode, clock: VirtualClock, resource_name: str, misc_resource: str):
        super().__init__(node, clock, resource_name, misc_resource)
        self.unhealthy: frozenset[str] = frozenset()
        self.polls = 0
        # next_unhealthy is pure: the same inputs give the same set, so skip recomputing it.
        self._last_inputs: tuple[int | None, frozenset[str], frozenset[str]] | None = None
        self._own_cache: tuple[int, frozenset[str]] | None = None
        # What the last decision was made from: the host files' revision and the pod generation. A
        # poll that finds both unchanged would read the same misc.current and the same pod-resources
        # List, so it ends there (most polls of a long run; the real plugin reads the file anyway).
        self._decided_on: tuple[object, int] | None = None

    def own_allocated(self) -> frozenset[str]:
        """Device IDs pod-resources ``List`` reports for this resource (active pods only)."""
        if not self.node.kubelet_up:
            return frozenset()
        if self._own_cache is not None and self._own_cache[0] == self.node.pod_generation:
            return self._own_cache[1]
        if self.skip_unchanged:
            own = self.node.devices.active_device_ids(self.resource_name)
        else:
            # The reference path: walk the pods as a pod-resources List response lists them.
            listed: set[str] = set()
            for pod in self.node.devices.active_pods():
                for per_resource in self.node.devices.pod_devices(pod).values():
                    listed.update(per_resource.get(self.resource_name, ()))
            own = frozenset(listed)
        self._own_cache = (self.node.pod_generation, own)
        return own

    def poll(self) -> None:
        node = self.node
        if not self.running or not node.kubelet_up:
            return
        self.polls += 1
        if self.skip_unchanged and (node.files_revision(), node.pod_generation) == self._decided_on:
            return
        self._decide()
        self.refresh()

    def _decide(self) -> None:
        node = self.node
        decided_on = (node.files_revision(), node.pod_generation)
        if self.skip_unchanged and decided_on == self._decided_on:
            return
        self._decided_on = decided_on
        current = read_current(self.node, self.misc_resource)
        own = self.own_allocated()
        inputs = (current, own, self.unhealthy)
        if inputs != self._last_inputs:
            self.unhealthy = next_unhealthy(self.ids, own, current, self.unhealthy)
            self._last_inputs = (current, own, self.unhealthy)

    def start(self) -> None:
        self._last_inputs = self._decided_on = None
        super().start()

    def register(self) -> None:
        if self.running and self.node.kubelet_up:
            self._decide()
        super().register()

    def devices(self) -> list[Device]:
        return [Device(i, UNHEALTHY if i in self.unhealthy else HEALTHY) for i in self.ids]

    def state(self) -> object:
        return (self.ids, self.unhealthy)
