"""Throughput of the teesim model: events per second per bundled scenario and strategy, plus the
kernel model's charge/uncharge and render rates. Prints figures, asserts nothing (``make benchmark``).

Rates are per CPU second of this process (``time.process_time``), so a busy machine slows the wall
clock but not the figure; the wall time is printed alongside.

Usage: python benchmarks/bench_simulator.py [--repeat N] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulator"))

from teesim.kernel.misc import MiscController
from teesim.report.metrics import MetricsRecorder
from teesim.report.scenario import bundled_scenarios, load_scenario
from teesim.strategies import STRATEGIES
from teesim.strategies.simulation import Simulation


def bench_kernel(rounds: int = 200_000) -> None:
    misc = MiscController({"tdx": 63})
    misc.ensure_cgroup("kubepods.slice/kubepods-burstable.slice/pod-a")
    path = "kubepods.slice/kubepods-burstable.slice/pod-a"
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


def bench_scenarios(names: list[str], repeat: int) -> None:
    print(f"{'scenario':<18} {'strategy':<24} {'events':>8} {'cpu s':>8} {'wall s':>8} {'events/s':>10}")
    total_events = 0
    total_time = 0.0
    total_wall = 0.0
    for name in names:
        scenario = load_scenario(name)
        for strategy in STRATEGIES.values():
            best = wall = float("inf")
            events = 0
            for _ in range(repeat):
                sim = Simulation(scenario.world, strategy)
                start, start_wall = time.process_time(), time.perf_counter()
                sim.run(MetricsRecorder())
                best = min(best, time.process_time() - start)
                wall = min(wall, time.perf_counter() - start_wall)
                events = sim.clock.events_run
            total_events += events
            total_time += best
            total_wall += wall
            rate = events / max(best, 1e-9)
            print(f"{name:<18} {strategy.name:<24} {events:>8} {best:>8.3f} {wall:>8.3f} {rate:>10,.0f}")
    rate = total_events / max(total_time, 1e-9)
    print(f"{'all':<18} {'':<24} {total_events:>8} {total_time:>8.3f} {total_wall:>8.3f} {rate:>10,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="bundled names or paths (default: all bundled)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per pair; the fastest counts")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}")
    bench_kernel()
    bench_scenarios(args.scenarios or sorted(bundled_scenarios()), max(args.repeat, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
