"""The reconciling device plugin's decision, as pure functions shared by the real gRPC plugin
(:mod:`teesim.plugins.reconciling`) and the in-process strategy model.

The kernel's ``misc.current`` counts every key in use on the host: this plugin's own VMs, Kata pods
(charged through RuntimeClass overhead, invisible to the plugin) and VMs started outside Kubernetes.
The plugin knows its own share from the kubelet's pod-resources ``List``. The difference,
``current - own``, is keys someone else holds; the plugin advertises that many of its *free*
devices as Unhealthy so the scheduler cannot place a VM whose launch would hit EBUSY.

Rules (each one is tested):

* never mark an allocated device Unhealthy (the kubelet would count the pod's device as broken);
* choose the free devices from the end of the natural sort order, so the choice is deterministic
  and does not collide with the kubelet, which hands out free devices from the front;
* when ``current - own`` exceeds the free devices, mark every free device and report the rest as
  ``overflow`` (the kernel is more used than this plugin can express);
* own allocations that the kernel has not charged yet (pod admitted, VM not started) make
  ``current - own`` too small: that is the race window every strategy based on usage has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from teesim.kubelet.devicemanager import natural_key


def device_ids(misc_resource: str, capacity: int) -> tuple[str, ...]:
    """The plugin's device IDs for ``capacity`` keys, e.g. ``tdx-000`` ... ``tdx-062``."""
    width = max(3, len(str(max(capacity - 1, 0))))
    return tuple(f"{misc_resource}-{i:0{width}d}" for i in range(max(capacity, 0)))


def capacity_from_misc(capacity_values: Mapping[str, int | None], misc_resource: str) -> int | None:
    """Device count from parsed ``misc.capacity`` values: a missing line means 0 (the kernel omits
    zero-capacity resources), an unparsable one None."""
    if misc_resource not in capacity_values:
        return 0
    return capacity_values[misc_resource]


@dataclass(frozen=True)
class Decision:
    """What the plugin advertises after one poll."""

    unhealthy: frozenset[str]
    others: int  # keys the kernel counts beyond this plugin's own allocations (never negative)
    overflow: int  # of those, how many could not be expressed because no free device was left


def reconcile(all_ids: Sequence[str], own_allocated_ids: Iterable[str], kernel_current: int) -> Decision:
    """Decide which devices to mark Unhealthy given the kernel's usage of the resource."""
    known = set(all_ids)
    own = {i for i in own_allocated_ids if i in known}
    others = max(kernel_current - len(own), 0)
    free = sorted((i for i in known if i not in own), key=natural_key)
    take = min(others, len(free))
    chosen = frozenset(free[len(free) - take :]) if take else frozenset()
    return Decision(unhealthy=chosen, others=others, overflow=others - take)


def unhealthy_devices(all_ids: Sequence[str], own_allocated_ids: Iterable[str], kernel_current: int) -> frozenset[str]:
    """Exactly the devices to mark Unhealthy: ``current - own`` free ones, clamped to the free count."""
    return reconcile(all_ids, own_allocated_ids, kernel_current).unhealthy


def next_unhealthy(
    all_ids: Sequence[str],
    own_allocated_ids: Iterable[str],
    kernel_current: int | None,
    previous: Iterable[str],
) -> frozenset[str]:
    """One poll's result; when ``misc.current`` could not be read (None) keep the previous set,
    minus any device that has since been allocated (an allocated device is never Unhealthy)."""
    if kernel_current is not None:
        return unhealthy_devices(all_ids, own_allocated_ids, kernel_current)
    own = set(own_allocated_ids)
    known = set(all_ids)
    return frozenset(i for i in previous if i in known and i not in own)
