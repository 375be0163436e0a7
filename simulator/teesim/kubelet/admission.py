"""The kubelet's resource check when it admits a pod (``pkg/kubelet/lifecycle/predicate.go``).

After the device manager allocated the pod's device-plugin devices, the predicate admit handler
checks the pod against the node as the kubelet sees it:

* ``allocatable`` is the Node object's status (what the kubelet last published), raised for each
  device-plugin resource to at least the number of devices pods hold (``sanitizeNodeAllocatable``,
  only when the admitted pod holds devices itself);
* ``removeMissingExtendedResources`` drops, from the *container* requests only, every extended
  resource the node does not list at all (cluster-level resources such as DRA-backed names).
  ``spec.overhead`` is not filtered: a RuntimeClass overhead naming a resource the node lacks
  fails admission;
* the pod's need (container requests + overhead) must fit ``allocatable`` minus what the other
  admitted pods need (``noderesources.Fits``). The first resource that does not fit gives the
  reason ``OutOf<resource>`` and the message of ``InsufficientResourceError``.

Device-plugin devices themselves are only ever allocated for container requests (the device
manager walks ``container.Resources.Limits``): overhead is counted here but never gets a device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionRejection:
    """Why the kubelet rejected a pod: ``reason`` as in the pod status, and the message."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def sanitize_allocatable(
    allocatable: Mapping[str, int], allocated_devices: Mapping[str, int], pod_holds_devices: bool
) -> dict[str, int]:
    """``sanitizeNodeAllocatable``: device-plugin resources are at least what pods already hold."""
    merged = dict(allocatable)
    if pod_holds_devices:
        for resource, held in allocated_devices.items():
            if merged.get(resource, 0) < held:
                merged[resource] = held
    return merged


def admission_need(
    container_requests: Mapping[str, int], overhead: Mapping[str, int], allocatable: Mapping[str, int]
) -> dict[str, int]:
    """Container requests without extended resources the node lacks, plus the full overhead."""
    need = {r: n for r, n in container_requests.items() if "/" not in r or r in allocatable}
    for resource, amount in overhead.items():
        need[resource] = need.get(resource, 0) + amount
    return need


def check_fit(
    need: Mapping[str, int], allocatable: Mapping[str, int], used_by_others: Mapping[str, int]
) -> AdmissionRejection | None:
    """``noderesources.Fits`` for the resources in ``need``; None when the pod fits."""
    for resource in sorted(need):
        requested = need[resource]
        if requested <= 0:
            continue
        capacity = allocatable.get(resource, 0)
        used = used_by_others.get(resource, 0)
        if requested > capacity - used:
            return AdmissionRejection(
                f"OutOf{resource}",
                f"Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, "
                f"capacity: {capacity}",
            )
    return None
