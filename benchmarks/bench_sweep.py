"""Sweep engines side by side: the same sweep run serially, on the standard library's process pool,
and on a local Dask cluster; plus each engine's start-up and per-task cost (200 runs of one virtual
second). Prints figures, asserts nothing (``make benchmark``).

Wall time is what a sweep is for, so wall time is measured here (the median of ``--repeat`` runs);
the load average is printed alongside because other work on the machine moves it.

``--with-ray`` also runs Ray (``pip install ray``; not a dependency of this project) through a
few-line adapter kept here, to reproduce the measurement that chose Dask.

Usage: python benchmarks/bench_sweep.py [--workers 2] [--seeds 1-10] [--repeat 3] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulator"))

from teesim.report.engines import EngineUnavailable, longest_first, make_engine
from teesim.report.sweep import Engine, SweepTask, make_tasks, parse_seeds, run_task

DEFAULT_SCENARIOS = ["quick", "faults", "tdx-kata-surge"]


def ray_engine(workers: int) -> Engine:
    import ray

    def run(tasks: list[SweepTask]) -> list[dict]:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        try:
            remote = ray.remote(num_cpus=1)(run_task)
            return ray.get([remote.remote(task) for task in longest_first(tasks)])
        finally:
            ray.shutdown()

    return run


def tiny_tasks(template: SweepTask, count: int = 200) -> list[SweepTask]:
    data = dict(template.data)
    data["duration"] = 1
    return [SweepTask("tiny", data, "tiny", seed, "kubevirt-static") for seed in range(count)]


def timed(engine: Engine, tasks: list[SweepTask], repeat: int) -> list[float]:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        results = engine(tasks)
        walls.append(time.perf_counter() - start)
        assert len(results) == len(tasks)
    return walls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", default=DEFAULT_SCENARIOS)
    parser.add_argument("--seeds", default="1-10")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--with-ray", action="store_true", help="also Ray (must be installed)")
    args = parser.parse_args()
    tasks = make_tasks(args.scenarios, parse_seeds(args.seeds))
    print(
        f"{len(tasks)} runs ({', '.join(args.scenarios)} x seeds {args.seeds} x every strategy), "
        f"{args.workers} workers, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
    )
    print(f"{'engine':<10} {'sweep wall s (median)':>22} {'speed-up':>9} {'200 tiny runs s':>16}  all sweep walls")
    serial_median = None
    for name in ("serial", "process", "dask", "ray"):
        try:
            if name == "ray":
                if not args.with_ray:
                    continue
                engine = ray_engine(args.workers)
            else:
                engine = make_engine(name, args.workers)[0]
            walls = timed(engine, tasks, args.repeat)
            tiny = statistics.median(timed(engine, tiny_tasks(tasks[0]), args.repeat))
        except (EngineUnavailable, ImportError) as exc:
            print(f"{name:<10} skipped: {exc}")
            continue
        median = statistics.median(walls)
        serial_median = serial_median or median
        print(
            f"{name:<10} {median:>22.2f} {serial_median / median:>8.2f}x {tiny:>16.2f}  "
            + ", ".join(f"{w:.2f}" for w in walls),
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
