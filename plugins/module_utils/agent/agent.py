# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The node agent's loop: read the kernel and the node's pods, decide (:mod:`.decision`), patch the Node on change.

Every ``interval`` seconds it reads ``misc.capacity`` / ``misc.current`` through the collection's one parser
(:func:`host.misc_cgroup.read_misc_state`, re-opened each time: the kernel never notifies on ``misc.current``, and a
fresh open also follows a remounted cgroup), lists the pods bound to the node, decides the pool of every TEE key
resource, and PATCHes ``status.capacity``/``status.allocatable`` and the ``ConfidentialTeeKeyPool`` condition only
when a value or the condition changes. A real kubelet copies an extended resource's capacity into allocatable on
its next status update (``pkg/kubelet/nodestatus/setters.go``, ``MachineInfo``); the agent writes both so the
scheduler sees the value at once. It re-reads the Node every ``resync`` seconds and writes again when the Node
differs (a kubelet that reset extended resources when it re-registered, a second agent, an operator).

Killed mid-update: the PATCH is one request, applied whole or not at all; at start the agent reads the Node and
continues from what it holds. Two agents on one node compute the same value from the same kernel (the decision is
deterministic); a write from a reading one interval older is corrected by the next change or resync.
"""

from __future__ import annotations

import logging
import time

from ansible_collections.confidential.tee.plugins.module_utils.agent import decision
from ansible_collections.confidential.tee.plugins.module_utils.agent.kube import KubeClient, KubeError
from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.host import misc_cgroup, sev_asids

LOG = logging.getLogger("tee-key-agent")
DEFAULT_RESYNC = 10.0
# A state that repeats every pass (the API server down, say) is logged when it starts or changes, then again at most
# once per this many seconds: at --interval 0.5 an outage would otherwise write about 500,000 lines a day.
REPEAT_EVERY = 300.0
REASON_LOWER_BOUND = "UsageLowerBound"
REASON_API = "ApiUnavailable"


class Round:
    """What one pass decided: the pool per resource, the condition, and whether it was written."""

    def __init__(self, decisions: list, condition: dict, note: str | None = None) -> None:
        self.decisions, self.condition, self.note = decisions, condition, note
        self.written = False
        self.error: str | None = None

    def values(self) -> dict:
        return {d.resource: d.pool for d in self.decisions}

    def as_dict(self) -> dict:
        return {
            "pools": [d.as_dict() for d in self.decisions],
            "condition": self.condition,
            "note": self.note,
            "written": self.written,
            "error": self.error,
        }


def snp_range(host: HostReader) -> tuple[int | None, tuple]:
    """The SNP ASID count under AMD ciphertext hiding (``None``: no split), and a doubt when it cannot be read."""
    found = sev_asids.read_ciphertext_hiding(host.fresh(), True)
    if found["problem"]:
        return 0, (decision.Doubt(decision.REASON_SNP_RANGE_UNKNOWN, f"{found['path']}: {found['problem']}"),)
    return (found["asids"] or None), ()


def _kernel_doubts(state: misc_cgroup.MiscState) -> tuple:
    if state.usage_source == misc_cgroup.SOURCE_CHILDREN_SUM:
        return (
            decision.Doubt(
                REASON_LOWER_BOUND,
                "this kernel has no root misc.current: usage is the children's sum, a lower bound",
            ),
        )
    return ()


class Agent:
    """One node's agent on ``host`` (its CLI's, read afresh each pass: the problem list never grows with the passes).

    ``client`` is ``None`` for ``--once``/``--dry-run`` without an API server.
    """

    def __init__(
        self,
        node: str,
        host: HostReader,
        client: KubeClient | None = None,
        reserve: dict | None = None,
        dry_run: bool = False,
        resync: float = DEFAULT_RESYNC,
        clock=time.monotonic,
    ) -> None:
        self.node, self.host, self.client, self.dry_run = node, host, client, dry_run
        self.reserve = {misc_cgroup.canonical_resource(k): v for k, v in (reserve or {}).items()}
        self.resync, self.clock = resync, clock
        self.on_node: dict | None = None  # the pool values the Node holds, as last seen
        self.node_uid: str | None = None
        self.condition: dict | None = None  # the condition as last written
        self.seen_at = float("-inf")
        self.last_doubts: tuple = ()
        self._said: dict = {}  # channel -> (message, when it was last logged)

    # -- reading ---------------------------------------------------------------------------------------------

    def read_pods(self) -> tuple[list | None, decision.Doubt | None]:
        if self.client is None:
            return None, decision.Doubt(decision.REASON_PODS_UNKNOWN, "no API server: pods unknown")
        try:
            return self.client.pods_on(self.node), None
        except KubeError as exc:
            return None, decision.Doubt(decision.REASON_PODS_UNKNOWN, f"listing this node's pods failed: {exc}")

    def refresh_node(self, force: bool = False) -> None:
        """The pool values the Node holds (every ``resync`` seconds, or when ``force``)."""
        if self.client is None or (not force and self.clock() - self.seen_at < self.resync):
            return
        try:
            self._remember(self.client.node(self.node))
        except KubeError as exc:
            self._say(logging.WARNING, "read", "cannot read Node %s: %s" % (self.node, exc))

    def _remember(self, node: dict) -> None:
        status = node.get("status") or {}
        allocatable, capacity = status.get("allocatable") or {}, status.get("capacity") or {}
        seen = {}
        for resource in decision.POOL_RESOURCES.values():
            for held in (allocatable, capacity):
                if resource in held:
                    seen[resource] = min(seen.get(resource, 1 << 62), _integer(held[resource]))
        self.on_node = seen
        self.node_uid = (node.get("metadata") or {}).get("uid") or self.node_uid
        for condition in status.get("conditions") or ():
            if isinstance(condition, dict) and condition.get("type") == decision.CONDITION_TYPE:
                self.condition = {k: condition.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
        self.seen_at = self.clock()

    # -- deciding --------------------------------------------------------------------------------------------

    def decide(self) -> Round:
        state = misc_cgroup.read_misc_state(self.host.fresh())
        on_node = self.on_node or {}
        if not state.layout.present:
            why = state.layout.reason or "no misc cgroup controller"
            # Values this agent advertised before go to 0: a pool nobody can read is no pool.
            gone = decision.Doubt(decision.REASON_NO_MISC, why)
            stale = [decision.decide(decision.MISC_OF_POOL[r], None, None, None, doubts=(gone,)) for r in on_node]
            return Round(stale, _condition(stale), note=why) if stale else self._nothing(decision.REASON_NO_MISC, why)
        pods, pod_doubt = self.read_pods()
        kernel_doubts = _kernel_doubts(state)
        decisions = []
        for misc, resource in decision.POOL_RESOURCES.items():
            entry = state.entry(misc)
            if entry.capacity == 0 and resource not in on_node:
                continue  # this host has none of it and we never advertised it: nothing to say
            running = None if pods is None else decision.k8s_running(pods, self.node, resource)
            limit, range_doubts = snp_range(self.host) if misc == tee.SEV_ES else (None, ())
            doubts = kernel_doubts + range_doubts + ((pod_doubt,) if pod_doubt else ())
            found = decision.decide(
                misc,
                entry.capacity,
                entry.current,
                running,
                reserve=self.reserve.get(misc, 0),
                previous=on_node.get(resource),
                doubts=doubts,
                limit=limit,
            )
            decisions.append(found)
        if not decisions:
            names = ", ".join(decision.POOL_RESOURCES)
            return self._nothing(decision.REASON_NO_RESOURCE, f"misc.capacity lists no TEE key resource ({names})")
        return Round(decisions, _condition(decisions))

    def _nothing(self, reason: str, message: str) -> Round:
        return Round([], {"status": "False", "reason": reason, "message": message[:1024]}, note=message)

    # -- writing ---------------------------------------------------------------------------------------------

    def step(self) -> Round:
        """One pass: refresh what the Node holds if due, decide, write on change, log why."""
        self.refresh_node()
        found = self.decide()
        changed_values = found.values() != {k: v for k, v in (self.on_node or {}).items() if k in found.values()}
        changed_condition = _condition_key(found.condition) != _condition_key(self.condition)
        if changed_values or changed_condition:
            self._log(found)
            if not self.dry_run and self.client is not None:
                self._write(found)
        return found

    def _write(self, found: Round) -> None:
        condition = dict(found.condition, type=decision.CONDITION_TYPE)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        same_status = self.condition and self.condition.get("status") == condition["status"]
        condition["lastTransitionTime"] = (self.condition or {}).get("lastTransitionTime") if same_status else now
        condition["lastHeartbeatTime"] = now
        values = {resource: str(pool) for resource, pool in found.values().items()}
        patch = {"status": {"capacity": values, "allocatable": values, "conditions": [condition]}}
        reason_changed = (self.condition or {}).get("reason") != condition["reason"]
        try:
            self._remember(self.client.patch_node_status(self.node, patch))
        except KubeError as exc:
            found.error = str(exc)
            self._say(
                logging.ERROR, "patch", "cannot patch Node %s status (will retry next interval): %s" % (self.node, exc)
            )
            self.seen_at = float("-inf")  # read the Node again before the next decision
            return
        found.written = True
        self._said.pop("patch", None)
        if reason_changed:
            self._event(condition)

    def _event(self, condition: dict) -> None:
        kind = "Normal" if condition["status"] == "True" else "Warning"
        try:
            self.client.node_event(self.node, self.node_uid, condition["reason"], condition["message"], kind)
        except KubeError as exc:
            LOG.warning("cannot create an Event for Node %s: %s", self.node, exc)

    def _log(self, found: Round) -> None:
        if found.note:
            self._say(logging.WARNING, "note", "%s: %s" % (found.condition["reason"], found.note))
        for item in found.decisions:
            self._say(logging.WARNING if item.doubts else logging.INFO, "pool " + item.resource, item.explain())

    def _say(self, level: int, channel: str, message: str) -> None:
        """Log ``message`` unless ``channel`` said the same within :data:`REPEAT_EVERY` seconds."""
        last = self._said.get(channel)
        now = self.clock()
        if last is not None and last[0] == message and now - last[1] < REPEAT_EVERY:
            return
        self._said[channel] = (message, now)
        LOG.log(level, "%s", message)

    def run(self, stop, interval: float) -> None:
        """Steps every ``interval`` seconds until ``stop`` (a ``threading.Event``) is set."""
        self.refresh_node(force=True)
        while not stop.is_set():
            started = self.clock()
            try:
                self.step()
            except Exception as exc:  # a bug must not stop the agent; the next pass tries again
                LOG.exception("pass failed: %s", exc)
            stop.wait(max(0.0, interval - (self.clock() - started)))


def _condition(decisions: list) -> dict:
    doubtful = [d for d in decisions if d.doubts]
    shown = doubtful or decisions
    message = "; ".join(d.explain() for d in shown)
    reason = doubtful[0].reason if doubtful else decision.REASON_OK
    return {"status": "False" if doubtful else "True", "reason": reason, "message": message[:1024]}


def _condition_key(condition: dict | None) -> tuple:
    return (None, None) if condition is None else (condition.get("status"), condition.get("reason"))


def _integer(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0
