"""One simulated Kubernetes node: the kernel, the kubelet's device manager, NFD's node status, its pods.

Models what lives on one worker: the kernel (:class:`teesim.kernel.node.Node` with its misc
controller), the kubelet's device manager (:class:`teesim.kubelet.devicemanager.DeviceManager`,
written by the gRPC engineer and shared with the real-socket kubelet), the extended resources NFD
patched into the node status, and the pods bound to it. In-process readers (NFD, plugins) read files
through :meth:`SimNode.read`, which renders the kernel's text and honours "sysfs unreadable" faults, so
they parse exactly what a real reader would.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Callable

from teesim.cluster.pods import Consumer, Pod
from teesim.cluster.scheduler import NodeView, sum_needs
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import CGROUP_ROOT, Node, NodeSpec
from teesim.kubelet.devicemanager import ENDPOINT_STOP_GRACE_PERIOD, DeviceManager

EXTERNAL_CGROUP = "machine.slice"
_NONE: frozenset[str] = frozenset()


class SimNode:
    """A worker node under simulation.

    ``on_change(node)`` is called the first time anything the scheduler or the report can see changes
    (kernel usage, device counts, node status, NFD's resources, bound pods) after ``changed`` was reset;
    the simulation collects those nodes so an event costs the same on a fleet of 1,000 nodes as on one.
    """

    def __init__(self, spec: NodeSpec, on_change: Callable[[SimNode], None] | None = None):
        self.kernel = Node(spec)
        self.name = spec.name
        self.on_change = on_change
        self.changed = False
        self.devices = DeviceManager()
        self.devices.on_change = self._devices_changed
        # The device manager's allocatable, kept until it changes (None: compute it again). While a
        # stopped endpoint is inside its grace period it depends on the time too, and is not kept.
        self._device_allocatable: dict[str, int] | None = None
        self.devices_touched = False
        self._nfd: dict[str, int] = {}
        # Device-plugin resources as last written to the node status (the kubelet syncs it periodically).
        self.status_devices: dict[str, int] = {}
        self.pods: dict[str, Pod] = {}
        self.unreadable: set[str] = set()
        self.kubelet_up = True
        # Bumped whenever pods are added to or finished in the device manager, so in-process readers
        # of pod-resources can cache what they derived from it.
        self.pod_generation = 0
        # Keys charged right now, per (consumer, misc resource): the timeline's "allocated by consumer".
        self.charged: Counter[tuple[Consumer, str]] = Counter()
        # Needs of pods bound here (the scheduler's "requested"), and keys bound but not yet charged.
        self._requested: Counter[str] = Counter()
        self.claims: Counter[str] = Counter()

    def _touch(self) -> None:
        if not self.changed:
            self.changed = True
            if self.on_change is not None:
                self.on_change(self)

    def _devices_changed(self) -> None:
        self._device_allocatable = None
        self.devices_touched = True
        self._touch()

    def device_allocatable(self, now: float | None = None) -> dict[str, int]:
        """``devices.allocatable(now)`` (do not modify the result)."""
        cached = self._device_allocatable
        if cached is None:
            cached = self.devices.allocatable(now)
            if not self.expiring(now if now is not None else 0.0):
                self._device_allocatable = cached
        return cached

    @property
    def nfd(self) -> dict[str, int]:
        """Extended resources NFD patched into the node status."""
        return self._nfd

    @nfd.setter
    def nfd(self, values: dict[str, int]) -> None:
        if values != self._nfd:
            self._nfd = values
            self._touch()

    def expiring(self, now: float) -> bool:
        """Whether a stopped device-plugin endpoint is still inside the kubelet's grace period, so the
        node's allocatable will change with time alone (the resource vanishes when it ends)."""
        for resource in self.devices.resources():
            endpoint = self.devices.endpoint(resource)
            stopped_at = endpoint.stopped_at if endpoint is not None else None
            if stopped_at is not None and now - stopped_at <= ENDPOINT_STOP_GRACE_PERIOD:
                return True
        return False

    # -- files --------------------------------------------------------------------------------------
    def files_revision(self) -> tuple[int, frozenset[str]]:
        """Changes whenever what :meth:`read` returns for some path may have changed: readers that
        poll (plugins every second, NFD every minute) parse again only then."""
        misc = self.kernel.misc
        return (misc.revision if misc is not None else -1, frozenset(self.unreadable) if self.unreadable else _NONE)

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

    def charge(self, consumer: Consumer, cgroup: str, resource: str) -> None:
        """Start a guest: charge one key; raises :class:`ChargeError` (EBUSY/EINVAL) like KVM would."""
        misc = self.kernel.misc
        if misc is None:
            raise ChargeError(errno.EINVAL, cgroup, resource, 1, None, "no misc controller on this kernel")
        created = not misc.has_cgroup(cgroup)
        misc.ensure_cgroup(cgroup)
        try:
            misc.try_charge(cgroup, resource, 1)
        except ChargeError:
            if created:
                # The guest never started, so its scope goes away again (the charge left nothing behind).
                misc.remove_cgroup(cgroup)
            raise
        self.charged[(consumer, resource)] += 1
        self._touch()

    def uncharge(self, consumer: Consumer, cgroup: str, resource: str) -> None:
        misc = self.kernel.misc
        assert misc is not None
        misc.uncharge(cgroup, resource, 1)
        if cgroup.startswith("kubepods") and not any(misc.usage(r, cgroup) for r in misc.resources()):
            misc.remove_cgroup(cgroup)
        self.charged[(consumer, resource)] -= 1
        self._touch()

    # -- scheduling view ---------------------------------------------------------------------------
    def allocatable(self, now: float | None = None) -> dict[str, int]:
        """The kubelet's current allocatable: device plugins' healthy devices plus NFD's resources."""
        merged = dict(self.device_allocatable(now))
        merged.update(self._nfd)
        return merged

    def sync_status(self, now: float) -> None:
        """The kubelet's node status update (every ``nodeStatusUpdateFrequency``, 10 s by default)."""
        if self.kubelet_up:
            status = self.device_allocatable(now)
            if status != self.status_devices:
                self.status_devices = status
                self._touch()

    def status_allocatable(self) -> dict[str, int]:
        """What the scheduler sees: the last synced device counts plus NFD's (patched directly)."""
        merged = dict(self.status_devices)
        merged.update(self._nfd)
        return merged

    def bind(self, pod: Pod) -> None:
        self.pods[pod.uid] = pod
        self._requested.update(pod.need())
        self.claims[pod.misc_resource] += 1
        self._touch()

    def started(self, pod: Pod) -> None:
        """The pod's guest is charged: its claim became kernel usage."""
        self.claims[pod.misc_resource] -= 1
        self._touch()

    def release(self, pod: Pod, was_running: bool) -> None:
        """The pod terminated: the scheduler stops counting it (devices are freed lazily elsewhere)."""
        if self.pods.pop(pod.uid, None) is None:
            return
        self._requested.subtract(pod.need())
        if not was_running:
            self.claims[pod.misc_resource] -= 1
        self._touch()

    def requested(self) -> dict[str, int]:
        return {k: v for k, v in self._requested.items() if v}

    def requested_recount(self) -> dict[str, int]:
        """The same as :meth:`requested`, recomputed from the pods (a consistency check for tests)."""
        return sum_needs(p.need() for p in self.pods.values() if p.holds_resources)

    def view(self) -> NodeView:
        return NodeView(self.name, self.status_allocatable(), self.requested())
