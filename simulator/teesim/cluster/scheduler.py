"""The scheduler's ``NodeResourcesFit``: filter by every requested resource, score by CPU and memory.

Checked against kubernetes/kubernetes v1.34 ``pkg/scheduler/framework/plugins/noderesources``:

* **Filter** (``fit.go``, ``fitsRequest``): a pod fits a node when, for every resource it needs
  (container requests plus ``spec.overhead``, ``computePodResourceRequest``),
  ``allocatable - sum(needs of pods bound there) >= need``; an extended resource the node does not
  list has allocatable 0. A name the node does not list in ``allocatable`` but offers through DRA
  (``dynamic``: free devices of the ResourceSlices a DeviceClass maps to that name, KEP-5004) fits
  when enough devices are free.
* **Score**: the default profile's ``NodeResourcesFitArgs`` (``apis/config/v1/default_plugins.go``,
  ``defaults.go``: ``ScoringStrategy{Type: LeastAllocated, Resources: cpu weight 1, memory weight 1}``);
  ``least_allocated.go``, ``leastRequestedScore``: per resource
  ``(allocatable - requested) * 100 / allocatable`` in integer arithmetic (0 when over), where
  ``requested`` includes the pod being placed; ``resource_allocation.go`` takes the weighted mean,
  again an integer. TEE keys are *not* scored: the default scheduler does not know they are scarce.
* The node with the highest score wins. Upstream picks at random among equal scores
  (``schedule_one.go``, ``selectHost``); here ties go to the node with the fewest bound pods, then by
  name, so that a run is reproducible.

Pods are tried in creation order, every scheduling pass.
Simplifications: no ``NodeResourcesBalancedAllocation`` (also weight 1 in the default profile), no
other scoring plugin, affinity, preemption or backoff between attempts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeView:
    """What the scheduler knows about a node: node status allocatable and what bound pods requested."""

    name: str
    allocatable: Mapping[str, int]
    requested: Mapping[str, int]
    schedulable: bool = True
    dynamic: Mapping[str, int] = field(default_factory=dict)
    pods: int = 0  # pods bound there

    def free(self, resource: str) -> int:
        if resource not in self.allocatable and resource in self.dynamic:
            return self.dynamic[resource]
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)


def fits(node: NodeView, need: Mapping[str, int]) -> bool:
    return node.schedulable and all(node.free(r) >= n for r, n in need.items() if n > 0)


# NodeResourcesFit's default scoring resources and weights, and framework.MaxNodeScore.
SCORED_RESOURCES: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
MAX_NODE_SCORE = 100


def score(node: NodeView, need: Mapping[str, int]) -> int:
    """``LeastAllocated`` on CPU and memory after placing the pod (0 to 100, higher is better)."""
    total = weights = 0
    for resource, weight in SCORED_RESOURCES:
        capacity = node.allocatable.get(resource, 0)
        if capacity <= 0:
            continue  # resource_allocation.go skips a resource the node has none of
        requested = node.requested.get(resource, 0) + need.get(resource, 0)
        total += (0 if requested > capacity else (capacity - requested) * MAX_NODE_SCORE // capacity) * weight
        weights += weight
    return total // weights if weights else 0


def choose_node(need: Mapping[str, int], nodes: Sequence[NodeView]) -> str | None:
    """The node a pod with ``need`` is bound to, or ``None`` when it stays Pending."""
    best: tuple[float, int, str] | None = None
    for node in sorted(nodes, key=lambda n: n.name):
        if not fits(node, need):
            continue
        candidate = (-score(node, need), node.pods, node.name)
        if best is None or candidate < best:
            best = candidate
    return None if best is None else best[2]


def sum_needs(needs: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for need in needs:
        for resource, amount in need.items():
            total[resource] = total.get(resource, 0) + amount
    return total
