"""The correctness guard for speed work on the simulator: a change that only makes it faster leaves every
result as it was.

Runs every bundled scenario under every strategy for ``--seeds`` (default 1-5) and writes, per run, the
metrics (``teesim sweep``'s, less any ``_runtime`` field) and a SHA-256 of the metrics, the timelines (seeds
1-2) and the failure records. ``--against FILE`` compares with a file written before the change and exits 1
on any difference. Prints the CPU seconds it took (not a benchmark: use ``bench_simulator.py``).

Usage: python benchmarks/same_results.py OUT.json [--against BEFORE.json] [--seeds 1-5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulator"))

from teesim.report.runner import simulate
from teesim.report.sweep import parse_seeds
from teesim.sim.scenario import bundled_scenarios, load_scenario
from teesim.strategies import STRATEGIES


def results(seeds: list[int]) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, path in sorted(bundled_scenarios().items()):
        for seed in seeds:
            world = load_scenario(str(path), seed).world
            for strategy in STRATEGIES:
                sim, recorder = simulate(world, strategy)
                metrics = {k: v for k, v in recorder.summary(sim).items() if not k.startswith("_runtime")}
                timelines = recorder.timeline_data() if seed <= 2 else {}
                blob = json.dumps([metrics, timelines, recorder.failure_data()], sort_keys=True)
                out[f"{name}/{seed}/{strategy}"] = [metrics, hashlib.sha256(blob.encode()).hexdigest()]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--against", type=Path, help="results written before the change")
    parser.add_argument("--seeds", default="1-5")
    args = parser.parse_args()
    started = time.process_time()
    out = results(parse_seeds(args.seeds))
    print(f"{len(out)} runs, {time.process_time() - started:.1f} CPU s")
    args.out.write_text(json.dumps(out, sort_keys=True, indent=0))
    if args.against is None:
        return 0
    before = json.loads(args.against.read_text())
    differ = sorted(key for key in before.keys() | out.keys() if before.get(key) != out.get(key))
    if differ:
        print(f"DIFFERENT: {len(differ)} runs, first {differ[:10]}")
        return 1
    print(f"identical: {len(out)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
