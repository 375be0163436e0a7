"""The kubelet's device manager as a pure state machine (no gRPC, no threads, no clock of its own).

This models ``pkg/kubelet/cm/devicemanager`` (``manager.go``, ``endpoint.go``,
``plugin/v1beta1/{server,handler,client}.go``) closely enough that a strategy's failure modes come
out the same as on a real node:

* ``Register`` accepts only API version ``v1beta1`` and an *extended* resource name
  (:mod:`teesim.kubelet.names`). A resource is known to the manager (it has capacity) only once a
  ``ListAndWatch`` response arrived, as upstream creates ``healthyDevices[resource]`` there.
* Every ``ListAndWatch`` response *replaces* the resource's device list; ``Healthy`` devices are
  healthy, any other health string is unhealthy (``genericDeviceUpdateCallback``). An ID listed twice
  in one response lands in the healthy set if any entry says ``Healthy`` and in the unhealthy set if
  any entry says otherwise, so it can be in both and count twice in capacity. Responses are
  keyed by resource name only: a stream that is still open updates the list even after a newer
  registration of the same resource (upstream's callback does not check which client sent it).
* Node capacity = healthy + unhealthy, allocatable = healthy (``GetCapacity``).
* When a plugin's stream ends, the kubelet disconnects *the client currently registered for that
  resource name* (``runClient`` looks the client up by name again): every device turns unhealthy
  and the endpoint's stop time is set (``PluginDisconnected``). So when a plugin registers again
  while its old stream is still open, the old stream's end marks the *new* endpoint's devices
  unhealthy and cuts the new connection; after ``ENDPOINT_STOP_GRACE_PERIOD`` without a new
  registration the resource disappears from the node.
* Allocation is per container and per resource (one ``Allocate`` per container). Before choosing
  devices, devices of pods that are no longer active are released (``UpdateAllocatedDevices``):
  finished pods are freed *lazily* and the plugin is never told. A container that already holds
  devices of the resource gets them again, but only if they are all still healthy.
* Free devices are handed out in no particular order (upstream iterates a Go map). A plugin's
  preferred allocation is intersected with the available devices and topped up from the rest.
* A kubelet restart loses every endpoint and device list but keeps the checkpoint: the pod-to-device
  assignments and the names of every registered resource. Each of those comes back with a stopped
  endpoint and no devices, i.e. capacity 0, until its plugin registers again or the grace period
  drops it. A restored endpoint has no plugin options (``opts: nil``), so ``PreStartContainer`` is
  skipped for it; a stopped endpoint that kept its options refuses the call (``errEndpointStopped``).

``pod_generation`` changes whenever the set of pods or their devices changes (what a pod-resources
``List`` would answer): in-process readers cache on it. Only this class changes it.

Device choice uses ``rng`` (a seeded ``random.Random`` by default) so runs are reproducible while no
caller can rely on an order.
"""

from __future__ import annotations

import functools
import random
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from teesim.kubelet.gofmt import go_quote
from teesim.kubelet.names import (
    API_VERSION,
    SUPPORTED_VERSIONS,
    RegistrationError,
    check_registration,
    extended_resource_name_problem,
)

__all__ = [
    "API_VERSION",
    "ENDPOINT_STOP_GRACE_PERIOD",
    "HEALTHY",
    "SUPPORTED_VERSIONS",
    "UNHEALTHY",
    "AllocationError",
    "Device",
    "DeviceManager",
    "Endpoint",
    "PodRef",
    "RegistrationError",
    "check_registration",
    "extended_resource_name_problem",
    "natural_key",
]

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# endpointStopGracePeriod in pkg/kubelet/cm/devicemanager/types.go.
ENDPOINT_STOP_GRACE_PERIOD = 5 * 60.0

_NATURAL_RE = re.compile(r"(\d+)")


# A subclass of a builtin type: a plain Python class in the native build (teesim._native).
@mypyc_attr(native_class=False)
class AllocationError(RuntimeError):
    """The kubelet cannot give a container the devices it requests (pod admission fails)."""


@functools.lru_cache(maxsize=1 << 16)
def natural_key(device_id: str) -> tuple:
    """Sort key that orders ``tdx-2`` before ``tdx-10`` (cached: plugins sort the same IDs every poll)."""
    return tuple(int(part) if part.isdigit() else part for part in _NATURAL_RE.split(device_id))


@dataclass(frozen=True)
class Device:
    """One device as a plugin reports it in ``ListAndWatch``."""

    id: str
    health: str = HEALTHY

    @property
    def healthy(self) -> bool:
        return self.health == HEALTHY


@dataclass(frozen=True)
class PodRef:
    """A pod as the kubelet knows it; ``uid`` defaults to ``namespace/name``."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return self.uid or f"{self.namespace}/{self.name}"


@dataclass
class Endpoint:
    """The kubelet's connection to one plugin; ``generation`` identifies its ListAndWatch stream.

    ``options_known`` is False for an endpoint restored from the checkpoint after a kubelet restart:
    upstream's ``readCheckpoint`` stores it with ``opts: nil`` (manager.go, v1.34), so every option
    reads as off until the plugin registers again.
    """

    resource: str
    generation: int
    endpoint: str = ""
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False
    stopped_at: float | None = None
    options_known: bool = True

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    def stopped_error(self) -> str:
        """``errEndpointStopped`` (``endpoint %v has been stopped``, devicemanager/types.go, v1.34).

        Go prints the endpoint struct there (a mutex, the gRPC client's address, the stop time); those
        have no counterpart here, so teesim prints ``&{<resource name>}`` in its place.
        """
        return f"endpoint &{{{self.resource}}} has been stopped"


@dataclass
class _Resource:
    healthy: set[str] = field(default_factory=set)
    unhealthy: set[str] = field(default_factory=set)
    # Order of the last ListAndWatch response, for GetAllocatableResources.
    listed: list[str] = field(default_factory=list)


class DeviceManager:
    """State of the kubelet's device manager on one node. Not thread-safe: callers serialise."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._resources: dict[str, _Resource] = {}
        self._endpoints: dict[str, Endpoint] = {}
        # Generations whose ListAndWatch stream is open (the kubelet's live plugin clients).
        self._open: set[int] = set()
        # pod key -> container -> resource -> device IDs (the checkpointed podDevices).
        self._pod_devices: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._pods: dict[str, PodRef] = {}
        self._finished: set[str] = set()
        self._generation = 0
        self.rng = rng if rng is not None else random.Random(0)
        self.restarts = 0
        self.pod_generation = 0
        self._active_cache: dict[str, tuple[int, frozenset[str]]] = {}
        # Devices a ListAndWatch response turned unhealthy while an active pod held them.
        self.allocated_marked_unhealthy = 0
        # Called after every change to capacity or allocatable (what the kubelet then writes to the node
        # status), so a simulator with thousands of nodes can look only at the nodes that changed.
        self.on_change: Callable[[], None] | None = None
        # How many checkpointed containers hold each device, per resource (kept with _pod_devices), and
        # what allocated_ids answers until that resource's holders change. The free (healthy,
        # unallocated) IDs per resource in sorted order, patched by every allocation and release,
        # rebuilt after a new device list.
        self._holders: dict[str, Counter[str]] = {}
        self._allocated_cache: dict[str, frozenset[str]] = {}
        self._free_sorted: dict[str, list[str]] = {}

    def _pods_changed(self) -> None:
        self.pod_generation += 1

    def _hold(self, resource: str, ids: Iterable[str], delta: int) -> None:
        holders = self._holders.setdefault(resource, Counter())
        for device in ids:
            holders[device] += delta
            if holders[device] <= 0:
                del holders[device]
        self._allocated_cache.pop(resource, None)

    def _changed(self, *, keep_free_lists: bool = False) -> None:
        if not keep_free_lists:
            self._free_sorted.clear()
        if self.on_change is not None:
            self.on_change()

    def _patch_free(self, resource: str, old_healthy: set[str], new_healthy: set[str]) -> None:
        """Bring the kept free list of ``resource`` from ``old_healthy`` to ``new_healthy`` (a reconciling
        plugin's new list moves one or two devices: patched, not sorted again; many: dropped)."""
        free = self._free_sorted.get(resource)
        if free is None:
            return
        gone, came = old_healthy - new_healthy, new_healthy - old_healthy
        if len(gone) + len(came) > 64:
            del self._free_sorted[resource]
            return
        for device in gone:
            at = bisect_left(free, device)
            if at < len(free) and free[at] == device:
                del free[at]
        allocated = self.allocated_ids(resource)
        for device in came:
            if device not in allocated:
                at = bisect_left(free, device)
                if at == len(free) or free[at] != device:
                    free.insert(at, device)

    # -- registration and ListAndWatch -------------------------------------------------------------

    def register(
        self,
        resource: str,
        version: str = API_VERSION,
        endpoint: str = "",
        *,
        pre_start_required: bool = False,
        get_preferred_allocation_available: bool = False,
    ) -> Endpoint:
        """Validate a Register request and install a live endpoint; return it (keep its generation)."""
        check_registration(resource, version)
        self._generation += 1
        ep = Endpoint(
            resource=resource,
            generation=self._generation,
            endpoint=endpoint,
            pre_start_required=pre_start_required,
            get_preferred_allocation_available=get_preferred_allocation_available,
        )
        self._endpoints[resource] = ep
        self._open.add(ep.generation)
        self._changed()
        return ep

    def _stream_open(self, resource: str, generation: int | None) -> bool:
        if generation is None:
            ep = self._endpoints.get(resource)
            return ep is not None and ep.generation in self._open
        return generation in self._open

    def update_devices(
        self, resource: str, devices: Iterable[Device | tuple[str, str]], generation: int | None = None
    ) -> bool:
        """Apply one ListAndWatch response (replaces the list). False if that stream is closed."""
        if not self._stream_open(resource, generation):
            return False
        state = self._resources.setdefault(resource, _Resource())
        held = self.active_device_ids(resource)
        healthy: set[str] = set()
        unhealthy: set[str] = set()
        listed: list[str] = []
        for item in devices:
            dev = item if isinstance(item, Device) else Device(*item)
            device_id = dev.id
            if device_id not in healthy and device_id not in unhealthy:
                listed.append(device_id)
            # genericDeviceUpdateCallback (manager.go, v1.34) inserts every entry into the set its health
            # names, with no duplicate check: an ID listed Healthy and Unhealthy is in both sets.
            if dev.health == HEALTHY:
                healthy.add(device_id)
            else:
                unhealthy.add(device_id)
        self._patch_free(resource, state.healthy, healthy)
        state.healthy, state.unhealthy, state.listed = healthy, unhealthy, listed
        self.allocated_marked_unhealthy += len(held & state.unhealthy)
        self._changed(keep_free_lists=True)  # other resources' lists are untouched, this one patched
        return True

    def stream_broken(self, resource: str, generation: int | None = None, now: float = 0.0) -> bool:
        """A ListAndWatch stream of ``resource`` ended. Returns whether the kubelet's state changed.

        The kubelet disconnects whichever client is registered for the resource *now*
        (``runClient``), so a stale stream's end stops the newer endpoint too.
        """
        if generation is not None:
            if generation not in self._open:
                return False
            self._open.discard(generation)
        ep = self._endpoints.get(resource)
        if ep is None or (ep.generation not in self._open and ep.generation != generation):
            # No client is registered any more (already disconnected): nothing to do.
            return False
        self._open.discard(ep.generation)
        ep.stopped_at = now
        state = self._resources.setdefault(resource, _Resource())
        state.unhealthy |= state.healthy
        state.healthy = set()
        self._changed()
        return True

    def restart(self, now: float = 0.0) -> None:
        """Kubelet restart: every endpoint and device list is gone; the checkpoint brings back the pod
        assignments and every registered resource, each with a stopped endpoint (capacity 0)."""
        self.restarts += 1
        registered = [res for res in self._resources if not self._expired(res, now)]
        self._resources = {res: _Resource() for res in registered}
        self._endpoints = {}
        self._open = set()
        for res in registered:
            self._generation += 1
            self._endpoints[res] = Endpoint(
                resource=res, generation=self._generation, stopped_at=now, options_known=False
            )
        self._pods_changed()
        self._changed()

    # -- node status ---------------------------------------------------------------------------------

    def endpoint(self, resource: str) -> Endpoint | None:
        return self._endpoints.get(resource)

    def resources(self) -> list[str]:
        return sorted(self._resources)

    def _expired(self, resource: str, now: float | None) -> bool:
        ep = self._endpoints.get(resource)
        if ep is None:
            return True
        return now is not None and ep.stopped_at is not None and now - ep.stopped_at > ENDPOINT_STOP_GRACE_PERIOD

    def registered(self, resource: str, now: float | None = None) -> bool:
        """Whether the kubelet has a device list for ``resource`` (``healthyDevices`` has the key)."""
        return resource in self._resources and not self._expired(resource, now)

    def capacity(self, now: float | None = None) -> dict[str, int]:
        """Node capacity per resource (healthy + unhealthy); resources past the grace period vanish."""
        return {
            res: len(st.healthy) + len(st.unhealthy)
            for res, st in sorted(self._resources.items())
            if not self._expired(res, now)
        }

    def allocatable(self, now: float | None = None) -> dict[str, int]:
        """Node allocatable per resource (healthy devices only)."""
        return {res: len(st.healthy) for res, st in sorted(self._resources.items()) if not self._expired(res, now)}

    def healthy_ids(self, resource: str) -> list[str]:
        st = self._resources.get(resource)
        return sorted(st.healthy, key=natural_key) if st else []

    def unhealthy_ids(self, resource: str) -> list[str]:
        st = self._resources.get(resource)
        return sorted(st.unhealthy, key=natural_key) if st else []

    def allocatable_devices(self, resource: str) -> list[Device]:
        """``GetAllocatableDevices``: the *healthy* devices of the last list, in the plugin's order
        (upstream filters ``allDevices`` by ``healthyDevices``)."""
        st = self._resources.get(resource)
        if not st:
            return []
        return [Device(i, HEALTHY) for i in st.listed if i in st.healthy]

    # -- pods and allocation ------------------------------------------------------------------------

    def allocated_ids(self, resource: str) -> frozenset[str]:
        """Devices held by pods in the checkpoint, including finished pods not yet released (cached
        until the pods change: the kubelet asks at every admission)."""
        cached = self._allocated_cache.get(resource)
        if cached is None:
            cached = self._allocated_cache[resource] = frozenset(self._holders.get(resource, ()))
        return cached

    def is_device_plugin_resource(self, resource: str, now: float | None = None) -> bool:
        """``isDevicePluginResource``: registered, or held by some pod in the checkpoint."""
        return self.registered(resource, now) or bool(self.allocated_ids(resource))

    def has_finished_pods(self) -> bool:
        """Whether a terminated pod still holds its devices (the next ``List`` or allocation frees them)."""
        return bool(self._finished)

    def release_finished_pods(self) -> list[str]:
        """``UpdateAllocatedDevices``: forget devices of pods that are no longer active."""
        if not self._finished:
            return []
        released = sorted(k for k in self._finished if k in self._pod_devices)
        freed: dict[str, list[str]] = {}
        for key in released:
            for per_res in self._pod_devices.pop(key).values():
                for resource, ids in per_res.items():
                    freed.setdefault(resource, []).extend(ids)
                    self._hold(resource, ids, -1)
        for key in list(self._finished):
            self._pods.pop(key, None)
        if self._finished:
            self._pods_changed()
        self._finished.clear()
        for resource, ids in freed.items():
            self._return_free(resource, ids)
        return released

    def _return_free(self, resource: str, ids: Iterable[str]) -> None:
        """Put released devices back into the sorted free list (if it is kept and they are free)."""
        free = self._free_sorted.get(resource)
        if free is None:
            return
        healthy, allocated = self._resources[resource].healthy, self.allocated_ids(resource)
        for device in ids:
            if device in healthy and device not in allocated:
                at = bisect_left(free, device)
                if at == len(free) or free[at] != device:
                    free.insert(at, device)

    def free_sorted(self, resource: str) -> list[str]:
        """Healthy devices no pod holds, sorted (do not modify the list)."""
        free = self._free_sorted.get(resource)
        if free is None:
            healthy = self._resources[resource].healthy
            free = self._free_sorted[resource] = sorted(healthy - self.allocated_ids(resource))
        return free

    def _check_held(self, pod: PodRef, container: str, resource: str, count: int) -> list[str] | None:
        held = self._pod_devices.get(pod.key, {}).get(container, {}).get(resource)
        if held is not None and len(held) != count:
            # devicesToAllocate (manager.go, v1.34): "pod %q container %q changed request for resource %q ...".
            raise AllocationError(
                f"pod {go_quote(pod.key)} container {go_quote(container)} changed request for resource "
                f"{go_quote(resource)} from {len(held)} to {count}"
            )
        return held

    def _check_health(self, resource: str, held: list[str] | None, now: float | None) -> set[str]:
        """The three checks ``devicesToAllocate`` makes before counting; returns the healthy set."""
        if not self.registered(resource, now):
            raise AllocationError(f"cannot allocate unregistered device {resource}")
        healthy = self._resources[resource].healthy
        if not healthy:
            raise AllocationError(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
        if held is not None and not set(held) <= healthy:
            raise AllocationError(
                f"previously allocated devices are no longer healthy; cannot allocate unhealthy devices {resource}"
            )
        return healthy

    def devices_to_allocate(
        self,
        pod: PodRef,
        container: str,
        resource: str,
        count: int,
        preferred: Iterable[str] | None = None,
        *,
        now: float | None = None,
        already_running: bool = False,
    ) -> list[str]:
        """Choose ``count`` devices for one container (``devicesToAllocate``); does not record them.

        ``already_running``: the kubelet just restarted and the runtime reports this container
        running, so nothing is (re)allocated. Raises :class:`AllocationError` with the kubelet's words.
        """
        if count < 0:
            raise AllocationError(f"negative device count {count} requested for {resource}")
        held = self._check_held(pod, container, resource, count)
        if already_running:
            return list(held or ())
        if count == 0:
            return []
        self._check_health(resource, held, now)
        if held is not None:
            return list(held)
        # The free devices, sorted only so that a seed gives the same run in every process (set order
        # varies); kept sorted from one allocation to the next instead of sorted for each.
        available = self.free_sorted(resource)
        if len(available) < count:
            raise AllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(available)}"
            )
        if not preferred:
            return self.rng.sample(available, count)
        free = set(available)
        chosen = [i for i in dict.fromkeys(preferred) if i in free][:count]
        taken = set(chosen)
        rest = [i for i in available if i not in taken]
        return chosen + self.rng.sample(rest, count - len(chosen))

    def record_allocation(self, pod: PodRef, container: str, resource: str, device_ids: Iterable[str]) -> None:
        """The plugin's Allocate succeeded: remember the container's devices (the checkpoint)."""
        self._pods[pod.key] = pod
        self._finished.discard(pod.key)
        ids = list(device_ids)
        per_container = self._pod_devices.setdefault(pod.key, {}).setdefault(container, {})
        replaced = per_container.get(resource)
        per_container[resource] = ids
        if replaced is not None:
            self._hold(resource, replaced, -1)
        self._hold(resource, ids, 1)
        self._pods_changed()
        free = self._free_sorted.get(resource)
        if free is not None:
            if replaced is not None:
                del self._free_sorted[resource]  # what the container held before may be free again
                return
            for device in ids:
                at = bisect_left(free, device)
                if at < len(free) and free[at] == device:
                    del free[at]

    def pre_start_devices(
        self, pod: PodRef, container: str, resource: str, *, now: float | None = None
    ) -> list[str] | None:
        """``callPreStartContainerIfNeeded`` up to the RPC (manager.go and endpoint.go, v1.34): the device IDs
        to send in ``PreStartContainer``, or None when the call is skipped. Raises with upstream's words."""
        ep = self._endpoints.get(resource)
        if ep is None or self._expired(resource, now):
            # GetCapacity deletes an endpoint past its grace period; lookups then miss it.
            raise AllocationError(f"endpoint not found in cache for a registered resource: {resource}")
        if not ep.options_known or not ep.pre_start_required:
            return None  # "eI.opts == nil || !eI.opts.PreStartRequired": skipped, the container starts
        devices = self._pod_devices.get(pod.key, {}).get(container, {}).get(resource)
        if devices is None:
            raise AllocationError(
                f"no devices found allocated in local cache for pod {pod.key}, container {container}, "
                f"resource {resource}"
            )
        if ep.stopped:
            # endpointImpl.preStartContainer checks isStopped before dialling anything.
            raise AllocationError(f"device plugin PreStartContainer rpc failed with err: {ep.stopped_error()}")
        return list(devices)

    def allocate(
        self,
        pod: PodRef,
        container: str,
        resource: str,
        count: int,
        preferred: Iterable[str] | None = None,
        *,
        now: float | None = None,
    ) -> list[str]:
        """Release finished pods, choose and record in one step (for in-process models)."""
        held = self._pod_devices.get(pod.key, {}).get(container, {}).get(resource)
        if count:
            self.release_finished_pods()
        ids = self.devices_to_allocate(pod, container, resource, count, preferred, now=now)
        if held is None and ids:
            self.record_allocation(pod, container, resource, ids)
        return ids

    def add_pod(self, pod: PodRef) -> None:
        """Make a pod known (and active) even if it holds no devices, so pod-resources lists it."""
        if pod.key in self._pods and pod.key not in self._finished:
            return
        self._pods[pod.key] = pod
        self._finished.discard(pod.key)
        self._pods_changed()

    def finish_pod(self, pod: PodRef | str) -> None:
        """The pod terminated. Its devices stay allocated until the next allocation releases them."""
        key = pod.key if isinstance(pod, PodRef) else pod
        if (key in self._pods or key in self._pod_devices) and key not in self._finished:
            self._finished.add(key)
            self._pods_changed()

    def active_pods(self) -> list[PodRef]:
        return [p for k, p in sorted(self._pods.items()) if k not in self._finished]

    def pod_devices(self, pod: PodRef | str) -> Mapping[str, Mapping[str, list[str]]]:
        """container -> resource -> device IDs of one pod (empty if it holds none)."""
        key = pod.key if isinstance(pod, PodRef) else pod
        return {c: dict(r) for c, r in self._pod_devices.get(key, {}).items()}

    def holds_devices(self, pod: PodRef | str) -> bool:
        """Whether some container of the pod has devices in the checkpoint (``pod_devices`` is not
        empty), without copying them."""
        key = pod.key if isinstance(pod, PodRef) else pod
        return any(self._pod_devices.get(key, {}).values())

    def active_device_ids(self, resource: str) -> frozenset[str]:
        """What pod-resources ``List`` reports for ``resource``: devices of active pods only
        (``List`` calls ``UpdateAllocatedDevices`` first, so finished pods are freed before it answers).
        Cached on ``pod_generation``, which only this class changes."""
        cached = self._active_cache.get(resource)
        if cached is not None and cached[0] == self.pod_generation:
            return cached[1]
        ids = self.allocated_ids(resource)
        if self._finished:
            # Every checkpointed holder is in _pods; a device is active unless all of its holders
            # are finished pods. Counting those costs the finished pods, not every pod.
            inactive: Counter[str] = Counter()
            for key in self._finished:
                for per_res in self._pod_devices.get(key, {}).values():
                    inactive.update(per_res.get(resource, ()))
            if inactive:
                holders = self._holders.get(resource, Counter())
                ids = frozenset(d for d in ids if inactive[d] < holders[d])
        self._active_cache[resource] = (self.pod_generation, ids)
        return ids

    def find_pod(self, namespace: str, name: str) -> PodRef | None:
        for pod in self.active_pods():
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None
