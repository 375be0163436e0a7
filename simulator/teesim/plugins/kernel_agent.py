"""The node agent of ``tee_key_pool_mode: kernel`` in process: the shipped agent's decision, on a simulated node.

Every ``poll_interval`` the model reads ``misc.capacity`` and ``misc.current`` through the collection's parser (as
the agent does), counts the keys Kubernetes guests hold as an informer shows them (pods bound here that request the
pool resource, by RuntimeClass overhead or container request, whose start reached the API server: the agent's pod
list), and calls :func:`decision.decide` of ``plugins/module_utils/agent/decision.py``, the very function
``tee-key-agent`` runs. The value is patched into the node status (``SimNode.agent_pool``) and reaches the
scheduler ``publish_latency`` later (the API server's watch; teesim's ``api_latency``).

A crashed agent leaves its last value on the Node, as a killed process leaves its last PATCH.
"""

from __future__ import annotations

from functools import partial

from teesim._collection import collection_module
from teesim.cluster.node import SimNode
from teesim.engine.clock import VirtualClock
from teesim.plugins.models import CurrentReader, read_capacity

decision = collection_module("plugins.module_utils.agent.decision")
sev_asids = collection_module("plugins.module_utils.host.sev_asids")


class KernelPoolAgent:
    """One node's agent for one misc resource's pool (Kata's resource name, which VMIs request too)."""

    def __init__(
        self,
        node: SimNode,
        clock: VirtualClock,
        resource_name: str,
        misc_resource: str,
        reserve: int = 0,
        publish_latency: float = 0.0,
    ):
        self.node, self.clock = node, clock
        self.resource_name, self.misc_resource = resource_name, misc_resource
        self.reserve, self.publish_latency = reserve, publish_latency
        self.running = False
        self.polls = 0
        self.registrations = 0
        self.skip_unchanged = True
        self.published: int | None = None  # what this agent last wrote (the Node keeps it)
        self.last = None  # the last PoolDecision, for tests and the report
        self._read_current = CurrentReader(node, misc_resource)
        self._counted: tuple[tuple[int, int], int] | None = None
        self._decided_on: tuple | None = None

    def start(self) -> None:
        self.running = True
        self.registrations += 1
        on_node = self.node.agent_pool.get(self.resource_name)
        self.published = on_node  # a restarted agent continues from what the Node holds
        self.poll()

    def k8s_running(self) -> int:
        """Keys Kubernetes guests hold here, as the agent's pod list shows: bound pods requesting the pool whose
        start an informer has seen (``PodReadyToStartContainers``; a launcher pod Ready)."""
        bound = self.node.bound
        key = (bound.generation, bound.seen_revision)
        if self._counted is not None and self._counted[0] == key:
            return self._counted[1]
        seen = bound.seen_started_uids()
        name = self.resource_name
        count = sum(
            1 for pod in bound.pods() if pod.uid in seen and (pod.overhead.get(name, 0) or pod.requests.get(name, 0))
        )
        self._counted = (key, count)
        return count

    def snp_range(self) -> tuple[int | None, tuple]:
        """AMD ciphertext hiding's SNP ASID count, read and parsed as the agent does (``None``: no split)."""
        if self.misc_resource != "sev_es":
            return None, ()
        try:
            text = self.node.read(sev_asids.CIPHERTEXT_HIDING_PARAM)
        except FileNotFoundError:
            return None, ()
        except OSError as exc:
            return 0, (decision.Doubt(decision.REASON_SNP_RANGE_UNKNOWN, str(exc)),)
        asids, problem = sev_asids.parse_ciphertext_hiding(text)
        if problem:
            return 0, (decision.Doubt(decision.REASON_SNP_RANGE_UNKNOWN, problem),)
        return asids or None, ()

    def poll(self) -> None:
        if not self.running:
            return
        self.polls += 1
        current = self._read_current(self.skip_unchanged)
        bound = self.node.bound
        inputs = (self.node.files_revision(), bound.generation, bound.seen_revision, self.published)
        if self.skip_unchanged and inputs == self._decided_on:
            if current is not None:
                self.node.usage_published_at[self.misc_resource] = self.clock.now
            return
        capacity = read_capacity(self.node, self.misc_resource)
        limit, doubts = self.snp_range()
        found = decision.decide(
            self.misc_resource,
            capacity,
            current,
            self.k8s_running(),
            reserve=self.reserve,
            previous=self.published,
            doubts=doubts,
            limit=limit,
        )
        self.last = found
        if found.pool != self.published:
            self.published = found.pool
            values = dict(self.node.agent_pool, **{self.resource_name: found.pool})
            if self.publish_latency > 0:
                self.clock.after(self.publish_latency, partial(self._patch, values))
            else:
                self._patch(values)
        self._decided_on = (self.node.files_revision(), bound.generation, bound.seen_revision, self.published)
        if current is not None:
            self.node.usage_published_at[self.misc_resource] = self.clock.now

    def _patch(self, values: dict[str, int]) -> None:
        # Merge with what other agents (the node's other misc resource) wrote meanwhile: one PATCH per resource.
        merged = dict(self.node.agent_pool)
        merged[self.resource_name] = values[self.resource_name]
        self.node.agent_pool = merged

    def allocate(self, ids: list[str]) -> None:
        """Not a device plugin: the kubelet never allocates from the pool (the scheduler counts it)."""

    def crash(self) -> None:
        self.running = False

    def kubelet_restarted(self) -> None:
        """The value lives in the Node object: a kubelet restart does not touch it."""

    def register(self) -> None:
        """Nothing registers with the kubelet."""
