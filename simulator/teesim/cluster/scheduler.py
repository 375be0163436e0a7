"""The scheduler's resource fit for extended resources (``NodeResourcesFit``) and its node choice.

Models: a pod fits a node when, for every resource it needs (container requests plus
``spec.overhead``), ``allocatable - sum(needs of pods bound there) >= need``; an unknown resource has
allocatable 0. Among fitting nodes the least allocated wins (``LeastAllocated`` on the TEE resources),
ties broken by name. Pods are tried in creation order, every scheduling pass.
Simplifications: no CPU/memory, no affinity, no preemption, no backoff between attempts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeView:
    """What the scheduler knows about a node: node status allocatable and what bound pods requested."""

    name: str
    allocatable: Mapping[str, int]
    requested: Mapping[str, int]
    schedulable: bool = True

    def free(self, resource: str) -> int:
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
    ordered = sorted(nodes, key=_name)
    if len(need) == 1:
        # The common case (one TEE resource) on a fleet: the same fit and score inlined, one pass.
        ((resource, amount),) = need.items()
        return _choose_single(resource, amount, ordered)
    best: tuple[float, str] | None = None
    for node in ordered:
        if not fits(node, need):
            continue
        candidate = (-score(node, need), node.name)
        if best is None or candidate < best:
            best = candidate
    return None if best is None else best[1]


def _name(node: NodeView) -> str:
    return node.name


def _choose_single(resource: str, amount: int, ordered: Sequence[NodeView]) -> str | None:
    """:func:`choose_node` for a need of one resource: exactly :func:`fits` and :func:`score`."""
    best_name: str | None = None
    best_score = 0.0
    for node in ordered:
        if not node.schedulable:
            continue
        total = node.allocatable.get(resource, 0)
        free = total - node.requested.get(resource, 0)
        if amount > 0 and free < amount:
            continue
        value = (free - amount) / total if total > 0 else 0.0
        # Nodes come in name order, so the first of equal scores wins, as the name tie-break says.
        if best_name is None or value > best_score:
            best_name, best_score = node.name, value
    return best_name


def sum_needs(needs: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for need in needs:
        for resource, amount in need.items():
            total[resource] = total.get(resource, 0) + amount
    return total
