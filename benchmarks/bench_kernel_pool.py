"""The kernel pool's race window on a live control plane: from a change of ``misc.current`` to the pool that
kube-scheduler acts on, and the agent's CPU. Prints figures, asserts nothing (not timed by ``make test``).

It runs the real ``tee-key-agent`` process against kube-apiserver v1.37.2 with kube-scheduler (``make k8s``'s
binaries, scripts/kube_control_plane.py) and a teesim host tree (scripts/kernel_pool_live.py), then:

* idle: the agent's CPU over ``--idle`` seconds with nothing changing (one read of the misc files and one pod list
  per interval);
* shrink: an external VM takes a key; the time until the Node's allocatable shows the smaller pool (read through
  the API server every 5 ms, the object the scheduler's informer receives);
* grow: a pod waits for a key; the external VM frees one; the time until kube-scheduler bound the pod (the pool
  the scheduler acts on, its informer and queue included);
* the agent's CPU during those changes.

Usage: python benchmarks/bench_kernel_pool.py [--interval 1.0] [--changes 30] [--idle 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "simulator")]

from kernel_pool_live import AgentNode, wait_for  # noqa: E402
from kube_control_plane import ControlPlane  # noqa: E402


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def shown(name: str, values: list[float]) -> str:
    p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
    return (
        f"{name}: n={len(values)} p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {max(values) * 1000:.0f} ms,"
        f" mean {statistics.fmean(values) * 1000:.0f} ms"
    )


def _refused(node: AgentNode, name: str) -> bool:
    return any(p["metadata"]["name"] == name and p.get("status", {}).get("conditions") for p in node.pods())


def _bound(node: AgentNode, name: str) -> bool:
    return any(p["metadata"]["name"] == name for p in node.bound())


def measure(node: AgentNode, changes: int, capacity: int) -> tuple[list[float], list[float]]:
    shrink, grow = [], []
    node.set_current(capacity - 1)  # one key free
    wait_for(lambda: node.pool() == 1, what="pool 1")
    for index in range(changes):
        node.set_current(capacity)  # an external VM takes the last key
        started = time.monotonic()
        wait_for(lambda: node.pool() == 0, every=0.005, what="pool 0")
        shrink.append(time.monotonic() - started)
        name = f"waiter-{index}"
        node.create_pod(name, "kubevirt")
        wait_for(partial(_refused, node, name), what="the scheduler refused the pod")
        node.set_current(capacity - 1)  # the external VM stops: one key free again
        started = time.monotonic()
        wait_for(partial(_bound, node, name), every=0.005, what="bound")
        grow.append(time.monotonic() - started)
        node.delete_pods()
        wait_for(lambda: not node.pods(), what="pods gone")
    return shrink, grow


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=float, default=1.0, help="the agent's --interval (default 1.0)")
    parser.add_argument("--changes", type=int, default=30, help="changes of each direction")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU measurement")
    args = parser.parse_args()
    capacity = 4
    with tempfile.TemporaryDirectory(prefix="bench-kernel-pool-") as work, ControlPlane(scheduler=True) as plane:
        node = AgentNode(plane, Path(work), capacity=capacity)
        node.start_agent(args.interval)
        wait_for(lambda: node.pool() == capacity, what="first pool")
        time.sleep(2 * args.interval)  # past the first resync
        before, started = node.agent_cpu_seconds(), time.monotonic()
        time.sleep(args.idle)
        idle = (node.agent_cpu_seconds() - before) / (time.monotonic() - started)
        before, started = node.agent_cpu_seconds(), time.monotonic()
        shrink, grow = measure(node, args.changes, capacity)
        busy = (node.agent_cpu_seconds() - before) / (time.monotonic() - started)
        code = node.stop_agent()
    print(f"tee-key-agent --interval {args.interval}, kube-apiserver + kube-scheduler v1.37.2, load {os.getloadavg()}")
    print(shown("misc.current up -> Node allocatable smaller (API)", shrink))
    print(shown("misc.current down -> kube-scheduler bound the waiting pod", grow))
    print(f"agent CPU idle: {100 * idle:.2f} % of a core over {args.idle:.0f} s")
    print(f"agent CPU during changes: {100 * busy:.2f} % of a core")
    print(f"agent exit code on SIGTERM: {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
