"""Detection latency and CPU cost of the reconciling device plugin over real kubelet sockets.

A real node directory, the real-socket kubelet, the plugin as its own process; an external-VM
driver changes ``misc.current`` N times (start/stop of a libvirt guest outside Kubernetes) and we
time each change until the kubelet's device set reflects it. Prints p50/p99 per poll interval and
the plugin's CPU time (``getrusage`` of its process): over ``--idle`` seconds with no change (what
polling costs a node) and over the changes (one every half poll interval on average: a very busy
node). Asserts nothing. Not run by ``make test``.

``--cpu-load N`` runs N busy processes alongside (the plugin then competes for the CPU with them,
as it does with guests' vCPUs on a full node).

    .venv/bin/python benchmarks/bench_grpc_latency.py [--changes 100] [--poll-interval 0.05 ...] [--cpu-load 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulator"))

from teesim.grpc_run import format_result, measure_detection_latency


def start_cpu_load(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--poll-interval", type=float, action="append", dest="intervals")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of no change to measure polling CPU")
    parser.add_argument("--cpu-load", type=int, default=0, help="busy processes to run alongside")
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    args = parser.parse_args()
    intervals = args.intervals or [0.05, 0.1, 0.5, 1.0]
    hogs = start_cpu_load(args.cpu_load)
    try:
        load = os.getloadavg()[0]
        print(
            f"# {os.cpu_count()} CPUs, load average {load:.2f} at start, {args.cpu_load} busy processes alongside; "
            f"Python {sys.version.split()[0]}",
            flush=True,
        )
        summaries = []
        for interval in intervals:
            result = measure_detection_latency(
                args.changes, capacity=args.capacity, poll_interval=interval, idle=args.idle
            )
            summaries.append(result.summary())
            if not args.json:
                print(format_result(result), flush=True)
        if args.json:
            print(json.dumps(summaries, indent=2))
        print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
