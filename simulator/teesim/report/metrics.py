"""Metrics of one strategy on one scenario, gathered while the simulation runs.

* **failed launches**: KVM launches that failed (ENOSPC for TDX KeyIDs, EBUSY for misc.max and SEV/SNP
  ASIDs), per consumer; a Kata sandbox the kubelet retries counts once per try. How many fell
  *outside* the race window, per consumer (no other guest charged a key on that node between
  ``poll_interval + node_status_interval`` before the pod was bound, or before an external VM's start,
  and the failed launch);
* **admission failures**: pods the kubelet rejected (``UnexpectedAdmissionError``: device plugin
  resource unregistered or unhealthy after a restart or crash);
* **stranded key-seconds**: the integral over time of keys free in the kernel (neither charged nor
  promised to a bound pod) that the scheduler would not give a new VMI (``tdx`` and ``sev_es``; plain
  SEV ASIDs have no key pool in any strategy); **stranded for all**: the
  same for keys neither a new VMI nor a new Kata pod could get;
* **pending pod-seconds**, the most pods pending at once, and pods still pending at the end;
* **detection latency**: for each ``misc.current`` change made by a consumer the VMI resource does
  not already account for (external VMs; Kata too when VMIs use a pool Kata does not draw from), the
  time until an advertiser of that resource on that node published a count computed from a
  ``misc.current`` reading taken after the change (a reconciling or unified plugin's poll, the DRA
  driver's slice update). Advertisers that never read usage never detect anything: those changes,
  and any still unseen at the end, are ``undetected``.

Values are piecewise constant between events, so integrals are exact, not sampled. The timeline keeps
one row per change of any plotted value.

Cost: after each event the recorder looks only at the nodes the simulation reports as changed
(:attr:`Simulation.changed`) and at the node resources with changes not yet detected; an integral
is advanced only when its value changes (value times the time since the change), so an event that
changes nothing costs the same on a fleet of 1,000 nodes as on one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from mypy_extensions import mypyc_attr

from teesim.cluster.pods import CONSUMER_VALUE, Consumer, Phase
from teesim.sim.simulation import Failure, ResourceSnapshot, Simulation
from teesim.strategies.base import KUBEVIRT_KEYS

KEY_POOLS = frozenset(KUBEVIRT_KEYS)
# The consumers' values in Consumer's order, from the pods' table (Enum.value is slow in a hot loop).
_CONSUMER_VALUES = tuple(CONSUMER_VALUE.values())
_KATA, _KUBEVIRT, _EXTERNAL = (CONSUMER_VALUE[c] for c in (Consumer.KATA, Consumer.KUBEVIRT, Consumer.EXTERNAL))
TIMELINE_COLUMNS = ("t", "capacity", "current", "advertised", "nfd", "kata", "kubevirt", "external")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _by_consumer(failures: list[Failure], outside_race_only: bool = False) -> dict[str, int]:
    """How many of ``failures`` each consumer had (one pass: a run can record thousands of retries)."""
    counts: dict[str, int] = dict.fromkeys(_CONSUMER_VALUES, 0)
    for failure in failures:
        if not (outside_race_only and (failure.in_race_window or failure.over_headroom)):
            counts[failure.consumer] += 1
    return counts


def _retry_summary(sim: Simulation, consumer: Consumer) -> dict[str, int]:
    """What retries did to one consumer's pods: the kubelet's sandbox retries (Kata), virt-handler's
    back-off (VMIs)."""
    kata = [p for p in sim.pods if p.consumer is consumer]
    return {
        "pods": len(kata),
        "pods_with_failed_launch": sum(1 for p in kata if p.attempts > 1 or (p.attempts and p.started_at is None)),
        "retries": sum(max(p.attempts - 1, 0) for p in kata),
        "never_started": sum(1 for p in kata if p.attempts and p.started_at is None),
    }


def _kubelet_summary(sim: Simulation) -> dict[str, int]:
    """Device-manager and pod-resources events worth knowing about."""
    plugins = [p for plugins in sim.plugins.values() for p in plugins]
    return {
        "allocated_devices_marked_unhealthy": sum(n.devices.allocated_marked_unhealthy for n in sim.nodes.values()),
        "pod_resources_throttled": sum(getattr(p, "throttled", 0) for p in plugins),
    }


@dataclass
class _Series:
    rows: list[tuple[float, ...]] = field(default_factory=list)


# Subclassed outside the native build (the benchmark's and the tests' probes): teesim._native.
@mypyc_attr(allow_interpreted_subclasses=True)
class MetricsRecorder:
    """An :class:`~teesim.sim.simulation.Observer` that computes the metrics of one run."""

    def __init__(self) -> None:
        # key -> (stranded, stranded for all, since when): the integrands and when they took that value.
        self._stranded: dict[tuple[str, str], tuple[int, int, float]] = {}
        self.stranded_key_seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.stranded_for_all_key_seconds: dict[tuple[str, str], float] = defaultdict(float)
        self._pending = 0
        self._pending_since = 0.0
        self.pending_pod_seconds = 0.0
        self.max_pending = 0
        self._changes: dict[tuple[str, str], list[float]] = defaultdict(list)
        self._waiting: set[tuple[str, str]] = set()  # keys with changes not detected yet
        self._queued_now: set[tuple[str, str]] = set()  # keys that got a change in this event
        # misc resource -> consumers the VMI resource accounts for (the strategy's answer never changes).
        self._accounted: dict[str, frozenset[str]] = {}
        # node -> SimNode.observed_revision() at its last snapshots: a node reported changed whose
        # revision did not move (a pod's start reaching the informers, a device allocated) would give
        # the same snapshots, and observing the same values again changes no row and no integral.
        self._observed_at: dict[str, tuple[int, int, int]] = {}
        self.latencies: list[float] = []
        self.failures: list[Failure] = []
        self.timelines: dict[tuple[str, str], _Series] = defaultdict(_Series)

    # -- Observer ------------------------------------------------------------------------------------
    def on_kernel_change(self, sim: Simulation, node: str, resource: str, consumer: str, now: float) -> None:
        accounted = self._accounted.get(resource)
        if accounted is None:
            accounted = self._accounted[resource] = sim.strategy.accounted(resource)
        if consumer not in accounted:
            self._changes[(node, resource)].append(now)
            self._waiting.add((node, resource))
            self._queued_now.add((node, resource))
            sim.nodes[node].usage_published_at.watched.add(resource)

    def on_failure(self, sim: Simulation, failure: Failure) -> None:
        self.failures.append(failure)

    def after_event(self, sim: Simulation, now: float) -> None:
        pending = len(sim.queue.pending)  # sim.pending without the property call (every event)
        if pending != self._pending:
            self.pending_pod_seconds += self._pending * (now - self._pending_since)
            self._pending, self._pending_since = pending, now
            self.max_pending = max(self.max_pending, pending)
        published = sim.published
        if not sim.incremental:
            # The reference engine looks at every waiting key after every event.
            self._detect(sim, [key for key in self._waiting])
        elif self._queued_now or (published and self._waiting):
            self._detect(sim, published)
        published.clear()
        changed = sim.changed
        if changed:
            # sim.snapshots(changed), one at a time: no list built per event (same order).
            snapshot, resources, observe = sim.snapshot, sim.resources, self._observe
            incremental, observed_at = sim.incremental, self._observed_at
            for node in changed:
                if incremental:  # the reference engine snapshots every node after every event
                    revision = node.observed_revision(now)
                    if revision is not None:
                        if observed_at.get(node.name) == revision:
                            continue
                        observed_at[node.name] = revision
                    else:
                        observed_at.pop(node.name, None)
                for resource in resources(node):
                    observe(snapshot(node, resource), now)

    def _detect(self, sim: Simulation, published: list[tuple[str, str]]) -> None:
        """Changes an advertiser has published a count from since: looked at for the keys published
        in this event (an advertiser publishes without changing anything else) and those that got a
        change in it (a publish earlier at the same instant counts)."""
        keys = {key for key in published if key in self._waiting}
        keys.update(self._queued_now)
        self._queued_now.clear()
        for key in sorted(keys):
            node, resource = key
            queued = self._changes[key]
            seen_at = sim.nodes[node].usage_published_at.get(resource)
            if seen_at is not None:
                self.latencies.extend(seen_at - t for t in queued if t <= seen_at)
                queued[:] = [t for t in queued if t > seen_at]
            if not queued:
                self._waiting.discard(key)
                sim.nodes[node].usage_published_at.watched.discard(resource)

    def _observe(self, snap: ResourceSnapshot, now: float) -> None:
        key = (snap.node, snap.resource)
        if snap.resource in KEY_POOLS:  # plain SEV has no key pool in any strategy
            self._set_stranded(key, *snap.stranded_pair(), now)
        row = (
            now,
            snap.capacity,
            snap.current,
            snap.advertised,
            snap.nfd_advertised,
            snap.charged[_KATA],
            snap.charged[_KUBEVIRT],
            snap.charged[_EXTERNAL],
        )
        series = self.timelines[key].rows
        if series and series[-1][0] == now:
            # Several events at one instant: only the state after the last one is ever visible.
            series.pop()
        if not series or series[-1][1:] != row[1:]:
            series.append(row)

    def _set_stranded(self, key: tuple[str, str], vmi: int, every: int, now: float) -> None:
        previous = self._stranded.get(key)
        if previous is None:
            self._stranded[key] = (vmi, every, now)
            self.stranded_key_seconds[key] += 0.0
            self.stranded_for_all_key_seconds[key] += 0.0
        elif previous[0] != vmi or previous[1] != every:
            span = now - previous[2]
            self.stranded_key_seconds[key] += previous[0] * span
            self.stranded_for_all_key_seconds[key] += previous[1] * span
            self._stranded[key] = (vmi, every, now)

    def _advance(self, now: float) -> None:
        """Close every integral at ``now`` (the end of the run)."""
        for key, (vmi, every, since) in self._stranded.items():
            self.stranded_key_seconds[key] += vmi * (now - since)
            self.stranded_for_all_key_seconds[key] += every * (now - since)
            self._stranded[key] = (vmi, every, now)
        self.pending_pod_seconds += self._pending * (now - self._pending_since)
        self._pending_since = now

    # -- results -------------------------------------------------------------------------------------
    def summary(self, sim: Simulation) -> dict[str, Any]:
        """The metrics as plain data (rounded for stable JSON)."""
        self._advance(sim.world.duration)
        launch = [f for f in self.failures if f.kind == "launch"]
        admission = [f for f in self.failures if f.kind == "admission"]
        readmission = [f for f in self.failures if f.kind == "readmission"]
        by_consumer, outside = _by_consumer(launch), _by_consumer(launch, outside_race_only=True)
        undetected = sum(len(v) for v in self._changes.values())
        pending_end = [p for p in sim.pods if p.phase is Phase.PENDING]

        def r(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "failed_launches": len(launch),
            "failed_launches_by_consumer": by_consumer,
            "failed_outside_race_window": outside,
            "kubevirt_failed_outside_race_window": outside[_KUBEVIRT],
            "external_over_headroom": sum(1 for f in launch if f.over_headroom),
            "admission_failures": len(admission),
            "rejected_at_kubelet_restart": _by_consumer(readmission),
            "admission_failures_by_consumer": _by_consumer(admission),
            "kata": _retry_summary(sim, Consumer.KATA),
            "kubevirt": _retry_summary(sim, Consumer.KUBEVIRT),
            "stranded_key_seconds": r(sum(self.stranded_key_seconds.values())),
            "stranded_for_all_key_seconds": r(sum(self.stranded_for_all_key_seconds.values())),
            "pending_pod_seconds": r(self.pending_pod_seconds),
            "max_pending": self.max_pending,
            "pending_at_end": len(pending_end),
            "detection": {
                "changes": len(self.latencies) + undetected,
                "detected": len(self.latencies),
                "undetected": undetected,
                "p50_s": r(percentile(self.latencies, 50)),
                "p99_s": r(percentile(self.latencies, 99)),
                "max_s": r(max(self.latencies) if self.latencies else None),
            },
            "kubelet": _kubelet_summary(sim),
            "launched": {c: sim.launched.get(c, 0) for c in _CONSUMER_VALUES},
            "completed": {c: sim.completed.get(c, 0) for c in _CONSUMER_VALUES},
            "events": sim.clock.events_run,
        }

    def timeline_data(self) -> dict[str, dict[str, Any]]:
        """``{"node/resource": {"columns": [...], "rows": [[...], ...]}}``."""
        return {
            f"{node}/{resource}": {
                "columns": list(TIMELINE_COLUMNS),
                "rows": [[round(row[0], 6), *row[1:]] for row in series.rows],
            }
            for (node, resource), series in sorted(self.timelines.items())
        }

    def failure_data(self, limit: int = 200) -> list[dict[str, Any]]:
        return [
            {
                "time": round(f.time, 6),
                "node": f.node,
                "consumer": f.consumer,
                "resource": f.resource,
                "uid": f.uid,
                "kind": f.kind,
                "message": f.message,
                "error": f.error or None,  # the errno KVM returned; an admission failure has none
                "in_race_window": f.in_race_window,
                "over_headroom": f.over_headroom,
                "attempt": f.attempt,
            }
            for f in self.failures[:limit]
        ]
