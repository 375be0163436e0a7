"""The reconciling advertisers' decision, as pure functions shared by the real gRPC plugins
(:mod:`teesim.plugins.reconciling`, :mod:`teesim.plugins.unified`) and the in-process models.

The kernel's ``misc.current`` counts every key in use on the host: this plugin's own VMs, Kata pods
and VMs started outside Kubernetes. The plugin knows its own share from the kubelet's pod-resources
``List`` plus every ``Allocate`` it answered since (the kubelet picks a pod's devices before the
next ``List`` can show them). The unified plugin also knows the keys the scheduler already counts
for pods that hold no device (RuntimeClass overhead: ``accounted_elsewhere``). The rest,
``current - own - accounted_elsewhere``, is keys someone else holds; the plugin advertises that
many of its *free* devices as Unhealthy so the scheduler cannot place a guest whose launch would hit
EBUSY. An operator may keep ``reserve`` keys out of the pool for VMs started outside Kubernetes:
then at least that many free devices stay Unhealthy.

Rules (each one is tested):

* never mark an allocated device Unhealthy (the kubelet would count the pod's device as broken, and
  a restart of that container would fail admission);
* keep the devices that are already Unhealthy when the count allows it, and take new ones from the
  end of the natural order: the published set changes as little as possible between polls. This
  does not assume anything about which free device the kubelet hands out next (it picks in no
  particular order); the plugin relies only on knowing every allocation, from ``List`` and from its
  own ``Allocate`` calls;
* when the count exceeds the free devices, mark every free device and report the rest as
  ``overflow`` (the kernel is more used than this plugin can express);
* an own device counts as charged only when the guest of the pod holding it started
  (:func:`own_charged`): a VMI admitted but not started holds a device and no key, and counting it as
  charged would hide one key too few (a phantom slot the scheduler fills, issue 19). When the
  plugin has no view of the pods (``own_charged=None``), every own device is assumed charged: the
  race window every strategy based on usage has, widened by that phantom slot.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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


READY_CONDITION = "PodReadyToStartContainers"


def sandbox_ready(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's sandbox exists, as a pod object (``GET /pods``, an informer) says.

    The kubelet sets the condition ``PodReadyToStartContainers`` True once RunPodSandbox succeeded
    (kubernetes v1.29 ``pkg/kubelet/status/generate.go``, KEP-3085; older kubelets lack it, then
    phase Running stands for it). For Kata the sandbox is the VM, so its key is charged. A terminal
    pod charges nothing (its sandbox is gone)."""
    status = pod.get("status") or {}
    if not isinstance(status, Mapping) or status.get("phase") in ("Succeeded", "Failed"):
        return False
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == READY_CONDITION:
            return condition.get("status") == "True"
    return status.get("phase") == "Running"


def pod_key(namespace: str, name: str) -> str:
    """How pod-resources (namespace, name) and a pod object's metadata meet: ``namespace/name``."""
    return f"{namespace}/{name}"


def started_pods(pods: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """``namespace/name`` of the pods whose guest started (:func:`sandbox_ready`)."""
    started = set()
    for pod in pods:
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        if isinstance(meta, Mapping) and sandbox_ready(pod):
            started.add(pod_key(str(meta.get("namespace", "")), str(meta.get("name", ""))))
    return frozenset(started)


def own_charged(holders: Mapping[str, str], own_ids: Iterable[str], started: Collection[str]) -> int:
    """How many own devices the kernel charges: those whose holder (``holders``: device ID ->
    ``namespace/name`` from pod-resources ``List``) is a started pod. A device known only from an
    ``Allocate`` since that ``List`` has no known holder: its pod was admitted a moment ago and counts
    as not started (hiding one key more for a poll is too careful, never too few)."""
    return sum(1 for i in set(own_ids) if holders.get(i) in started)


@dataclass(frozen=True)
class Decision:
    """What the plugin advertises after one poll."""

    unhealthy: frozenset[str]
    others: int  # keys the kernel counts beyond what the scheduler already accounts for (>= 0)
    overflow: int  # of the keys to hide (others, or the reserve), how many had no free device left


def reconcile(
    all_ids: Sequence[str],
    own_allocated_ids: Iterable[str],
    kernel_current: int,
    previous: Iterable[str] = (),
    *,
    accounted_elsewhere: int = 0,
    reserve: int = 0,
    own_charged: int | None = None,
) -> Decision:
    """Decide which devices to mark Unhealthy given the kernel's usage of the resource.

    ``own_charged``: how many of the own allocations the kernel already charges (:func:`own_charged`
    for the gRPC plugins, the pods' started state for the in-process models and the DRA driver); None
    when the advertiser cannot tell, then all of them are assumed charged.
    """
    order, known = _natural_order(all_ids) if isinstance(all_ids, tuple) else _sort_ids(all_ids)
    own = {i for i in own_allocated_ids if i in known}
    charged = len(own) if own_charged is None else max(own_charged, 0)
    others = max(kernel_current - charged - max(accounted_elsewhere, 0), 0)
    want = max(others, max(reserve, 0))
    free = [i for i in order if i not in own] if own else list(order)
    free_set = set(free)
    kept = sorted((i for i in previous if i in free_set), key=natural_key)
    chosen = kept[len(kept) - min(want, len(kept)) :] if want else []
    chosen_set = set(chosen)
    for device in reversed(free):
        if len(chosen) >= want:
            break
        if device not in chosen_set:
            chosen.append(device)
            chosen_set.add(device)
    return Decision(unhealthy=frozenset(chosen), others=others, overflow=want - len(chosen))


def _sort_ids(all_ids: Iterable[str]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The distinct IDs in natural order, and as a set."""
    known = frozenset(all_ids)
    return tuple(sorted(known, key=natural_key)), known


# A plugin passes the same tuple of IDs at every poll: sort it once, not once per decision.
_natural_order = lru_cache(maxsize=256)(_sort_ids)


def unhealthy_devices(all_ids: Sequence[str], own_allocated_ids: Iterable[str], kernel_current: int) -> frozenset[str]:
    """Exactly the devices to mark Unhealthy: ``current - own`` free ones, clamped to the free count."""
    return reconcile(all_ids, own_allocated_ids, kernel_current).unhealthy


def next_unhealthy(
    all_ids: Sequence[str],
    own_allocated_ids: Iterable[str],
    kernel_current: int | None,
    previous: Iterable[str],
    *,
    accounted_elsewhere: int = 0,
    reserve: int = 0,
    own_charged: int | None = None,
) -> frozenset[str]:
    """One poll's result; when ``misc.current`` could not be read (None) keep the previous set,
    minus any device that has since been allocated (an allocated device is never Unhealthy)."""
    if kernel_current is not None:
        return reconcile(
            all_ids,
            own_allocated_ids,
            kernel_current,
            previous,
            accounted_elsewhere=accounted_elsewhere,
            reserve=reserve,
            own_charged=own_charged,
        ).unhealthy
    own = set(own_allocated_ids)
    known = set(all_ids)
    return frozenset(i for i in previous if i in known and i not in own)
