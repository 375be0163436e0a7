# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The kernel-sized key pool: how many keys the scheduler may hand out on one node (``tee_key_pool_mode: kernel``).

The one home of the rule the node agent (:mod:`.agent`) applies and ``teesim``'s ``kernel-pool`` strategy runs in
process. Pure functions, standard library only.

Per misc resource (``tdx``; ``sev_es``, which SEV-ES and SEV-SNP guests charge) the kernel knows ``capacity``
(``misc.capacity``) and ``current`` (the root ``misc.current``: every key in use on the host). Kubernetes holds
``k8s_running`` of those: non-terminal pods bound to this node that request the pool resource (Kata by its
RuntimeClass overhead, KubeVirt's launcher pods by the request the admission policy adds) and whose guest the kernel
charges. The rest is held outside Kubernetes::

    external = current - min(k8s_running, current)
    pool     = max(0, capacity - external - reserve)          # the Node's capacity = allocatable

The scheduler then sees ``pool - bound`` free, where ``bound`` are the pods it counts on the node (charged or not
yet). Because ``k8s_running`` only counts pods the scheduler counts too, ``pool - bound <= capacity - current -
(bound pods not charged yet) - reserve``: the scheduler never sees more free keys than the kernel has free for
Kubernetes (tests/unit/plugins/module_utils/agent/test_decision.py proves it by property test).

On doubt the pool shrinks, never grows: when the pod list is unavailable every used key counts as external
(``capacity - current - reserve``); when ``misc.capacity`` or ``misc.current`` cannot be read the pool is 0; and
while any doubt lasts the pool is never larger than the one published before it. Every doubt is named (a
:class:`Doubt` with a condition reason) so the agent can log it and put it on the Node.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.record import Record

# The one extended resource per misc pool that every consumer requests on a kernel-mode node: Kata's own names,
# so Kata's shipped RuntimeClasses (overhead.podFixed) work unchanged.
POOL_RESOURCES = dict(tee.NFD_KEYS)
MISC_OF_POOL = {resource: misc for misc, resource in POOL_RESOURCES.items()}
CONDITION_TYPE = "ConfidentialTeeKeyPool"

# Condition reasons (CamelCase, as Kubernetes condition reasons are).
REASON_OK = "KernelReconciled"
REASON_NO_RESOURCE = "NoTeeKeyResource"
REASON_NO_MISC = "MiscControllerUnavailable"
REASON_CAPACITY_UNKNOWN = "CapacityUnreadable"
REASON_CURRENT_UNKNOWN = "UsageUnreadable"
REASON_PODS_UNKNOWN = "PodListUnavailable"
REASON_OVER_CAPACITY = "UsageAboveCapacity"
REASON_SNP_RANGE_UNKNOWN = "SnpRangeUnknown"


class Doubt(Record):
    """Something the decision could not trust, with the condition reason it puts on the Node."""

    __slots__ = ("message", "reason")

    def __init__(self, reason: str, message: str) -> None:
        self.reason, self.message = reason, message


class PoolDecision(Record):
    """The pool of one misc resource after one decision, and every number it came from."""

    __slots__ = (
        "capacity",
        "current",
        "doubts",
        "external",
        "k8s_running",
        "limit",
        "misc",
        "pool",
        "reserve",
        "resource",
    )

    def __init__(
        self,
        misc: str,
        pool: int,
        capacity: int | None,
        current: int | None,
        k8s_running: int | None,
        external: int | None,
        reserve: int,
        doubts: tuple[Doubt, ...] = (),
        limit: int | None = None,
    ) -> None:
        self.misc, self.pool, self.capacity, self.current = misc, pool, capacity, current
        self.k8s_running, self.external, self.reserve, self.doubts = k8s_running, external, reserve, doubts
        self.limit = limit
        self.resource = POOL_RESOURCES.get(misc, misc)

    @property
    def reason(self) -> str:
        return self.doubts[0].reason if self.doubts else REASON_OK

    def explain(self) -> str:
        """One line: the value and why, as the agent logs it."""
        capacity = _shown(self.capacity) if self.limit is None else f"{_shown(self.capacity)} (SNP range {self.limit})"
        numbers = (
            f"capacity {capacity} - external {_shown(self.external)} - reserve {self.reserve}"
            f" (current {_shown(self.current)}, Kubernetes guests charged {_shown(self.k8s_running)})"
        )
        text = f"{self.resource} = {self.pool}: {numbers}"
        if self.doubts:
            text += "; shrunk on doubt: " + "; ".join(d.message for d in self.doubts)
        return text

    def as_dict(self) -> dict:
        return {
            "misc": self.misc,
            "resource": self.resource,
            "pool": self.pool,
            "capacity": self.capacity,
            "current": self.current,
            "k8s_running": self.k8s_running,
            "external": self.external,
            "reserve": self.reserve,
            "snp_range": self.limit,
            "reason": self.reason,
            "doubts": [{"reason": d.reason, "message": d.message} for d in self.doubts],
        }


def _shown(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def decide(
    misc: str,
    capacity: int | None,
    current: int | None,
    k8s_running: int | None,
    reserve: int = 0,
    previous: int | None = None,
    doubts: tuple[Doubt, ...] = (),
    limit: int | None = None,
) -> PoolDecision:
    """The pool of ``misc`` from the kernel's numbers and the keys Kubernetes guests hold (see the module text).

    ``None`` is unknown: ``capacity`` or ``current`` unknown gives 0, ``k8s_running`` unknown counts every used
    key as external. ``doubts`` are what the caller could not trust in its inputs; with any doubt the pool is also
    kept at or below ``previous`` (the value published before), so a doubtful reading never grows the pool.

    ``limit``: the most keys these guests can get whatever ``misc.capacity`` says. AMD ciphertext hiding gives SNP
    guests ASIDs 1..N only while ``misc.capacity sev_es`` stays the joint count (host/sev_asids.py), and
    ``misc.current sev_es`` cannot tell SNP from SEV-ES guests: counting every used key against the SNP range
    (``min(capacity, N) - external``) can only hide too many, never too few.
    """
    reserve = max(0, reserve)
    found = list(doubts)
    if capacity is None:
        found.append(Doubt(REASON_CAPACITY_UNKNOWN, f"misc.capacity gives no usable value for {misc}"))
    if current is None:
        found.append(Doubt(REASON_CURRENT_UNKNOWN, f"misc.current gives no usable value for {misc}"))
    if k8s_running is None and not any(d.reason == REASON_PODS_UNKNOWN for d in found):
        found.append(
            Doubt(REASON_PODS_UNKNOWN, "the pods on this node are unknown: every key in use counts as external")
        )
    if capacity is not None and current is not None and current > capacity:
        found.append(
            Doubt(
                REASON_OVER_CAPACITY,
                f"misc.current {current} exceeds misc.capacity {capacity} (capacity lowered while guests run, "
                "or read mid-update)",
            )
        )
    if capacity is None or current is None:
        return PoolDecision(misc, 0, capacity, current, k8s_running, None, reserve, tuple(found), limit)
    held = min(max(k8s_running or 0, 0), current)
    external = current - held
    usable = capacity if limit is None else min(capacity, max(limit, 0))
    pool = max(0, usable - external - reserve)
    if found and previous is not None:
        pool = min(pool, max(previous, 0))
    return PoolDecision(misc, pool, capacity, current, k8s_running, external, reserve, tuple(found), limit)


# -- which pods hold a key the kernel charges ------------------------------------------------------------------

TERMINAL_PHASES = ("Succeeded", "Failed")
SANDBOX_CONDITION = "PodReadyToStartContainers"
KUBEVIRT_LAUNCHER_LABEL = ("kubevirt.io", "virt-launcher")


def _quantity_positive(value: object) -> bool:
    """Whether an extended-resource quantity is at least 1 (extended resources are whole numbers)."""
    text = str(value).strip()
    try:
        return int(text) >= 1
    except ValueError:
        return bool(text) and text[0].isdigit() and text.strip("0") not in ("", ".")


def requests_pool(pod: dict, resource: str) -> bool:
    """Whether the scheduler counts ``resource`` for ``pod``: a container's (or init container's) request or
    limit (extended resources: the limit implies the request), or the RuntimeClass overhead admission added."""
    spec = pod.get("spec") or {}
    if _quantity_positive((spec.get("overhead") or {}).get(resource, 0)):
        return True
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            resources = (container or {}).get("resources") or {}
            for part in ("requests", "limits"):
                if _quantity_positive((resources.get(part) or {}).get(resource, 0)):
                    return True
    return False


def _condition(status: dict, kind: str) -> str | None:
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition.get("status")
    return None


def guest_charged(pod: dict) -> bool:
    """Whether the kernel already charges the pod's guest, as far as the pod object tells.

    A Kata pod's sandbox is its VM: ``PodReadyToStartContainers`` True (kubelet ``pkg/kubelet/status/generate.go``,
    Kubernetes 1.29+, KEP-3085) means the key is charged. A KubeVirt launcher pod's sandbox exists before
    libvirt starts the guest, so it counts only once the pod is also Ready. Counting a guest that is not charged
    would hide a key too few; not counting a charged one hides one too many, the safe way, so doubt says "no".
    """
    status = pod.get("status") or {}
    if status.get("phase") in TERMINAL_PHASES or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    sandbox = _condition(status, SANDBOX_CONDITION)
    ready = sandbox == "True" if sandbox is not None else status.get("phase") == "Running"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(KUBEVIRT_LAUNCHER_LABEL[0]) == KUBEVIRT_LAUNCHER_LABEL[1]:
        return ready and _condition(status, "Ready") == "True"
    return ready


def k8s_running(pods: list, node: str, resource: str) -> int:
    """Keys of ``resource`` that Kubernetes guests on ``node`` hold: one per charged pod requesting it."""
    count = 0
    for pod in pods:
        if not isinstance(pod, dict) or (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if requests_pool(pod, resource) and guest_charged(pod):
            count += 1
    return count
