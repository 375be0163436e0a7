"""The kubelet's device manager as a pure state machine (no gRPC, no threads, no clock of its own).

This models ``pkg/kubelet/cm/devicemanager`` (``manager.go``, ``plugin/v1beta1/server.go``) closely
enough that a strategy's failure modes come out the same as on a real node:

* ``Register`` accepts only API version ``v1beta1`` and an *extended* resource name
  (``domain/name``, not in the ``kubernetes.io/`` namespace, not starting with ``requests.``).
  A second registration of the same resource replaces the first endpoint (a restarted plugin);
  the old device list stays until the new stream's first response replaces it.
* Every ``ListAndWatch`` response *replaces* the resource's device list; ``Healthy`` devices are
  healthy, any other health string is unhealthy (as ``genericDeviceUpdateCallback`` does).
* Node capacity = healthy + unhealthy, allocatable = healthy (``GetCapacity``).
* When a plugin's stream breaks, every device of the resource turns unhealthy (capacity kept,
  allocatable 0: ``markResourceUnhealthy``); after ``ENDPOINT_STOP_GRACE_PERIOD`` seconds without a
  new registration the resource disappears from the node.
* Allocation happens per container and per resource (the kubelet calls the plugin's ``Allocate``
  once per container). Before choosing devices, devices of pods that are no longer active are
  released (``UpdateAllocatedDevices``): finished pods are freed *lazily* and the plugin is never
  told. A container that already holds devices of the resource gets the same ones again.
* A kubelet restart loses every endpoint and device list (plugins must re-register) but keeps the
  pod-to-device assignments (the kubelet's checkpoint file); the restored resources have a
  stopped endpoint, so capacity reads 0 until the plugin re-registers.

Device choice: the real kubelet, absent ``GetPreferredAllocation``, takes an arbitrary subset of the
available set (Go map order). Here the choice is the first available IDs in natural sort order so
that runs are reproducible; a plugin's preferred allocation, when given and valid, wins as upstream.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

API_VERSION = "v1beta1"
SUPPORTED_VERSIONS = (API_VERSION,)
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# endpointStopGracePeriod in pkg/kubelet/cm/devicemanager/endpoint.go.
ENDPOINT_STOP_GRACE_PERIOD = 5 * 60.0

_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NATURAL_RE = re.compile(r"(\d+)")


class RegistrationError(ValueError):
    """The kubelet rejected a Register call (the plugin is expected to exit)."""


class AllocationError(RuntimeError):
    """The kubelet cannot give a container the devices it requests (pod admission fails)."""


@lru_cache(maxsize=65536)
def natural_key(device_id: str) -> tuple:
    """Sort key that orders ``tdx-2`` before ``tdx-10``."""
    return tuple(int(part) if part.isdigit() else part for part in _NATURAL_RE.split(device_id))


def extended_resource_name_problem(name: str) -> str | None:
    """Why ``name`` is not an extended resource name (``v1helper.IsExtendedResourceName``), or None."""
    if "/" not in name:
        return f"{name!r} has no domain prefix; device plugins must use 'vendor.example.com/name'"
    if "kubernetes.io/" in name:
        return f"{name!r} is in the kubernetes.io namespace, which is reserved for native resources"
    if name.startswith("requests."):
        return f"{name!r} must not start with 'requests.'"
    prefix, _, short = name.rpartition("/")
    if "/" in prefix:
        return f"{name!r} has more than one '/'"
    if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix):
        return f"prefix {prefix!r} of {name!r} is not a DNS-1123 subdomain"
    if not short or len(short) > 63 or not _QUALIFIED_NAME_RE.match(short):
        return f"name part {short!r} of {name!r} is not a qualified name (<= 63 alphanumerics, '-', '_', '.')"
    return None


def check_registration(resource: str, version: str) -> None:
    """Raise :class:`RegistrationError` with the kubelet's wording when Register must be refused."""
    if version not in SUPPORTED_VERSIONS:
        raise RegistrationError(
            f"invalid version of api: {version!r}, supported versions: {', '.join(SUPPORTED_VERSIONS)}"
        )
    problem = extended_resource_name_problem(resource)
    if problem:
        raise RegistrationError(f"invalid resource name: {problem}")


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
    """The kubelet's connection to one plugin; ``generation`` tells a stale stream from the live one."""

    resource: str
    generation: int
    endpoint: str = ""
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False
    stopped_at: float | None = None

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None


@dataclass
class _Resource:
    healthy: set[str] = field(default_factory=set)
    unhealthy: set[str] = field(default_factory=set)
    # Order of the last ListAndWatch response, for GetAllocatableResources.
    listed: list[str] = field(default_factory=list)


class DeviceManager:
    """State of the kubelet's device manager on one node. Not thread-safe: callers serialise."""

    def __init__(self) -> None:
        self._resources: dict[str, _Resource] = {}
        self._endpoints: dict[str, Endpoint] = {}
        # pod key -> container -> resource -> device IDs (the checkpointed podDevices).
        self._pod_devices: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._pods: dict[str, PodRef] = {}
        self._finished: set[str] = set()
        self._generation = 0
        self.restarts = 0
        # Called after every change to capacity or allocatable (what the kubelet then writes to the node
        # status), so a simulator with thousands of nodes can look only at the nodes that changed.
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

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
        self._resources.setdefault(resource, _Resource())
        self._changed()
        return ep

    def _live(self, resource: str, generation: int | None) -> bool:
        ep = self._endpoints.get(resource)
        # A stopped endpoint's stream is over: nothing it sends counts until the plugin registers again.
        if ep is None or ep.stopped:
            return False
        return generation is None or ep.generation == generation

    def update_devices(
        self, resource: str, devices: Iterable[Device | tuple[str, str]], generation: int | None = None
    ) -> bool:
        """Apply one ListAndWatch response (replaces the list). False if the stream is stale."""
        if not self._live(resource, generation):
            return False
        state = self._resources.setdefault(resource, _Resource())
        state.healthy, state.unhealthy, state.listed = set(), set(), []
        for item in devices:
            dev = item if isinstance(item, Device) else Device(*item)
            if dev.id in state.healthy or dev.id in state.unhealthy:
                continue
            state.listed.append(dev.id)
            (state.healthy if dev.healthy else state.unhealthy).add(dev.id)
        self._changed()
        return True

    def stream_broken(self, resource: str, generation: int | None = None, now: float = 0.0) -> bool:
        """The plugin's ListAndWatch stream ended: every device turns unhealthy. False if stale."""
        if not self._live(resource, generation):
            return False
        ep = self._endpoints[resource]
        if ep.stopped_at is None:
            ep.stopped_at = now
        state = self._resources.setdefault(resource, _Resource())
        state.unhealthy |= state.healthy
        state.healthy = set()
        self._changed()
        return True

    def restart(self, now: float = 0.0) -> None:
        """Kubelet restart: endpoints and device lists are gone, pod assignments survive (checkpoint)."""
        self.restarts += 1
        checkpointed = {res for containers in self._pod_devices.values() for c in containers.values() for res in c}
        self._resources = {res: _Resource() for res in checkpointed}
        self._endpoints = {}
        for res in checkpointed:
            self._generation += 1
            self._endpoints[res] = Endpoint(resource=res, generation=self._generation, stopped_at=now)
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

    def all_devices(self, resource: str) -> list[Device]:
        """Every device of the last list, in the plugin's order (``GetAllocatableResources`` reports
        unhealthy devices too, as upstream's ``allDevices`` does)."""
        st = self._resources.get(resource)
        if not st:
            return []
        return [
            Device(i, HEALTHY if i in st.healthy else UNHEALTHY) for i in st.listed if i in st.healthy | st.unhealthy
        ]

    # -- pods and allocation ------------------------------------------------------------------------

    def allocated_ids(self, resource: str) -> set[str]:
        """Devices held by pods in the checkpoint, including finished pods not yet released."""
        return {
            dev
            for containers in self._pod_devices.values()
            for per_res in containers.values()
            for dev in per_res.get(resource, ())
        }

    def release_finished_pods(self) -> list[str]:
        """``UpdateAllocatedDevices``: forget devices of pods that are no longer active."""
        released = sorted(k for k in self._finished if k in self._pod_devices)
        for key in released:
            del self._pod_devices[key]
        for key in list(self._finished):
            self._pods.pop(key, None)
        self._finished.clear()
        return released

    def devices_to_allocate(
        self, pod: PodRef, container: str, resource: str, count: int, preferred: Iterable[str] | None = None
    ) -> list[str]:
        """Choose ``count`` devices for one container (``devicesToAllocate``); does not record them.

        Raises :class:`AllocationError` with the kubelet's wording when it cannot.
        """
        if count < 0:
            raise AllocationError(f"negative device count {count} requested for {resource}")
        held = self._pod_devices.get(pod.key, {}).get(container, {}).get(resource)
        if held is not None:
            if len(held) != count:
                raise AllocationError(
                    f"pod {pod.key} container {container} already holds {len(held)} {resource} devices, "
                    f"requested {count}"
                )
            return list(held)
        if count == 0:
            return []
        self.release_finished_pods()
        if resource not in self._resources or resource not in self._endpoints:
            raise AllocationError(f"cannot allocate unregistered device {resource}")
        ep = self._endpoints[resource]
        if ep.stopped:
            raise AllocationError(f"endpoint of {resource} is stopped: requested {count}, available 0")
        available = self._resources[resource].healthy - self.allocated_ids(resource)
        if len(available) < count:
            raise AllocationError(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(available)}"
            )
        if preferred is not None:
            chosen = list(dict.fromkeys(preferred))
            if len(chosen) == count and set(chosen) <= available:
                return chosen
        # The first ``count`` in natural order (what sorted(...)[:count] gives, without sorting them all).
        return heapq.nsmallest(count, available, key=natural_key)

    def record_allocation(self, pod: PodRef, container: str, resource: str, device_ids: Iterable[str]) -> None:
        """The plugin's Allocate succeeded: remember the container's devices (the checkpoint)."""
        self._pods[pod.key] = pod
        self._finished.discard(pod.key)
        ids = list(device_ids)
        self._pod_devices.setdefault(pod.key, {}).setdefault(container, {})[resource] = ids

    def allocate(
        self, pod: PodRef, container: str, resource: str, count: int, preferred: Iterable[str] | None = None
    ) -> list[str]:
        """Choose and record in one step (for in-process models where Allocate cannot fail)."""
        ids = self.devices_to_allocate(pod, container, resource, count, preferred)
        self.record_allocation(pod, container, resource, ids)
        return ids

    def add_pod(self, pod: PodRef) -> None:
        """Make a pod known (and active) even if it holds no devices, so pod-resources lists it."""
        self._pods[pod.key] = pod
        self._finished.discard(pod.key)

    def finish_pod(self, pod: PodRef | str) -> None:
        """The pod terminated. Its devices stay allocated until the next allocation releases them."""
        key = pod.key if isinstance(pod, PodRef) else pod
        if key in self._pods or key in self._pod_devices:
            self._finished.add(key)

    def active_pods(self) -> list[PodRef]:
        return [p for k, p in sorted(self._pods.items()) if k not in self._finished]

    def active_device_ids(self, resource: str) -> frozenset[str]:
        """Devices of ``resource`` held by active pods: the union of what :meth:`active_pods` and
        :meth:`pod_devices` give (pod-resources ``List``), without copying every pod's map."""
        finished = self._finished
        pod_devices = self._pod_devices
        held: set[str] = set()
        for key in self._pods:
            if key in finished:
                continue
            for per_resource in pod_devices.get(key, {}).values():
                held.update(per_resource.get(resource, ()))
        return frozenset(held)

    def pod_devices(self, pod: PodRef | str) -> Mapping[str, Mapping[str, list[str]]]:
        """container -> resource -> device IDs of one pod (empty if it holds none)."""
        key = pod.key if isinstance(pod, PodRef) else pod
        return {c: dict(r) for c, r in self._pod_devices.get(key, {}).items()}

    def find_pod(self, namespace: str, name: str) -> PodRef | None:
        for pod in self.active_pods():
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None
