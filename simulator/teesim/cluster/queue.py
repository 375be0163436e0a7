"""The scheduler's pending queue: which pods are still waiting, and a pass that tries to bind them.

A pass tries every pending pod in creation order against the nodes' views (node status allocatable,
what bound pods requested, free DRA devices) with :func:`teesim.cluster.scheduler.choose_node`, for
what the scheduler counts for it (``need_of(pod)``); a pod that fits is handed to ``bind`` and its
node's view is refreshed before the next pod is tried. That is what the simulation runs after every
event.

Doing it naively costs a view of every node per event and a scan of every node per pending pod,
which on a fleet of 1,000 nodes is almost all of the run. The queue gets the same bindings cheaply
from these facts:

* a view only changes when its node changes, and :class:`~teesim.cluster.node.SimNode` says when
  (:meth:`SchedulingQueue.node_changed`); views are cached and refreshed only then;
* a pod left pending by a pass fitted no node at the end of it (a bind only lowers a node's free
  count), so at the next pass it can only fit a node whose view has changed since (most changes of a
  node, a key charged or a device list sent, leave its view as it was): it is tried against those
  nodes alone, and not at all when none has. Only pods new since the last pass are tried against
  every node;
* pods with the same need get the same answer until the next binding, so pending pods are kept in
  groups by need and a pass asks each group once (for its first old and first new pod) rather than
  each pod: a pass that binds nothing costs the number of distinct needs, not the queue's length;
* "every node" is a lookup: a heap per distinct need holds the nodes that fit it, ordered as
  ``choose_node`` orders them (its score, then fewest pods, then name), and a node whose view
  changed gets a fresh entry (old ones are skipped when they surface). For a pod left pending by
  the last pass the answer is the same as among the changed nodes alone: the others still do not fit.

``incremental=False`` keeps the naive pass (fresh views of every node, every pod against every
node): the reference the tests and the benchmark compare the incremental pass with.

A ``placer`` hands each decision to a scheduler outside the model (``teesim.sim.kube_scheduler``: the real
kube-scheduler binding the pod on an API server). The pass is then the naive one in creation order, asking
the placer for each pod that is new or that a changed node might take now (a pod left pending stays
pending while no view changed, as above); the placer answers the node its scheduler bound the pod to, or
``None``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from heapq import heapify, heappop, heappush

from teesim.cluster.node import SimNode
from teesim.cluster.pods import Pod
from teesim.cluster.scheduler import NodeView, choose_node, fits, score

Bind = Callable[[SimNode, Pod, dict[str, int]], None]
NeedOf = Callable[[Pod], dict[str, int]]
# (pod, what the model counts for it, the nodes' views in name order) -> the node it was bound to, or None.
Placer = Callable[[Pod, dict[str, int], list[NodeView]], str | None]


class LeastAllocatedIndex:
    """The node :func:`choose_node` picks for ``need``: the first of the nodes that fit, ordered by
    ``(-score, bound pods, name)``, kept in a heap. Entries carry the node's view version; an entry
    whose node has a newer view is dropped when it surfaces."""

    def __init__(self, need: Mapping[str, int], views: Iterable[NodeView], versions: Mapping[str, int]):
        self.need = need
        self.versions = versions
        self._heap = [entry for view in views if (entry := self._entry(view)) is not None]
        heapify(self._heap)
        self._size = max(len(self._heap), 1)

    def _entry(self, view: NodeView) -> tuple[int, int, str, int] | None:
        if not fits(view, self.need):
            return None
        return (-score(view, self.need), view.pods, view.name, self.versions[view.name])

    def update(self, view: NodeView) -> None:
        """``view`` replaces its node's earlier view (the caller bumped the node's version)."""
        entry = self._entry(view)
        if entry is not None:
            heappush(self._heap, entry)
        if len(self._heap) > 4 * self._size + 64:
            # Mostly superseded entries: drop them rather than let the heap grow with every change.
            self._heap = [e for e in self._heap if e[3] == self.versions[e[2]]]
            heapify(self._heap)
            self._size = max(len(self._heap), 1)

    def best(self) -> str | None:
        heap, versions = self._heap, self.versions
        while heap:
            _, _, name, version = heap[0]
            if version == versions[name]:
                return name
            heappop(heap)
        return None


class _NeedGroup:
    """The pending pods that need the same thing, in creation order (``seqs``: their places in the
    queue). The first ``old`` of them were left pending by the last pass."""

    __slots__ = ("need", "old", "pods", "seqs")

    def __init__(self, need: dict[str, int]):
        self.need = need
        self.pods: list[Pod] = []
        self.seqs: list[int] = []
        self.old = 0


class SchedulingQueue:
    """Pending pods of one cluster. New pods enter at the end of :attr:`pending`."""

    def __init__(
        self, nodes: Mapping[str, SimNode], need_of: NeedOf, incremental: bool = True, placer: Placer | None = None
    ):
        self.nodes = nodes
        self.need_of = need_of
        self.incremental = incremental
        self.placer = placer
        self.pending: list[Pod] = []
        # Views in node-name order, refreshed for the nodes in _stale before a pass uses them.
        self._views: dict[str, NodeView] = {name: nodes[name].view() for name in sorted(nodes)}
        self._stale: set[str] = set(nodes)
        self._versions: dict[str, int] = dict.fromkeys(nodes, 0)
        # Each node's view_revision when its cached view was built.
        self._built_at: dict[str, int] = {name: node.view_revision for name, node in nodes.items()}
        self._indexes: dict[tuple[tuple[str, int], ...], LeastAllocatedIndex] = {}
        # The pending pods grouped by what the scheduler counts for them (a sorted tuple of the need):
        # a pass asks once per group, not once per pod. _added: pods added since the last pass.
        self._groups: dict[tuple[tuple[str, int], ...], _NeedGroup] = {}
        self._seq = 0
        self._added = 0
        self.passes = 0

    def add(self, pod: Pod) -> None:
        self.pending.append(pod)
        if self.placer is not None:
            self._added += 1
            return
        if not self.incremental:
            return
        need = self.need_of(pod)
        signature = tuple(sorted(need.items()))
        group = self._groups.get(signature)
        if group is None:
            group = self._groups[signature] = _NeedGroup(need)
        self._seq += 1
        group.pods.append(pod)
        group.seqs.append(self._seq)
        self._added += 1

    def node_changed(self, node: SimNode) -> None:
        """``node``'s view may have changed (its allocatable, status or bound pods)."""
        self._stale.add(node.name)

    def run_pass(self, bind: Bind) -> None:
        """Try every pending pod once, in creation order; ``bind(node, pod, need)`` those that fit.

        Between two bindings the views stay as they are, so every pod of a group gets the same
        answer (its old pods only on the changed nodes): the pass asks each group for its first old
        and first new pod after the last binding, and binds the earliest pod whose answer is a node.
        """
        pending = self.pending
        if not pending:
            return
        if self.placer is not None:
            self._placed_pass(bind, self.placer)
            return
        if not self.incremental:
            self._full_pass(bind)
            return
        if not self._stale and not self._added:
            return  # most events: no node said it changed and no pod came (a poll, a failed launch)
        changed = self._refresh_stale()
        if not changed and not self._added:
            return  # nothing new, no view changed: the last pass's answer stands
        views, nodes = self._views, self.nodes
        candidates = [views[name] for name in changed]
        position, bound = 0, set()
        while (found := self._first_fit(position, candidates)) is not None:
            group, at, choice = found
            pod, position = group.pods.pop(at), group.seqs.pop(at)
            if at < group.old:
                group.old -= 1
            bound.add(id(pod))
            node = nodes[choice]
            bind(node, pod, group.need)
            self._built_at[choice] = node.view_revision
            self._set_view(node.view())
            candidates = [views[name] for name in changed]
        self._finish(bound)

    def _first_fit(self, position: int, candidates: list[NodeView]) -> tuple[_NeedGroup, int, str] | None:
        """The first pod after ``position`` (in creation order) that some node takes: its group, its
        index there and the node. Within a group old pods come first, so offers are in that order."""
        offers = []
        for group in self._groups.values():
            at = bisect_right(group.seqs, position)
            if at < group.old:
                offers.append((group.seqs[at], True, group, at))
            at = max(at, group.old)
            if at < len(group.seqs):
                offers.append((group.seqs[at], False, group, at))
        offers.sort(key=_first)
        for _, old, group, at in offers:
            if old and not candidates:
                continue  # left pending last time, and no node changed since
            # The index answers for every node; for an old pod the nodes whose view did not change
            # cannot fit, so its answer is the one among the changed nodes too.
            choice = self._choose_anywhere(group.need)
            if choice is not None:
                return group, at, choice
        return None

    def _refresh_stale(self) -> list[str]:
        """Refresh the views of the nodes that said they changed; the names of those whose view did."""
        if not self._stale:
            return []
        changed = []
        views, nodes, built_at = self._views, self.nodes, self._built_at
        for name in sorted(self._stale):
            node = nodes[name]
            if node.view_revision == built_at[name]:
                continue  # touched by something the scheduler does not see (a kernel charge)
            built_at[name] = node.view_revision
            view = node.view()
            if view != views[name]:
                self._set_view(view)
                changed.append(name)
        self._stale.clear()
        return changed

    def _set_view(self, view: NodeView) -> None:
        self._views[view.name] = view
        self._versions[view.name] += 1
        for index in self._indexes.values():
            index.update(view)

    def _choose_anywhere(self, need: Mapping[str, int]) -> str | None:
        signature = tuple(sorted(need.items()))
        index = self._indexes.get(signature)
        if index is None:
            index = LeastAllocatedIndex(need, self._views.values(), self._versions)
            self._indexes[signature] = index
        return index.best()

    def _full_pass(self, bind: Bind) -> None:
        views = {name: node.view() for name, node in self.nodes.items()}
        still: list[Pod] = []
        for pod in self.pending:
            need = self.need_of(pod)
            choice = choose_node(need, list(views.values()))
            if choice is None:
                still.append(pod)
                continue
            node = self.nodes[choice]
            bind(node, pod, need)
            views[choice] = node.view()
        self.passes += 1
        # The list object stays the same so that callers holding it see the new contents.
        self.pending[:] = still

    def _placed_pass(self, bind: Bind, place: Placer) -> None:
        """Every pending pod in creation order, each new one and, when a node's view changed, each old one
        asked of ``place``; the view of the node it was bound to is refreshed before the next pod."""
        changed = bool(self._refresh_stale())
        if not changed and not self._added:
            return
        first_new = len(self.pending) - self._added
        still: list[Pod] = []
        for at, pod in enumerate(self.pending):
            if at < first_new and not changed:
                still.append(pod)
                continue
            need = self.need_of(pod)
            choice = place(pod, need, list(self._views.values()))
            if choice is None:
                still.append(pod)
                continue
            node = self.nodes[choice]
            bind(node, pod, need)
            self._built_at[choice] = node.view_revision
            self._set_view(node.view())
        self.passes += 1
        self._added = 0
        self.pending[:] = still

    def _finish(self, bound: set[int]) -> None:
        self.passes += 1
        self._added = 0
        for signature, group in list(self._groups.items()):
            group.old = len(group.pods)
            if not group.pods:
                del self._groups[signature]
        if bound:
            # The list object stays the same so that callers holding it see the new contents.
            self.pending[:] = [pod for pod in self.pending if id(pod) not in bound]


def _first(offer: tuple) -> int:
    return offer[0]
