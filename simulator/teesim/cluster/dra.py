"""Dynamic Resource Allocation for TEE keys: ResourceSlices, the scheduler's allocation, claims.

Models structured parameters (KEP-4381) with the extended-resource mapping of KEP-5004 (beta in
Kubernetes 1.36):

* a DRA driver on each node publishes a ``ResourceSlice`` listing the key devices it offers;
  a ``DeviceClass`` with ``extendedResourceName`` maps those devices to an extended resource name,
  so a pod that asks for that name (container requests) is satisfied from DRA devices on nodes that
  do not advertise the name in ``status.allocatable``. A node cannot have the same name from a
  device plugin (or NFD) and from DRA at once;
* the scheduler (the ``DynamicResources`` plugin) allocates devices from the slice when it places
  the pod: a device is free when it is in the slice and in no allocated claim. It writes the
  allocation into a special ``ResourceClaim`` owned by the pod (Reserve/PreBind): there is no node
  status sync in between, unlike device plugins;
* the claim is deallocated when the pod terminates (the resource-claim controller; its latency is
  not modelled) and the kubelet prepares the claim's devices through the driver at admission.

:class:`DRAPool` is one driver's slice on one node, for one extended resource name.
Simplifications: one pool per node and name, one device per key, the structured allocator takes
free devices in slice order, the API server's write and watch latency is zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class DRAPool:
    """One ResourceSlice (and the claims allocated from it) on one node."""

    driver: str
    resource: str  # the DeviceClass's extendedResourceName
    devices: tuple[str, ...] = ()
    generation: int = 0
    # device -> pod UID of the claim it is allocated to
    allocated: dict[str, str] = field(default_factory=dict)
    # Called after every change of the slice or the claims (the simulation watches its nodes with it).
    on_change: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    # Bumped by every allocation and release, so the driver can tell its claims are unchanged.
    claims_revision: int = field(default=0, compare=False)
    _free: tuple[tuple[int, int], int] | None = field(default=None, repr=False, compare=False)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def publish(self, devices: Iterable[str]) -> bool:
        """The driver writes a new slice; True when it changed (a new slice generation)."""
        new = tuple(devices)
        if new == self.devices:
            return False
        self.devices = new
        self.generation += 1
        self._changed()
        return True

    def free(self) -> int:
        """Devices in the slice that no claim holds: what the scheduler can still allocate (counted
        again only after the slice or the claims changed: the scheduler asks at every pass)."""
        key = (self.generation, self.claims_revision)
        if self._free is None or self._free[0] != key:
            self._free = (key, sum(1 for d in self.devices if d not in self.allocated))
        return self._free[1]

    def allocate(self, pod_uid: str, count: int) -> list[str]:
        """The scheduler's allocation for one pod; raises ValueError when the slice has too few."""
        chosen = [d for d in self.devices if d not in self.allocated][:count]
        if len(chosen) < count:
            raise ValueError(f"{self.resource}: {count} devices requested, {len(chosen)} free in the slice")
        for device in chosen:
            self.allocated[device] = pod_uid
        if chosen:
            self.claims_revision += 1
            self._changed()
        return chosen

    def release(self, pod_uid: str) -> list[str]:
        """The pod's claim is deallocated."""
        freed = [d for d, uid in self.allocated.items() if uid == pod_uid]
        for device in freed:
            del self.allocated[device]
        if freed:
            self.claims_revision += 1
            self._changed()
        return freed

    def claimed(self) -> frozenset[str]:
        """Devices allocated to claims: what the driver knows as its own."""
        return frozenset(self.allocated)
