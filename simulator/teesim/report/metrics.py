"""Metrics of one strategy on one scenario, gathered while the simulation runs.

* **failed launches**: guests whose KVM charge failed (EBUSY), per consumer, and how many of the
  KubeVirt ones fell *outside* the race window (no other guest charged a key on that node between
  ``poll_interval`` before the VMI was bound and its failed launch);
* **admission failures**: pods the kubelet rejected (``UnexpectedAdmissionError``: device plugin
  resource unregistered or unhealthy after a restart or crash);
* **stranded key-seconds**: the integral over time of keys free in the kernel (neither charged nor
  promised to a bound pod) that the scheduler would not give a new VMI;
* **pending pod-seconds**, the most pods pending at once, and pods still pending at the end;
* **detection latency**: for each ``misc.current`` change made by a consumer the VMI resource does
  not already account for (external VMs; Kata too when VMIs use a plugin resource), the time until
  the advertised count equals ``max(capacity - max(current - own, 0), own)`` where ``own`` is what pods
  bound to the node hold of the VMI resource. Changes never reflected by the end are ``undetected``.

Values are piecewise constant between events, so integrals are exact, not sampled. The timeline keeps
one row per change of any plotted value.

Cost: after each event the recorder looks only at the nodes the simulation reports as changed
(:attr:`Simulation.changed`), and an integral is advanced only when its value changes (value times
the time since its last change), so an event that changes nothing costs the same on a fleet of
1,000 nodes as on one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from teesim.cluster.pods import Consumer, Phase
from teesim.strategies.simulation import Failure, ResourceSnapshot, Simulation

TIMELINE_COLUMNS = ("t", "capacity", "current", "advertised", "nfd", "kata", "kubevirt", "external")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def reflected(snap: ResourceSnapshot) -> bool:
    """Whether the advertised count already accounts for every key the VMI resource cannot see."""
    own = snap.requested
    others = max(snap.current - own, 0)
    return snap.advertised == max(snap.capacity - others, own)


@dataclass
class _Series:
    rows: list[tuple[float, ...]] = field(default_factory=list)


class MetricsRecorder:
    """An :class:`~teesim.strategies.simulation.Observer` that computes the metrics of one run."""

    def __init__(self) -> None:
        # (value, since): the current value of each integrand and when it took that value.
        self._stranded: dict[tuple[str, str], tuple[int, float]] = {}
        self.stranded_key_seconds: dict[tuple[str, str], float] = defaultdict(float)
        self._pending = 0
        self._pending_since = 0.0
        self.pending_pod_seconds = 0.0
        self.max_pending = 0
        self._changes: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.latencies: list[float] = []
        self.failures: list[Failure] = []
        self.timelines: dict[tuple[str, str], _Series] = defaultdict(_Series)

    # -- Observer ------------------------------------------------------------------------------------
    def on_kernel_change(self, sim: Simulation, node: str, resource: str, consumer: str, now: float) -> None:
        if consumer not in sim.strategy.resource_users(resource):
            self._changes[(node, resource)].append(now)

    def on_failure(self, sim: Simulation, failure: Failure) -> None:
        self.failures.append(failure)

    def after_event(self, sim: Simulation, now: float) -> None:
        pending = len(sim.pending)
        if pending != self._pending:
            self.pending_pod_seconds += self._pending * (now - self._pending_since)
            self._pending, self._pending_since = pending, now
            self.max_pending = max(self.max_pending, pending)
        if not sim.changed:
            return
        for snap in sim.snapshots(sim.changed):
            key = (snap.node, snap.resource)
            self._set_stranded(key, snap.stranded, now)
            queued = self._changes.get(key)
            if queued and reflected(snap):
                self.latencies.extend(now - t for t in queued)
                queued.clear()
            row = (
                now,
                snap.capacity,
                snap.current,
                snap.advertised,
                snap.nfd_advertised,
                snap.charged[Consumer.KATA.value],
                snap.charged[Consumer.KUBEVIRT.value],
                snap.charged[Consumer.EXTERNAL.value],
            )
            series = self.timelines[key].rows
            if series and series[-1][0] == now:
                # Several events at one instant: only the state after the last one is ever visible.
                series.pop()
            if not series or series[-1][1:] != row[1:]:
                series.append(row)

    def _set_stranded(self, key: tuple[str, str], value: int, now: float) -> None:
        previous = self._stranded.get(key)
        if previous is None:
            self._stranded[key] = (value, now)
            self.stranded_key_seconds[key] += 0.0
        elif previous[0] != value:
            self.stranded_key_seconds[key] += previous[0] * (now - previous[1])
            self._stranded[key] = (value, now)

    def _advance(self, now: float) -> None:
        """Close every integral at ``now`` (the end of the run)."""
        for key, (value, since) in self._stranded.items():
            self.stranded_key_seconds[key] += value * (now - since)
            self._stranded[key] = (value, now)
        self.pending_pod_seconds += self._pending * (now - self._pending_since)
        self._pending_since = now

    # -- results -------------------------------------------------------------------------------------
    def summary(self, sim: Simulation) -> dict[str, Any]:
        """The metrics as plain data (rounded for stable JSON)."""
        self._advance(sim.world.duration)
        launch = [f for f in self.failures if f.kind == "launch"]
        admission = [f for f in self.failures if f.kind == "admission"]
        by_consumer = {c.value: sum(1 for f in launch if f.consumer == c.value) for c in Consumer}
        outside = sum(1 for f in launch if f.consumer == Consumer.KUBEVIRT.value and not f.in_race_window)
        undetected = sum(len(v) for v in self._changes.values())
        pending_end = [p for p in sim.pods if p.phase is Phase.PENDING]

        def r(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "failed_launches": len(launch),
            "failed_launches_by_consumer": by_consumer,
            "kubevirt_failed_outside_race_window": outside,
            "admission_failures": len(admission),
            "stranded_key_seconds": r(sum(self.stranded_key_seconds.values())),
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
            "launched": {c.value: sim.launched.get(c.value, 0) for c in Consumer},
            "completed": {c.value: sim.completed.get(c.value, 0) for c in Consumer},
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
                "in_race_window": f.in_race_window,
            }
            for f in self.failures[:limit]
        ]
