"""Sweeps: many seeds of many scenarios under many strategies, in parallel, with confidence intervals.

One run of ``teesim run`` shows one draw of the workload; a platform engineer deciding between
strategies wants to know whether a difference survives other draws. A sweep runs every
(scenario, seed, strategy) as its own task, then summarises each metric per scenario and strategy
over the seeds: mean, sample standard deviation, min, max and a two-sided Student-t confidence
interval of the mean (``confidence``, 95 % by default).

Tasks run on an *engine*, never a scheduler of our own:

* ``serial``: in this process, one after the other;
* ``process`` (default): ``concurrent.futures.ProcessPoolExecutor`` on this machine's cores;
* ``dask``: a Dask cluster, or a local one (the optional extra ``dask``, :mod:`teesim.report.engines`).

A task carries the scenario's parsed YAML, seed and strategy name, not a path, so a worker on
another machine needs only the ``teesim`` package. The report is the same whatever the engine and
the number of workers (tasks are keyed, results sorted); only ``_runtime`` differs.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from teesim import _native
from teesim.report.runner import simulate
from teesim.sim.scenario import parse_scenario, resolve
from teesim.strategies.base import STRATEGIES, get_strategy

# Two-sided 95 % Student-t critical values by degrees of freedom; between rows the smaller df's
# (larger) value is used, so an interval is never narrower than it should be up to 120 df. Beyond
# that the normal's 1.960 stands in (t is 1.972 at 200 df, 1.965 at 500: within 0.7 %).
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
    29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
_Z95 = 1.960


@dataclass(frozen=True)
class SweepTask:
    """One simulation: a scenario (as parsed YAML), a seed, a strategy."""

    scenario: str
    data: Mapping[str, Any]
    source: str
    seed: int
    strategy: str

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.scenario, self.seed, self.strategy)


# CPython collects its youngest generation every 700 net allocations and all of them every 100th time;
# a run allocates millions of short-lived tuples and dicts while keeping a few hundred thousand objects
# alive, so the full collections walk the whole model again and again and free little (cycles are rare:
# a run's objects go when the run does). Fewer young collections, and the objects of the imports frozen
# out of the walk, took 0.90x the CPU of a sweep (every bundled scenario and strategy, seed 1, three
# alternating pairs, native build, 2026-11-26). Set once per process that runs tasks.
GC_THRESHOLDS = (20_000, 50, 50)
_gc_tuned = False


def _tune_gc() -> None:
    global _gc_tuned
    if not _gc_tuned:
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        _gc_tuned = True


def run_task(task: SweepTask) -> dict[str, Any]:
    """Run one task (in whatever process the engine chose); returns its metrics, JSON-ready."""
    _tune_gc()
    scenario = parse_scenario(dict(task.data), task.source, task.seed)
    sim, recorder = simulate(scenario.world, task.strategy)
    return {"scenario": task.scenario, "seed": task.seed, "strategy": task.strategy, "metrics": recorder.summary(sim)}


def t_critical(df: int) -> float:
    """Two-sided 95 % Student-t critical value for ``df`` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df in _T95:
        return _T95[df]
    below = [d for d in _T95 if d < df]
    return _T95[max(below)] if df <= 120 else _Z95


def summarise(values: Sequence[float]) -> dict[str, Any]:
    """Mean, spread and 95 % confidence interval of one metric over seeds (``None`` values skipped:
    a detection percentile with nothing detected is unknown, not 0)."""
    known = [float(v) for v in values if v is not None]
    out: dict[str, Any] = {"n": len(known), "missing": len(values) - len(known)}
    if not known:
        return {**out, "mean": None, "stdev": None, "min": None, "max": None, "ci95": None}
    mean = statistics.fmean(known)
    stdev = statistics.stdev(known) if len(known) > 1 else None
    if stdev is None:
        ci = None
    else:
        half = t_critical(len(known) - 1) * stdev / math.sqrt(len(known))
        ci = [_round(mean - half), _round(mean + half)]
    return {**out, "mean": _round(mean), "stdev": _round(stdev), "min": min(known), "max": max(known), "ci95": ci}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"detection": {"p99_s": 1.0}}`` -> ``{"detection.p99_s": 1.0}``; numbers (and None) only."""
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            flat[name] = value
    return flat


def make_tasks(
    scenarios: Iterable[str], seeds: Iterable[int], strategies: Iterable[str] | None = None
) -> list[SweepTask]:
    """Every (scenario, seed, strategy); scenarios are bundled names or paths, read once here."""
    names = list(strategies or STRATEGIES)
    for name in names:
        get_strategy(name)
    seed_list = list(seeds)
    tasks = []
    for scenario in scenarios:
        path = resolve(scenario)
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        label = parse_scenario(dict(data), str(path), None).name  # validates the file once, here
        tasks.extend(SweepTask(label, data, str(path), seed, name) for seed in seed_list for name in names)
    return tasks


Engine = Callable[[list[SweepTask]], list[dict[str, Any]]]


def run_serial(tasks: list[SweepTask]) -> list[dict[str, Any]]:
    return [run_task(task) for task in tasks]


def aggregate(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{scenario: {strategy: {metric: summary}}}`` over seeds, plus the sorted raw runs."""
    runs = sorted(results, key=lambda r: (r["scenario"], r["seed"], r["strategy"]))
    grouped: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for run in runs:
        per_metric = grouped.setdefault(run["scenario"], {}).setdefault(run["strategy"], {})
        for metric, value in flatten(run["metrics"]).items():
            per_metric.setdefault(metric, []).append(value)
    summary = {
        scenario: {
            strategy: {metric: summarise(values) for metric, values in sorted(metrics.items())}
            for strategy, metrics in strategies.items()
        }
        for scenario, strategies in grouped.items()
    }
    return {"results": summary, "runs": runs}


def _registry_order(names: set[str]) -> list[str]:
    order = list(STRATEGIES)
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def sweep(tasks: list[SweepTask], engine: Engine, engine_name: str, workers: int) -> dict[str, Any]:
    """Run ``tasks`` on ``engine`` and build the sweep report."""
    started = time.perf_counter()
    results = engine(tasks)
    elapsed = time.perf_counter() - started
    if len(results) != len(tasks):
        raise RuntimeError(f"engine {engine_name} returned {len(results)} results for {len(tasks)} tasks")
    report = aggregate(results)
    return {
        "sweep": {
            "scenarios": sorted({t.scenario for t in tasks}),
            "seeds": sorted({t.seed for t in tasks}),
            "strategies": _registry_order({t.strategy for t in tasks}),
            "confidence": 0.95,
        },
        **report,
        # Kept apart so that the same sweep gives the same JSON on any engine apart from this.
        "_runtime": {
            "engine": engine_name,
            "workers": workers,
            "tasks": len(tasks),
            "wall_s": round(elapsed, 3),
            # This process's build (teesim._native); a Dask worker on another machine has its own.
            "build": _native.status(),
        },
    }


# The rows of the sweep table; every metric is in the JSON.
TABLE_METRICS = (
    ("failed launches", "failed_launches"),
    ("  kata", "failed_launches_by_consumer.kata"),
    ("  kubevirt", "failed_launches_by_consumer.kubevirt"),
    ("  external", "failed_launches_by_consumer.external"),
    ("kata fails outside race window", "failed_outside_race_window.kata"),
    ("kubevirt fails outside race window", "kubevirt_failed_outside_race_window"),
    ("admission failures", "admission_failures"),
    ("kata rejected at kubelet restart", "rejected_at_kubelet_restart.kata"),
    ("stranded key-seconds", "stranded_key_seconds"),
    ("pending pod-seconds", "pending_pod_seconds"),
    ("detection p99 (s)", "detection.p99_s"),
    ("changes never detected", "detection.undetected"),
)


def _cell(summary: Mapping[str, Any] | None) -> str:
    if not summary or summary["mean"] is None:
        return "-"
    mean = summary["mean"]
    text = f"{mean:,.0f}" if abs(mean) >= 100 else f"{mean:.2f}"
    if summary["ci95"] is not None:
        half = (summary["ci95"][1] - summary["ci95"][0]) / 2
        text += f" ± {half:,.0f}" if abs(half) >= 100 else f" ± {half:.2f}"
    if summary["missing"]:
        text += f" ({summary['n']}/{summary['n'] + summary['missing']})"
    return text


def parse_seeds(text: str) -> list[int]:
    """``"1-10"``, ``"3,5,8"``, ``"1-3,9"`` -> the seeds, in order, without repeats."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            values = range(int(low), int(high) + 1) if dash else [int(part)]
        except ValueError:
            raise ValueError(f"seeds {text!r}: {part!r} is not a number or a range like 1-10") from None
        if dash and int(high) < int(low):
            raise ValueError(f"seeds {text!r}: range {part!r} runs backwards")
        seeds.extend(v for v in values if v not in seeds)
    if not seeds:
        raise ValueError(f"seeds {text!r}: no seed given")
    return seeds


def format_sweep(report: Mapping[str, Any]) -> str:
    """One table per scenario: mean ± half-width of the 95 % interval over the seeds."""
    meta = report["sweep"]
    lines = [
        f"{len(meta['seeds'])} seeds ({meta['seeds'][0]}..{meta['seeds'][-1]}) per scenario and strategy; "
        "mean ± half-width of the 95 % confidence interval of the mean"
    ]
    for scenario, per_strategy in report["results"].items():
        strategies = [s for s in meta["strategies"] if s in per_strategy]
        width = max(24, *(len(s) + 2 for s in strategies))
        lines.append("")
        lines.append(f"{scenario:<36}" + "".join(f"{s:>{width}}" for s in strategies))
        for label, metric in TABLE_METRICS:
            cells = [_cell(per_strategy[s].get(metric)) for s in strategies]
            lines.append(f"{label:<36}" + "".join(f"{c:>{width}}" for c in cells))
    runtime = report.get("_runtime", {})
    if runtime:
        lines.append("")
        engine = f"{runtime['engine']} ({runtime['workers']} workers)"
        build = runtime.get("build", {}).get("build", "unknown")
        lines.append(f"{runtime['tasks']} runs on {engine}, {build} build, in {runtime['wall_s']:.1f} s")
    return "\n".join(lines) + "\n"
