"""Detection latency of the reconciling device plugin over real kubelet sockets.

A real node directory, the real-socket kubelet, the plugin as its own process; an external-VM
driver changes ``misc.current`` N times (start/stop of a libvirt guest outside Kubernetes) and we
time each change until the kubelet's device set reflects it. Prints p50/p99 per poll interval and
asserts nothing. Not run by ``make test``.

    .venv/bin/python benchmarks/bench_grpc_latency.py [--changes 100] [--poll-interval 0.05 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulator"))

from teesim.grpc_run import format_result, measure_detection_latency


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--capacity", type=int, default=16)
    parser.add_argument("--poll-interval", type=float, action="append", dest="intervals")
    args = parser.parse_args()
    intervals = args.intervals or [0.05, 0.1, 0.5, 1.0]
    load = os.getloadavg()[0]
    print(f"# {os.cpu_count()} CPUs, load average {load:.2f} at start; Python {sys.version.split()[0]}")
    for interval in intervals:
        result = measure_detection_latency(args.changes, capacity=args.capacity, poll_interval=interval)
        print(format_result(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
