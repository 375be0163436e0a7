"""The scheduler's resource fit for extended resources (``NodeResourcesFit``) and its node choice.

Models: a pod fits a node when, for every resource it needs (container requests plus
``spec.overhead``), ``allocatable - sum(needs of pods bound there) >= need``; an unknown resource has
allocatable 0. A name the node does not list in ``allocatable`` but offers through DRA
(``dynamic``: free devices of the ResourceSlices a DeviceClass maps to that name, KEP-5004) fits when
enough devices are free. Among fitting nodes the least allocated wins (``LeastAllocated`` on the TEE
resources); ties go to the node with the fewest bound pods (standing in for ``LeastAllocated`` on CPU
and memory, which spreads pods that need no TEE resource at all), then by name. Pods are tried in
creation order, every scheduling pass.
Simplifications: no CPU/memory, no affinity, no preemption, no backoff between attempts.
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


def score(node: NodeView, need: Mapping[str, int]) -> float:
    """Fraction of the needed resources still free after placing the pod (higher is better)."""
    fractions = []
    for resource, amount in need.items():
        total = node.allocatable.get(resource, 0)
        if total > 0:
            fractions.append((node.free(resource) - amount) / total)
    return sum(fractions) / len(fractions) if fractions else 0.0


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
