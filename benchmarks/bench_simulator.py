"""Throughput of the teesim model, side by side with the reference engine, plus the fleet run.

Prints figures, asserts nothing (``make benchmark``). Five parts:

1. the kernel model's charge/uncharge and render rates;
2. every bundled scenario under every strategy, run by the engine ``teesim run`` uses and by the
   reference engine (``Simulation(incremental=False)``: every node observed after every event, every
   pending pod tried on every node, files parsed at every poll, one plain heap as the event queue:
   the simulator's data structures before they learnt which nodes changed). Both give the same
   report (tests/simulator/sim/test_incremental.py), so the ratio is the data structures alone,
   on today's model, measured in this run;
3. where that time goes: the same pairs with the event loop alone (as many no-op events), the model
   without the report and the model with it, so that a target can be set against the part it needs;
4. the fleet: ``benchmarks/scenarios/fleet-1000.yaml`` (1,000 nodes, 1,000 guest lifecycles) per
   strategy. The reference engine costs O(nodes) per event there (about 70 events/s), so it runs for
   ``--baseline-budget`` CPU seconds and its full-run time is projected from the rate it reached.

``--git-baseline REF`` also times the simulator as committed at REF (exported to a temporary
directory and run in a subprocess) on the bundled scenarios: the code as it was, on the model as it
was (the event counts show where the model changed since).

Rates are per CPU second of this process (``time.process_time``), so a busy machine slows the wall
clock more than the figure; the wall time and the load average are printed alongside. The best of
``--repeat`` runs counts.

5. the sweep users wait for (issue 19): ``teesim sweep`` of every bundled scenario x every strategy x
   ``--sweep-seeds`` (1-30) on the process pool of two, its wall time for this tree's native build
   (``make native``, teesim._native), this tree's source and ``--sweep-baseline`` (the previous
   commit), against the 60 s target; ``--sweep-repeat N`` runs them N times, alternately, and counts
   the least wall time of each; then the fleet (part 4) once per strategy by the same three, against
   its 10 s target (``--sweep-only`` runs these two, issue 19's targets, alone). With ``TEESIM_NATIVE=0``
   the rest of this benchmark times the source.

Usage: python benchmarks/bench_simulator.py [--repeat N] [--no-fleet] [--git-baseline REF] [--sweep-only]
       [--sweep-repeat N] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulator"))

from teesim.engine.clock import VirtualClock
from teesim.kernel.misc import MiscController
from teesim.report.metrics import MetricsRecorder
from teesim.sim.scenario import bundled_scenarios, load_scenario
from teesim.sim.simulation import Simulation, World
from teesim.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]
FLEET = ROOT / "benchmarks" / "scenarios" / "fleet-1000.yaml"


class _OutOfBudget(Exception):
    pass


class _BudgetRecorder(MetricsRecorder):
    """Stops a run once it has used ``budget`` CPU seconds (checked after each observed event)."""

    def __init__(self, budget: float | None) -> None:
        super().__init__()
        self.deadline = None if budget is None else time.process_time() + budget

    def after_event(self, sim: Simulation, now: float) -> None:
        super().after_event(sim, now)
        if self.deadline is not None and time.process_time() > self.deadline:
            raise _OutOfBudget


@dataclasses.dataclass
class Timing:
    events: int
    cpu: float
    wall: float
    finished: bool = True

    @property
    def rate(self) -> float:
        return self.events / max(self.cpu, 1e-9)


def timed_run(world: World, strategy: str, incremental: bool, repeat: int = 1, budget: float | None = None) -> Timing:
    """The fastest of ``repeat`` runs (CPU seconds of ``Simulation.run`` only)."""
    best: Timing | None = None
    for _ in range(repeat):
        sim = Simulation(world, STRATEGIES[strategy], incremental=incremental)
        recorder = _BudgetRecorder(budget)
        start, start_wall = time.process_time(), time.perf_counter()
        finished = True
        try:
            sim.run(recorder)
        except _OutOfBudget:
            finished = False
        timing = Timing(sim.clock.events_run, time.process_time() - start, time.perf_counter() - start_wall, finished)
        if best is None or timing.cpu < best.cpu:
            best = timing
    assert best is not None
    return best


def bench_kernel(rounds: int = 200_000) -> None:
    misc = MiscController({"tdx": 63})
    path = "kubepods.slice/kubepods-burstable.slice/pod-a"
    misc.ensure_cgroup(path)
    start = time.process_time()
    for _ in range(rounds):
        misc.try_charge(path, "tdx")
        misc.uncharge(path, "tdx")
    elapsed = time.process_time() - start
    print(f"kernel: {2 * rounds / elapsed:,.0f} charge+uncharge ops/s (3-level cgroup path)")
    for i in range(40):
        misc.ensure_cgroup(f"machine.slice/vm-{i}")
    start = time.process_time()
    renders = 2_000
    for _ in range(renders):
        misc.render()
    elapsed = time.process_time() - start
    print(f"kernel: {renders / elapsed:,.0f} full renders/s ({len(misc.render())} files each)")


def _row(label: str, strategy: str, fast: Timing, reference: Timing) -> str:
    return (
        f"{label:<18} {strategy:<28} {fast.events:>8} {fast.cpu:>8.3f} {fast.rate:>10,.0f} "
        f"{reference.cpu:>8.3f} {reference.rate:>10,.0f} {fast.rate / max(reference.rate, 1e-9):>6.1f}x"
    )


def bench_scenarios(names: list[str], repeat: int) -> None:
    print(
        f"\n{'scenario':<18} {'strategy':<28} {'events':>8} {'cpu s':>8} {'events/s':>10} "
        f"{'ref cpu':>8} {'ref ev/s':>10} {'ratio':>7}"
    )
    fast_total = Timing(0, 0.0, 0.0)
    reference_total = Timing(0, 0.0, 0.0)
    for name in names:
        world = load_scenario(name).world
        for strategy in STRATEGIES:
            fast = timed_run(world, strategy, True, repeat)
            reference = timed_run(world, strategy, False, repeat)
            for total, timing in ((fast_total, fast), (reference_total, reference)):
                total.events += timing.events
                total.cpu += timing.cpu
                total.wall += timing.wall
            print(_row(name, strategy, fast, reference), flush=True)
    print(_row("all", "", fast_total, reference_total))
    print(f"{'':<18} {'(wall s: engine / reference)':<28} {fast_total.wall:>17.3f} {reference_total.wall:>19.3f}")


def bench_fleet(path: Path, budget: float) -> None:
    scenario = load_scenario(str(path))
    world = scenario.world
    print(f"\nfleet: {scenario.name}: {len(world.nodes)} nodes, {len(world.arrivals)} guests, {world.duration:g} s")
    print(
        f"{'strategy':<28} {'events':>8} {'cpu s':>8} {'wall s':>8} {'events/s':>10} "
        f"{'ref ev/s':>10} {'ref projected s':>16} {'ratio':>7}"
    )
    for strategy in STRATEGIES:
        fast = timed_run(world, strategy, True)
        reference = timed_run(world, strategy, False, budget=budget)
        projected = fast.events / max(reference.rate, 1e-9)
        note = "" if reference.finished else f"  (reference: {reference.events} events in {reference.cpu:.1f} s)"
        print(
            f"{strategy:<28} {fast.events:>8} {fast.cpu:>8.2f} {fast.wall:>8.2f} {fast.rate:>10,.0f} "
            f"{reference.rate:>10,.0f} {projected:>16,.0f} {fast.rate / max(reference.rate, 1e-9):>6.0f}x{note}",
            flush=True,
        )


def _noop() -> None:
    pass


def _clock_alone(events: int) -> float:
    """CPU seconds the calendar takes to run ``events`` callbacks that do nothing (one per instant,
    each followed by an ``after_each`` that does nothing): the event loop's own cost."""
    clock = VirtualClock()
    for i in range(events):
        clock.at(i * 1e-3, _noop)
    start = time.process_time()
    clock.run(float(events), lambda now: None)
    return time.process_time() - start


def bench_breakdown(names: list[str], repeat: int) -> None:
    """Where a run's time goes, every pair: the event loop alone, the model without the report
    (``Simulation.run(None)``) and the model with it (what ``teesim run`` does)."""
    events = 0
    loop = bare = full = 0.0
    for name in names:
        world = load_scenario(name).world
        for strategy in STRATEGIES.values():
            best_bare = best_full = float("inf")
            for _ in range(repeat):
                sim = Simulation(world, strategy)
                start = time.process_time()
                sim.run(None)
                best_bare = min(best_bare, time.process_time() - start)
                sim = Simulation(world, strategy)
                start = time.process_time()
                sim.run(MetricsRecorder())
                best_full = min(best_full, time.process_time() - start)
            events += sim.clock.events_run
            bare, full = bare + best_bare, full + best_full
            loop += min(_clock_alone(sim.clock.events_run) for _ in range(repeat))
    print(f"\nwhere the time goes, every pair ({events} events):")
    for label, cpu in (
        ("event loop alone (no-op callbacks)", loop),
        ("model without the report", bare),
        ("model with the report (teesim run)", full),
    ):
        print(f"  {label:<38} {cpu:>7.3f} cpu s {events / max(cpu, 1e-9):>12,.0f} events/s {cpu / full:>6.0%}")


# Run inside the exported tree: only APIs the simulator has had since its first version.
_GIT_BASELINE_SCRIPT = """
import json, sys, time
from teesim.report.metrics import MetricsRecorder
from teesim.strategies import STRATEGIES
try:
    from teesim.sim.scenario import load_scenario
    from teesim.sim.simulation import Simulation
except ImportError:  # a commit before the engine's rooms (issue 19): their old homes
    from teesim.report.scenario import load_scenario
    from teesim.strategies.simulation import Simulation
out = {}
for name in sys.argv[2:]:
    try:
        world = load_scenario(name).world
    except Exception:  # a scenario that did not exist yet at that commit
        continue
    for strategy in STRATEGIES.values():
        best = None
        for _ in range(int(sys.argv[1])):
            sim = Simulation(world, strategy)
            start = time.process_time()
            sim.run(MetricsRecorder())
            cpu = time.process_time() - start
            best = cpu if best is None else min(best, cpu)
        out[name + "/" + strategy.name] = [sim.clock.events_run, best]
print(json.dumps(out))
"""


def bench_git_baseline(ref: str, names: list[str], repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="teesim-baseline-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(_export(ref, tmp))}
        result = subprocess.run(
            [sys.executable, "-c", _GIT_BASELINE_SCRIPT, str(repeat), *names], env=env, check=True, capture_output=True
        )
    old = json.loads(result.stdout)
    print(f"\ngit baseline {ref}: the code as committed there, on its own model (its scenarios and strategies)")
    print(
        f"{'scenario/strategy':<48} {'events':>8} {'cpu s':>8} {'events/s':>10} "
        f"{'now events':>10} {'now ev/s':>10} {'ratio':>7}"
    )
    old_events = old_cpu = now_events = now_cpu = 0.0
    for key, (events, cpu) in old.items():
        name, strategy = key.split("/", 1)
        now = timed_run(load_scenario(name).world, strategy, True, repeat) if strategy in STRATEGIES else None
        old_events, old_cpu = old_events + events, old_cpu + cpu
        if now is not None:
            now_events, now_cpu = now_events + now.events, now_cpu + now.cpu
        rate_now = (
            f"{now.events:>10} {now.rate:>10,.0f} {now.rate / (events / cpu):>6.1f}x" if now else f"{'-':>10} {'-':>7}"
        )
        print(f"{key:<48} {events:>8} {cpu:>8.3f} {events / cpu:>10,.0f} {rate_now}")
    print(
        f"{'all':<48} {int(old_events):>8} {old_cpu:>8.3f} {old_events / old_cpu:>10,.0f} "
        f"{int(now_events):>10} {now_events / now_cpu:>10,.0f} {(now_events / now_cpu) / (old_events / old_cpu):>6.1f}x"
    )


_SWEEP_SCRIPT = r"""
import subprocess, sys, tempfile
from pathlib import Path
try:
    from teesim.sim.scenario import bundled_scenarios
except ImportError:  # a commit before the engine's rooms (issue 19)
    from teesim.report.scenario import bundled_scenarios
seeds, workers = sys.argv[1], sys.argv[2]
# What a user runs: teesim sweep of every bundled scenario on the process pool; sweep.json to stdout.
with tempfile.TemporaryDirectory() as out:
    subprocess.run([sys.executable, "-c", "import sys; from teesim.cli import main; sys.exit(main())",
                    "sweep", *sorted(bundled_scenarios()), "--seeds", seeds, "--workers", workers,
                    "--quiet", "--out", out], check=True, capture_output=True)
    print((Path(out) / "sweep.json").read_text())
"""


def _sweep_run(simulator: Path, native: str, first: int, last: int, workers: int) -> dict:
    """The whole sweep (every bundled scenario and strategy, seeds first..last) as ``teesim sweep``
    runs it on ``workers`` processes, from the simulator at ``simulator``: its wall time, the CPU of
    every process it started, its events and the build that ran (``native``: TEESIM_NATIVE)."""
    env = {**os.environ, "PYTHONPATH": str(simulator), "TEESIM_NATIVE": native}
    cpu_before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", _SWEEP_SCRIPT, f"{first}-{last}", str(workers)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    wall, cpu_after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(result.stdout)
    return {
        "runs": len(report["runs"]),
        "events": sum(r["metrics"]["events"] for r in report["runs"]),
        "wall_s": wall,
        "cpu_s": (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime),
        "build": report["_runtime"].get("build", {"build": "source", "reason": "before the native build"}),
    }


def _export(ref: str, tmp: str) -> Path:
    """The simulator (and the module_utils it imports) as committed at ``ref``, under ``tmp``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "simulator", "plugins/module_utils"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    return Path(tmp) / "simulator"


def bench_sweep(
    ref: str | None, first: int, last: int, target_s: float = 60.0, workers: int = 2, repeat: int = 1
) -> None:
    """The sweep users wait for (issue 19's speed target: 30 seeds within 60 s on two cores): ``teesim
    sweep`` on the process pool, this tree's native build (teesim._native), this tree's source and
    ``ref`` as committed (its source: an export has no native build).

    They run alternately ``repeat`` times so that all meet the same load on a shared machine; the
    least wall time of each counts (a busy neighbour only adds)."""
    here = ROOT / "simulator"
    with tempfile.TemporaryDirectory(prefix="teesim-sweep-") as tmp:
        # "" lets teesim choose: the native build when it is fresh, else the source (said below the table).
        trees = [("this tree, native", here, ""), ("this tree, source", here, "0")]
        trees += [(f"git {ref}, source", _export(ref, tmp), "0")] if ref else []
        best: dict[str, dict] = {}
        load_before, started = os.getloadavg(), time.perf_counter()
        for _ in range(max(repeat, 1)):
            for label, simulator, native in trees:
                row = _sweep_run(simulator, native, first, last, workers)
                if label not in best or row["wall_s"] < best[label]["wall_s"]:
                    best[label] = row
        wall, load_after = time.perf_counter() - started, os.getloadavg()
    # The target is for 30 seeds: a shorter sweep is scaled to 30 (runs cost the same on average).
    scale = 30 / (last - first + 1)
    print(f"\nsweep: teesim sweep, every bundled scenario x every strategy x seeds {first}-{last}, {workers} workers")
    print(
        f"best of {max(repeat, 1)} alternating runs; {wall:.0f} s wall in all; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after ({time.strftime('%Y-%m-%d %H:%M')})"
    )
    print(f"{'code':<26} {'runs':>6} {'events':>10} {'wall s':>8} {'cpu s':>8} {'30 seeds':>9} {'target':>7}  x ref")
    reference = best[trees[-1][0]]["wall_s"]
    for label, *_ in trees:
        row = best[label]
        at_30 = row["wall_s"] * scale
        verdict = "met" if at_30 <= target_s else "missed"
        print(
            f"{label:<26} {row['runs']:>6} {row['events']:>10} {row['wall_s']:>8.1f} {row['cpu_s']:>8.1f} "
            f"{at_30:>8.1f}s {verdict:>7}  {row['wall_s'] / reference:.2f}x"
        )
    native_row = best[trees[0][0]]
    if native_row["build"]["build"] != "native":
        print(f"(this tree's native build did not run: {native_row['build']['reason']}; make native)")


_FLEET_SCRIPT = r"""
import json, sys, time
try:
    from teesim.sim.scenario import load_scenario
except ImportError:  # a commit before the engine's rooms (issue 19)
    from teesim.report.scenario import load_scenario
from teesim.report.runner import simulate
from teesim.strategies import STRATEGIES
world = load_scenario(sys.argv[1]).world
try:
    from teesim._native import status
    out = {"_build": status()}
except ImportError:  # a commit before the native build
    out = {"_build": {"build": "source", "reason": "before the native build"}}
for strategy in STRATEGIES:
    started = time.process_time()
    sim, _ = simulate(world, strategy)
    out[strategy] = [time.process_time() - started, sim.clock.events_run]
print(json.dumps(out))
"""


def bench_fleet_trees(path: Path, ref: str | None, target_s: float = 10.0) -> None:
    """Issue 19's other target, the 1,000-node fleet within 10 s of one core per strategy: each strategy
    run once (``teesim run``'s engine and report) by this tree's native build, its source and ``ref``."""
    here = ROOT / "simulator"
    with tempfile.TemporaryDirectory(prefix="teesim-fleet-") as tmp:
        trees = [("native", here, ""), ("source", here, "0")]
        trees += [(f"git {ref}", _export(ref, tmp), "0")] if ref else []
        cpu: dict[str, dict[str, list]] = {}
        for label, simulator, native in trees:
            env = {**os.environ, "PYTHONPATH": str(simulator), "TEESIM_NATIVE": native}
            result = subprocess.run(
                [sys.executable, "-c", _FLEET_SCRIPT, str(path)], env=env, check=True, capture_output=True
            )
            cpu[label] = json.loads(result.stdout)
    print(f"\nfleet: {path.name}, CPU seconds of one run per strategy (target {target_s:g} s of one core)")
    print(f"{'strategy':<28} {'events':>8} " + " ".join(f"{label:>12}" for label, *_ in trees) + "  target")
    builds = {label: cpu[label].pop("_build") for label, *_ in trees}
    for strategy, (native_cpu, events) in cpu["native"].items():
        cells = " ".join(f"{cpu[label].get(strategy, [float('nan')])[0]:>12.2f}" for label, *_ in trees)
        print(f"{strategy:<28} {events:>8} {cells}  {'met' if native_cpu <= target_s else 'missed'}")
    if builds["native"]["build"] != "native":
        print(f"(the native column ran the source: {builds['native']['reason']}; make native)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="bundled names or paths (default: all bundled)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per pair; the fastest counts")
    parser.add_argument("--fleet", type=Path, default=FLEET, help="the fleet scenario (default: %(default)s)")
    parser.add_argument("--no-fleet", action="store_true", help="skip the fleet run")
    parser.add_argument(
        "--baseline-budget", type=float, default=3.0, help="CPU seconds for the reference engine per fleet run"
    )
    parser.add_argument("--git-baseline", metavar="REF", help="also time the simulator as committed at REF")
    parser.add_argument(
        "--sweep-seeds", default="1-30", help="seeds of the sweep part, FIRST-LAST (default: %(default)s)"
    )
    parser.add_argument(
        "--sweep-baseline", default="HEAD~1", help="commit the sweep is compared with (default: %(default)s)"
    )
    parser.add_argument(
        "--sweep-only", action="store_true", help="only issue 19's targets: the sweep and the fleet, three builds"
    )
    parser.add_argument(
        "--sweep-repeat", type=int, default=1, help="alternating runs of the sweep per code; the least CPU counts"
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs; load average {load:.2f} at start")
    names = args.scenarios or sorted(bundled_scenarios())
    first, _, last = args.sweep_seeds.partition("-")
    if args.sweep_only:
        bench_sweep(args.sweep_baseline, int(first), int(last or first), repeat=args.sweep_repeat)
        bench_fleet_trees(args.fleet, args.sweep_baseline)
        return 0
    bench_kernel()
    bench_scenarios(names, max(args.repeat, 1))
    bench_breakdown(names, max(args.repeat, 1))
    if not args.no_fleet:
        bench_fleet(args.fleet, args.baseline_budget)
        bench_fleet_trees(args.fleet, args.sweep_baseline)
    if args.git_baseline:
        bench_git_baseline(args.git_baseline, names, max(args.repeat, 1))
    bench_sweep(args.sweep_baseline, int(first), int(last or first), repeat=args.sweep_repeat)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
