"""What a strategy looks like from outside at one instant, per node and misc resource.

:class:`ResourceSnapshot` puts the kernel's numbers next to what the scheduler believes about the
resource VMIs request for their key (and, for the "any consumer" view, Kata's resource): the
metrics (:mod:`teesim.report.metrics`) and the timelines are computed from these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from teesim.cluster.nfd import NFD_RESOURCES
from teesim.cluster.node import SimNode
from teesim.cluster.pods import CONSUMER_VALUE, Consumer
from teesim.strategies.base import KUBEVIRT_KEYS, SEV_DEVICE, Strategy


@dataclass(slots=True)
class ResourceSnapshot:
    """One node's view of one misc resource at one instant (read-only by convention: the report builds
    one per changed node and resource, and a frozen dataclass costs twice as much to build)."""

    node: str
    resource: str
    capacity: int
    current: int
    vmi_resource: str
    advertised: int  # the kubelet's allocatable of the VMI resource (or the DRA slice's devices)
    published: int  # the same as the scheduler sees it (node status, synced periodically)
    requested: int  # what pods bound here count against the VMI resource (DRA: allocated devices)
    claims: int  # pods bound here whose guest is not charged yet
    nfd_advertised: int
    charged: Mapping[str, int]
    # Keys the scheduler would still give a new Kata pod here (None: Kata is not limited by keys).
    kata_schedulable: int | None = None
    # Keys the advertiser keeps out of the pool for VMs outside Kubernetes.
    reserve: int = 0

    @property
    def schedulable(self) -> int:
        """Keys the scheduler would still give a new VMI here."""
        return max(self.published - self.requested, 0)

    @property
    def truly_free(self) -> int:
        """Keys neither charged nor promised to a bound pod."""
        return max(self.capacity - self.current - self.claims, 0)

    @property
    def stranded(self) -> int:
        """Free in the kernel but not schedulable for a VMI."""
        return self.stranded_pair()[0]

    @property
    def stranded_for_all(self) -> int:
        """Free in the kernel but schedulable for no consumer (neither a VMI nor a Kata pod)."""
        return self.stranded_pair()[1]

    def stranded_pair(self) -> tuple[int, int]:
        """(:attr:`stranded`, :attr:`stranded_for_all`), the free and schedulable counts worked out once
        (the report asks for both after every change)."""
        free, schedulable = self.truly_free, self.schedulable
        kata = free if self.kata_schedulable is None else self.kata_schedulable
        return max(free - schedulable, 0), max(free - max(schedulable, kata), 0)


@dataclass(frozen=True)
class ResourcePlan:
    """What a snapshot of one misc resource needs from the strategy, worked out once per run: the
    resource a VMI requests for it, NFD's and Kata's names for it, the keys kept for VMs outside."""

    misc_resource: str
    vmi_resource: str
    nfd_name: str | None
    kata_name: str | None
    reserve: int

    @classmethod
    def of(cls, strategy: Strategy, misc_resource: str, reserve: int = 0) -> ResourcePlan:
        kata_name = strategy.kata_key_name(misc_resource) if misc_resource in NFD_RESOURCES else None
        return cls(
            misc_resource, vmi_resource(strategy, misc_resource), NFD_RESOURCES.get(misc_resource), kata_name, reserve
        )


def vmi_resource(strategy: Strategy, misc_resource: str) -> str:
    """The resource a VMI charging ``misc_resource`` requests for its key (plain SEV: /dev/sev slots)."""
    return strategy.vmi_key_name(misc_resource) if misc_resource in KUBEVIRT_KEYS else SEV_DEVICE


# (member, value) of each consumer, in Consumer's order (the values from the pods' table, not Enum.value).
_CONSUMERS: tuple[tuple[Consumer, str], ...] = tuple(CONSUMER_VALUE.items())


def _pool_numbers(
    node: SimNode, name: str, now: float, status: Mapping[str, int], requested: Mapping[str, int]
) -> tuple[int, int, int]:
    """(advertised, published, requested) of an extended resource on a node."""
    pool = node.dra.get(name)
    if pool is not None:
        return len(pool.devices), len(pool.devices), len(pool.allocated)
    advertised = node.allocatable(now).get(name, 0)
    return advertised, status.get(name, 0), requested.get(name, 0)


def _kata_schedulable(
    strategy: Strategy, node: SimNode, name: str | None, status: Mapping[str, int], requested: Mapping[str, int]
) -> int | None:
    if name is None:
        return None
    pool = node.dra.get(name)
    if pool is not None:
        return pool.free() if strategy.dra_overhead_served else 0
    return max(status.get(name, 0) - requested.get(name, 0), 0)


def snapshot(strategy: Strategy, node: SimNode, misc_resource: str, now: float, reserve: int = 0) -> ResourceSnapshot:
    return planned_snapshot(strategy, node, ResourcePlan.of(strategy, misc_resource, reserve), now)


def planned_snapshot(strategy: Strategy, node: SimNode, plan: ResourcePlan, now: float) -> ResourceSnapshot:
    """:func:`snapshot` with the strategy's answers for the resource worked out beforehand."""
    misc_resource = plan.misc_resource
    # The node status and the bound pods' requests are computed once, for both pools.
    status, requested_by_pods = node.status_allocatable(), node.requested()
    advertised, published, requested = _pool_numbers(node, plan.vmi_resource, now, status, requested_by_pods)
    charged = node.charged
    # The misc controller asked directly (what node.capacity and node.usage answer, one call less each).
    misc = node.kernel.misc
    capacity, current = (misc.capacity(misc_resource), misc.usage(misc_resource)) if misc is not None else (0, 0)
    return ResourceSnapshot(
        node.name,
        misc_resource,
        capacity,
        current,
        plan.vmi_resource,
        advertised,
        published,
        requested,
        node.claims.get(misc_resource, 0),
        node.nfd.get(plan.nfd_name, 0) if plan.nfd_name else 0,
        # .get, not [], on the Counter: a consumer with no key yet would go through __missing__.
        {value: charged.get((c, misc_resource), 0) for c, value in _CONSUMERS},
        _kata_schedulable(strategy, node, plan.kata_name, status, requested_by_pods),
        plan.reserve,
    )
