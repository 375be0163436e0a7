"""``teesim grpc``: the reconciling strategy over real sockets and real time.

A real node directory (kernel files written by :mod:`teesim.kernel`), the kubelet of
:mod:`teesim.kubelet.server` in this process, and the device plugin as a separate process
(``python -m teesim.plugins.reconciling``). An external-VM driver starts and stops libvirt guests
that charge the kernel directly; for each change we measure the time from the new ``misc.current``
being on disk to the kubelet's device set reflecting it, and print p50/p99. The plugin's CPU time
(``getrusage`` of its process, read on SIGUSR1) is measured over a quiet window (no change: what a
node pays for polling) and over the changes.

The same harness (:class:`GrpcNode`) backs the end-to-end tests and ``benchmarks/bench_grpc_latency.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teesim._args import integer, seconds, seed
from teesim._collection import KUBEVIRT_TDX, MISC_REPORT_ORDER
from teesim.kernel.backends import NodeWriter, RealDirBackend
from teesim.kernel.node import VENDOR_RESOURCES, Node, NodeSpec
from teesim.kernel.profiles import get_profile
from teesim.kubelet.server import Kubelet

SIMULATOR_DIR = Path(__file__).resolve().parents[1]
PLUGIN_MODULES = {
    "static": "teesim.plugins.static",
    "reconciling": "teesim.plugins.reconciling",
    "unified": "teesim.plugins.unified",
}
EXTERNAL_SLICE = "machine.slice"
PODS_SLICE = "kubepods.slice"
ROOT_CURRENT = "sys/fs/cgroup/misc.current"


class PluginProcess:
    """A device plugin running as its own Python process; always stop it (or use ``with``)."""

    def __init__(
        self,
        kind: str,
        host_root: str | os.PathLike[str],
        *,
        resource_name: str = KUBEVIRT_TDX,
        misc_resource: str = "tdx",
        poll_interval: float = 0.1,
        extra: list[str] | None = None,
    ):
        if kind not in PLUGIN_MODULES:
            raise ValueError(f"unknown plugin {kind!r}; choose one of {', '.join(PLUGIN_MODULES)}")
        self.kind = kind
        self.resource_name = resource_name
        handle, stats_path = tempfile.mkstemp(prefix="plugin-", suffix=".stats.json", dir=os.fspath(host_root))
        os.close(handle)
        os.unlink(stats_path)
        self.stats_path = Path(stats_path)
        env = dict(os.environ)
        # The plugin must import this very checkout, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SIMULATOR_DIR), env.get("PYTHONPATH")]))
        self.args = [
            sys.executable,
            "-m",
            PLUGIN_MODULES[kind],
            "--host-root",
            os.fspath(host_root),
            "--resource-name",
            resource_name,
            "--misc-resource",
            misc_resource,
            "--poll-interval",
            str(poll_interval),
            "--stats-file",
            stats_path,
            *(extra or []),
        ]
        self.output = ""
        self.process = subprocess.Popen(self.args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def __enter__(self) -> PluginProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def alive(self) -> bool:
        return self.process.poll() is None

    def stats(self, timeout: float = 5.0) -> dict[str, Any]:
        """The plugin's CPU time and counters now (SIGUSR1, then its answer in the stats file)."""
        before = self._read_stats()
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self._read_stats()
            if answer is not None and answer != before:
                return answer
            time.sleep(0.005)
        raise TimeoutError(f"{self.kind} plugin did not write {self.stats_path} within {timeout} s")

    def _read_stats(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.stats_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """A crash: SIGKILL, no cleanup, the socket file stays behind."""
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 5.0) -> str:
        """SIGTERM, then SIGKILL after ``timeout``; returns the process output."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        stdout = self.process.stdout
        if stdout is not None and not stdout.closed:
            self.output += stdout.read().decode(errors="replace")
            stdout.close()
        return self.output


class TimedDirBackend(RealDirBackend):
    """A real directory that remembers when each file was last replaced (time.monotonic())."""

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__(root)
        self.written_at: dict[str, float] = {}

    def write(self, relpath: str, data: bytes) -> None:
        super().write(relpath, data)
        self.written_at[relpath] = time.monotonic()


@dataclass
class GrpcNode:
    """A node directory with its kernel model, writer, and in-process kubelet."""

    root: Path
    node: Node
    writer: NodeWriter
    kubelet: Kubelet
    misc_resource: str = "tdx"
    owns_root: bool = False
    _next_guest: int = 0
    guests: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str] | None = None,
        *,
        capacity: int = 8,
        misc_resource: str = "tdx",
        vendor: str | None = None,
        profile: str = "current",
    ) -> GrpcNode:
        """Write the kernel files under ``root`` (a new short /tmp dir by default), start the kubelet."""
        owns = root is None
        path = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp")) if root is None else Path(root)
        # The vendor whose TEE has that misc resource (tee.VENDOR_MISC_RESOURCES); NodeSpec refuses any other.
        vendor = vendor or next((v for v, names in VENDOR_RESOURCES.items() if misc_resource in names), "")
        node = Node(NodeSpec(profile=get_profile(profile), vendor=vendor, capacity={misc_resource: capacity}))
        writer = NodeWriter(TimedDirBackend(path))
        writer.sync(node.files())
        kubelet = Kubelet(path)
        kubelet.start()
        return cls(path, node, writer, kubelet, misc_resource, owns)

    def close(self) -> None:
        self.kubelet.stop()
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> GrpcNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def misc(self):
        assert self.node.misc is not None, "this kernel profile has no misc controller"
        return self.node.misc

    def start_guest(self, slice_name: str = EXTERNAL_SLICE, name: str | None = None) -> str:
        """A guest starts: the kernel charges one key (ChargeError when none is left); returns its id."""
        self._next_guest += 1
        guest = name or f"guest-{self._next_guest}"
        cgroup = self.misc.ensure_cgroup(f"{slice_name}/{guest}")
        try:
            self.misc.try_charge(cgroup, self.misc_resource, 1)
        except OSError:
            self.misc.remove_cgroup(cgroup)
            raise
        self.guests[guest] = cgroup
        self.writer.sync(self.node.files())
        return guest

    def stop_guest(self, guest: str) -> None:
        cgroup = self.guests.pop(guest)
        self.misc.uncharge(cgroup, self.misc_resource, 1)
        self.misc.remove_cgroup(cgroup)
        self.writer.sync(self.node.files())

    def written_at(self, relpath: str) -> float:
        backend = self.writer.backend
        if not isinstance(backend, TimedDirBackend):
            raise TypeError("this node's writer does not time its writes")
        return backend.written_at[relpath]

    def current(self) -> int:
        return self.misc.usage(self.misc_resource)

    def plugin(self, kind: str, **kwargs: Any) -> PluginProcess:
        return PluginProcess(kind, self.root, misc_resource=self.misc_resource, **kwargs)


def healthy_count(kubelet: Kubelet, resource: str) -> int:
    return len(kubelet.snapshot().get(resource, {}).get("healthy", []))


def unhealthy_count(kubelet: Kubelet, resource: str) -> int:
    return len(kubelet.snapshot().get(resource, {}).get("unhealthy", []))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def cpu_between(first: dict[str, Any], second: dict[str, Any]) -> dict[str, float | int]:
    """The plugin's CPU use between two :meth:`PluginProcess.stats` answers."""
    wall = max(second["monotonic"] - first["monotonic"], 1e-9)
    cpu = second["cpu_s"] - first["cpu_s"]
    polls = second.get("polls", 0) - first.get("polls", 0)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 4),
        "cpu_percent": round(100 * cpu / wall, 3),
        "polls": polls,
        "quiet_polls": second.get("quiet_polls", 0) - first.get("quiet_polls", 0),
        "lists": second.get("lists", 0) - first.get("lists", 0),
        "cpu_us_per_poll": round(1e6 * cpu / polls, 1) if polls else float("nan"),
    }


@dataclass
class LatencyResult:
    poll_interval: float
    samples: list[float]
    timeouts: int
    cpu_idle: dict[str, float | int] = field(default_factory=dict)
    cpu_busy: dict[str, float | int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        ms = [s * 1000 for s in self.samples]
        return {
            "poll_interval_ms": self.poll_interval * 1000,
            "changes": len(self.samples) + self.timeouts,
            "timeouts": self.timeouts,
            "p50_ms": round(percentile(ms, 50), 2) if ms else float("nan"),
            "p99_ms": round(percentile(ms, 99), 2) if ms else float("nan"),
            "min_ms": round(min(ms), 2) if ms else float("nan"),
            "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
            "max_ms": round(max(ms), 2) if ms else float("nan"),
            "plugin_cpu_idle": self.cpu_idle,
            "plugin_cpu_busy": self.cpu_busy,
        }


def _time_changes(
    node: GrpcNode, changes: int, poll_interval: float, resource_name: str, timeout: float, seed: int, progress: bool
) -> tuple[list[float], int]:
    """Toggle an external VM ``changes`` times; the latency of each change, and how many were not seen."""
    rng = random.Random(seed)
    samples: list[float] = []
    timeouts = 0
    guest = None
    for i in range(changes):
        if guest is None:
            guest, expected = node.start_guest(), 1
        else:
            node.stop_guest(guest)
            guest, expected = None, 0
        # From the moment the new misc.current is on disk (the writer updates other files of the
        # tree after it, and the plugin may already have reacted by then) ...
        changed_at = node.written_at(ROOT_CURRENT)
        seen = node.kubelet.wait_for(lambda k, e=expected: unhealthy_count(k, resource_name) == e, timeout)
        if seen:
            # ... to the ListAndWatch response that made the kubelet's device set match.
            samples.append(node.kubelet.updated_at - changed_at)
        else:
            timeouts += 1
        if progress:
            print(f"\r  change {i + 1}/{changes}", end="", file=sys.stderr, flush=True)
        time.sleep(rng.uniform(0, poll_interval))
    if guest is not None:
        node.stop_guest(guest)
    if progress:
        print(file=sys.stderr)
    return samples, timeouts


def measure_detection_latency(
    changes: int = 50,
    *,
    capacity: int = 8,
    poll_interval: float = 0.1,
    resource_name: str = KUBEVIRT_TDX,
    misc_resource: str = "tdx",
    timeout: float = 10.0,
    seed: int = 1,
    progress: bool = False,
    idle: float = 0.0,
    extra: list[str] | None = None,
) -> LatencyResult:
    """Toggle an external VM ``changes`` times and time each change until the kubelet reflects it.

    Between changes the driver waits a random fraction of the poll interval, so the changes land
    at uniformly spread phases of the plugin's poll loop, as real VM starts do. With ``idle`` > 0 the
    plugin's CPU time is measured over ``idle`` quiet seconds first (after a second to settle from
    its start-up), then over the changes.
    """
    with GrpcNode.create(capacity=capacity, misc_resource=misc_resource) as node:
        plugin = node.plugin("reconciling", resource_name=resource_name, poll_interval=poll_interval, extra=extra)
        try:
            if not node.kubelet.wait_for(lambda k: healthy_count(k, resource_name) > 0, 30):
                raise RuntimeError(f"the reconciling plugin never registered:\n{plugin.stop()}")
            cpu_idle: dict[str, float | int] = {}
            if idle > 0:
                time.sleep(1.0)
                quiet_start = plugin.stats()
                time.sleep(idle)
                quiet_end = plugin.stats()
                cpu_idle = cpu_between(quiet_start, quiet_end)
            busy_start = plugin.stats()
            samples, timeouts = _time_changes(node, changes, poll_interval, resource_name, timeout, seed, progress)
            cpu_busy = cpu_between(busy_start, plugin.stats())
        finally:
            plugin.stop()
    return LatencyResult(poll_interval, samples, timeouts, cpu_idle, cpu_busy)


def _format_cpu(label: str, cpu: dict[str, float | int]) -> str:
    spent = f"{cpu['cpu_s'] * 1000:.0f} ms in {cpu['wall_s']:.1f} s"
    polls = f"{cpu['polls']} polls of which {cpu['quiet_polls']} quiet, {cpu['lists']} Lists"
    per_poll = f"{cpu['cpu_us_per_poll']} us/poll"
    return f"  plugin CPU {label}: {cpu['cpu_percent']:.2f} % of a core ({spent}, {polls}, {per_poll})"


def format_result(result: LatencyResult) -> str:
    s = result.summary()
    lines = [
        f"reconciling plugin over real sockets, poll interval {s['poll_interval_ms']:.0f} ms: "
        f"{s['changes']} misc.current changes, detection latency p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms "
        f"(min {s['min_ms']} ms, mean {s['mean_ms']} ms, max {s['max_ms']} ms, {s['timeouts']} not seen in time)"
    ]
    if result.cpu_idle:
        lines.append(_format_cpu("with no change", result.cpu_idle))
    if result.cpu_busy:
        lines.append(_format_cpu("during the changes", result.cpu_busy))
    return "\n".join(lines)


def _cmd_grpc(args: argparse.Namespace) -> int:
    intervals = args.poll_interval_list or [0.1]  # each checked by its argparse type (teesim._args)
    summaries = []
    for interval in intervals:
        result = measure_detection_latency(
            args.changes,
            capacity=args.capacity,
            poll_interval=interval,
            resource_name=args.resource_name,
            misc_resource=args.misc_resource,
            seed=args.seed,
            progress=sys.stderr.isatty(),
        )
        summaries.append(result.summary())
        if not args.json:
            print(format_result(result), flush=True)
    if args.json:
        print(json.dumps(summaries, indent=2))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "grpc",
        help="measure the reconciling plugin's detection latency over real kubelet sockets",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--changes", type=integer(1, 100_000), default=40, help="misc.current changes to time")
    parser.add_argument("--capacity", type=integer(2, 4096), default=8, help="misc.capacity of the simulated node")
    parser.add_argument(
        "--poll-interval",
        dest="poll_interval_list",
        type=seconds(60.0),
        action="append",
        help="plugin poll interval in seconds; repeat to compare (default 0.1)",
    )
    parser.add_argument(
        "--resource-name", default=KUBEVIRT_TDX, help="extended resource the plugin advertises (default: %(default)s)"
    )
    parser.add_argument(
        "--misc-resource",
        default="tdx",
        choices=MISC_REPORT_ORDER,
        help="misc cgroup resource the plugin reads and the external VMs charge (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=seed, default=1, help="seed of the random pause between changes (default: %(default)s)"
    )
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON instead of text")
    parser.set_defaults(func=_cmd_grpc)
