"""The scheduler's pending queue: which pods are still waiting, and a pass that tries to bind them.

A pass tries every pending pod in creation order against the nodes' views (node status allocatable
and what bound pods requested) with :func:`teesim.cluster.scheduler.choose_node`; a pod that fits is
handed to ``bind`` and its node's view is refreshed before the next pod is tried. That is what the
simulation runs after every event.

Doing it naively costs a view of every node per event and a scan of every node per pending pod,
which on a fleet of 1,000 nodes is almost all of the run. The queue gets the same bindings cheaply
from two facts:

* a view only changes when its node changes, and :class:`~teesim.cluster.node.SimNode` says when
  (:meth:`SchedulingQueue.node_changed`); views are cached and refreshed only then;
* a pod left pending by a pass fitted no node at the end of it (a bind only lowers a node's free
  count), so at the next pass it can only fit a node whose view has changed since: it is tried
  against those nodes alone, and not at all when none has. Only pods new since the last pass are
  tried against every node;
* for a new pod needing one resource (every pod here: one key), "every node" is a lookup: a heap per
  (resource, amount) orders the nodes by the score ``choose_node`` maximises (the same float), ties by
  name, and a node whose view changed gets a fresh entry (old ones are skipped when they surface).

``incremental=False`` keeps the naive pass (fresh views of every node, every pod against every
node): the reference the tests and the benchmark compare the incremental pass with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from heapq import heapify, heappop, heappush

from teesim.cluster.node import SimNode
from teesim.cluster.pods import Pod
from teesim.cluster.scheduler import NodeView, choose_node

Bind = Callable[[Pod, SimNode], None]


class LeastAllocatedIndex:
    """The node :func:`choose_node` picks for a need of ``amount`` (> 0) of one ``resource``.

    A node fits when ``free >= amount`` and scores ``(free - amount) / allocatable``; among those
    that fit the highest score wins, ties by name. A node with no allocatable never fits, and one
    with allocatable fits exactly when its score is >= 0, so the answer is the top of a heap of
    ``(-score, name)`` if that score is >= 0, and no node otherwise.
    """

    def __init__(self, resource: str, amount: int, views: Iterable[NodeView], versions: Mapping[str, int]):
        self.resource = resource
        self.amount = amount
        self.versions = versions
        self._heap = [entry for view in views if (entry := self._entry(view)) is not None]
        heapify(self._heap)
        self._size = max(len(self._heap), 1)

    def _entry(self, view: NodeView) -> tuple[float, str, int] | None:
        total = view.allocatable.get(self.resource, 0)
        if not view.schedulable or total <= 0:
            return None
        free = total - view.requested.get(self.resource, 0)
        return (-((free - self.amount) / total), view.name, self.versions[view.name])

    def update(self, view: NodeView) -> None:
        """``view`` replaces its node's earlier view (the caller bumped the node's version)."""
        entry = self._entry(view)
        if entry is not None:
            heappush(self._heap, entry)
        if len(self._heap) > 4 * self._size + 64:
            # Mostly superseded entries: drop them rather than let the heap grow with every change.
            self._heap = [e for e in self._heap if e[2] == self.versions[e[1]]]
            heapify(self._heap)
            self._size = max(len(self._heap), 1)

    def best(self) -> str | None:
        heap, versions = self._heap, self.versions
        while heap:
            negative_score, name, version = heap[0]
            if version != versions[name]:
                heappop(heap)
                continue
            return name if negative_score <= 0 else None
        return None


class SchedulingQueue:
    """Pending pods of one cluster. New pods enter at the end of :attr:`pending`."""

    def __init__(self, nodes: Mapping[str, SimNode], incremental: bool = True):
        self.nodes = nodes
        self.incremental = incremental
        self.pending: list[Pod] = []
        # Views in node-name order, refreshed for the nodes in _stale before a pass uses them.
        self._views: dict[str, NodeView] = {name: nodes[name].view() for name in sorted(nodes)}
        self._stale: set[str] = set(nodes)
        self._versions: dict[str, int] = dict.fromkeys(nodes, 0)
        self._indexes: dict[tuple[str, int], LeastAllocatedIndex] = {}
        # Pods the last pass left pending (by identity): they fit no node whose view is unchanged.
        self._unfit: set[int] = set()
        self.passes = 0

    def add(self, pod: Pod) -> None:
        self.pending.append(pod)

    def node_changed(self, node: SimNode) -> None:
        """``node``'s view may have changed (its allocatable, status or bound pods)."""
        self._stale.add(node.name)

    def run_pass(self, bind: Bind) -> None:
        """Try every pending pod once, in creation order; ``bind(pod, node)`` those that fit."""
        pending = self.pending
        if not pending:
            return
        if not self.incremental:
            self._full_pass(bind)
            return
        stale = self._stale
        if not stale and id(pending[-1]) in self._unfit:
            return  # nothing new, no node changed: the last pass's answer stands
        views = self._views
        nodes = self.nodes
        changed = sorted(stale)
        for name in changed:
            self._set_view(nodes[name].view())
        stale.clear()
        unfit = self._unfit
        still: list[Pod] = []
        for pod in pending:
            need = pod.need()
            if id(pod) in unfit:
                choice = choose_node(need, [views[name] for name in changed]) if changed else None
            else:
                choice = self._choose_anywhere(need)
            if choice is None:
                still.append(pod)
                continue
            node = nodes[choice]
            bind(pod, node)
            self._set_view(node.view())
        self._finish(still)

    def _set_view(self, view: NodeView) -> None:
        self._views[view.name] = view
        self._versions[view.name] += 1
        for index in self._indexes.values():
            index.update(view)

    def _choose_anywhere(self, need: Mapping[str, int]) -> str | None:
        if len(need) != 1:
            return choose_node(need, list(self._views.values()))
        ((resource, amount),) = need.items()
        if amount <= 0:
            return choose_node(need, list(self._views.values()))
        index = self._indexes.get((resource, amount))
        if index is None:
            index = LeastAllocatedIndex(resource, amount, self._views.values(), self._versions)
            self._indexes[(resource, amount)] = index
        return index.best()

    def _full_pass(self, bind: Bind) -> None:
        views = {name: node.view() for name, node in self.nodes.items()}
        still: list[Pod] = []
        for pod in self.pending:
            choice = choose_node(pod.need(), list(views.values()))
            if choice is None:
                still.append(pod)
                continue
            node = self.nodes[choice]
            bind(pod, node)
            views[choice] = node.view()
        self._finish(still)

    def _finish(self, still: list[Pod]) -> None:
        self.passes += 1
        # The list object stays the same so that callers holding it see the new contents.
        self.pending[:] = still
        self._unfit = {id(pod) for pod in still}
