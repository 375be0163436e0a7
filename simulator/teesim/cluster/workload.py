"""Workloads: when each Kata pod, KubeVirt VMI and external VM arrives, how long it lives, and faults.

A scenario's workload streams become one fixed list of :class:`Arrival` drawn from a seeded
``random.Random``, so every strategy replays exactly the same demand (Poisson arrivals at ``rate``
per second, or a burst of ``count`` guests at ``at``, spread over ``spread`` seconds) and the same seed
always gives the same list. Lifetimes and launch delays are uniform over ``[low, high]``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from teesim._collection import canonical_resource
from teesim.cluster.pods import Consumer, Guest

FAULT_KINDS = ("kubelet-restart", "plugin-crash", "sysfs-unreadable")


@dataclass(frozen=True)
class Range:
    """A uniform range in seconds (``low == high`` for a constant)."""

    low: float
    high: float

    def draw(self, rng: random.Random) -> float:
        return self.low if self.low == self.high else rng.uniform(self.low, self.high)


@dataclass(frozen=True)
class WorkloadSpec:
    """One stream of guests of one consumer type."""

    consumer: Consumer
    resource: str
    duration: Range
    launch_delay: Range = Range(2.0, 6.0)
    rate: float | None = None
    start: float = 0.0
    end: float | None = None
    at: float | None = None
    count: int = 0
    spread: float = 0.0
    node: str | None = None  # external VMs run on one named node
    guest: Guest | None = None  # default: the usual guest of the misc resource (sev_es -> SNP)

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource", canonical_resource(self.resource))
        guest = Guest.default_for(self.resource) if self.guest is None else Guest(self.guest)
        if guest.misc_resource != self.resource:
            raise ValueError(f"a {guest.value} guest charges {guest.misc_resource}, not {self.resource}")
        object.__setattr__(self, "guest", guest)


@dataclass(frozen=True)
class FaultSpec:
    """A fault injected at ``at`` on ``node`` (``duration`` for an unreadable file)."""

    kind: str
    at: float
    node: str
    duration: float = 60.0
    file: str = "misc.current"


@dataclass(frozen=True, order=True)
class Arrival:
    """One guest: created at ``time``; ``launch_delay`` from bind to its KVM charge; lives ``duration``."""

    time: float
    seq: int
    consumer: Consumer = field(compare=False)
    resource: str = field(compare=False)
    duration: float = field(compare=False)
    launch_delay: float = field(compare=False)
    node: str | None = field(compare=False, default=None)
    guest: Guest | None = field(compare=False, default=None)

    @property
    def kind(self) -> Guest:
        return self.guest if self.guest is not None else Guest.default_for(self.resource)


def _times(spec: WorkloadSpec, rng: random.Random, horizon: float) -> list[float]:
    if spec.rate is not None:
        end = min(spec.end if spec.end is not None else horizon, horizon)
        times = []
        t = spec.start
        while spec.rate > 0:
            t += rng.expovariate(spec.rate)
            if t >= end:
                break
            times.append(t)
        return times
    at = spec.start if spec.at is None else spec.at
    return [at + (rng.uniform(0, spec.spread) if spec.spread else 0.0) for _ in range(spec.count)]


def generate_arrivals(specs: list[WorkloadSpec], seed: int, horizon: float) -> list[Arrival]:
    """Every arrival of every stream, sorted by time (ties in stream order), reproducible from ``seed``."""
    rng = random.Random(seed)
    drafts: list[tuple[float, int, WorkloadSpec, float, float]] = []
    for index, spec in enumerate(specs):
        for when in _times(spec, rng, horizon):
            drafts.append((when, index, spec, spec.duration.draw(rng), spec.launch_delay.draw(rng)))
    drafts.sort(key=lambda d: (d[0], d[1]))
    return [
        Arrival(
            round(when, 6), seq, spec.consumer, spec.resource, round(life, 6), round(delay, 6), spec.node, spec.guest
        )
        for seq, (when, _, spec, life, delay) in enumerate(drafts)
        if when < horizon
    ]
