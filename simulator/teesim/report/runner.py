"""Run a scenario under every strategy and collect the report (plain data, JSON-ready).

The same :class:`~teesim.sim.simulation.World` (same arrivals drawn from the seed) is replayed
under each strategy, so the numbers differ only because the strategies do.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TextIO

from teesim import _native
from teesim.report.metrics import MetricsRecorder
from teesim.sim.scenario import Scenario
from teesim.sim.simulation import Simulation, World
from teesim.strategies.base import STRATEGIES, get_strategy

Progress = Callable[[str, float], None]


def progress_bar(stream: TextIO = sys.stderr, width: int = 30) -> Progress:
    """A one-line progress bar per strategy (redrawn in place on a terminal)."""
    interactive = stream.isatty()
    last: dict[str, int] = {}

    def show(label: str, fraction: float) -> None:
        percent = int(fraction * 100)
        if not interactive and percent not in (0, 100) and percent - last.get(label, -100) < 25:
            return
        if last.get(label) == percent:
            return
        last[label] = percent
        filled = int(fraction * width)
        end = "\n" if percent >= 100 else ("\r" if interactive else "\n")
        stream.write(f"{label:<24} [{'#' * filled}{'.' * (width - filled)}] {percent:3d}%{end}")
        stream.flush()

    return show


def simulate(
    world: World,
    strategy: str,
    progress: Callable[[float], None] | None = None,
    *,
    incremental: bool = True,
    placer: Any = None,
) -> tuple[Simulation, MetricsRecorder]:
    """One run of ``world`` under one strategy, recorded: what ``teesim run`` and a sweep task both do.
    ``placer``: a scheduler outside the model (``teesim.sim.kube_scheduler.KubeScheduler``), attached to the run
    and closed after it."""
    sim = Simulation(
        world, get_strategy(strategy), incremental=incremental, placer=None if placer is None else placer.place
    )
    recorder = MetricsRecorder()
    if placer is None:
        sim.run(recorder, progress)
        return sim, recorder
    placer.attach(sim)
    try:
        sim.run(recorder, progress)
    finally:
        placer.close()
    return sim, recorder


def run_scenario(
    scenario: Scenario,
    strategies: Sequence[str] | None = None,
    progress: Progress | None = None,
    *,
    incremental: bool = True,
    placers: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Simulate ``scenario`` under each strategy; returns the report.

    ``incremental=False`` runs the reference engine (see :class:`Simulation`): same report, slower.
    ``placers(strategy)`` gives each run a scheduler outside the model (``teesim run --kube-scheduler``); its
    ``summary()`` goes into the strategy's report as ``placements``.
    """
    names = list(strategies or STRATEGIES)
    results: dict[str, Any] = {}
    total_events = 0
    started = time.perf_counter()
    for name in names:
        placer = None if placers is None else placers(name)
        bar = None if progress is None else partial(progress, name)
        sim, recorder = simulate(scenario.world, name, bar, incremental=incremental, placer=placer)
        summary = recorder.summary(sim)
        total_events += summary["events"]
        results[name] = {
            "summary": sim.strategy.summary,
            "metrics": summary,
            "failures": recorder.failure_data(),
            "timeline": recorder.timeline_data(),
        }
        if placer is not None:
            results[name]["placements"] = placer.summary()
    elapsed = time.perf_counter() - started
    return {
        **scenario_header(scenario),
        "strategies": results,
        # Kept out of "strategies" so that the same seed gives byte-identical JSON apart from this.
        "_runtime": {"wall_s": round(elapsed, 3), "events": total_events, "build": _native.status()},
    }


def scenario_header(scenario: Scenario) -> dict[str, Any]:
    """What a report says about the scenario, whatever ran it."""
    world = scenario.world
    return {
        "scenario": scenario.name,
        "description": scenario.description,
        "seed": scenario.seed,
        "duration_s": world.duration,
        "nodes": [
            {
                "name": n.name,
                "vendor": n.vendor,
                "profile": n.profile.name,
                "capacity": n.resolved_capacity(),
            }
            for n in world.nodes
        ],
        "arrivals": len(world.arrivals),
        "faults": [{"kind": f.kind, "at": f.at, "node": f.node} for f in world.faults],
    }
