"""``teesim serve SCENARIO --root DIR``: a simulated TEE node in real time for anyone's device plugin.

The run, in order (the plugin-author contract is in ``docs/device-plugin.md``):

1. the node's host tree is written under ``DIR`` (``sys/fs/cgroup/misc.*``, ``sys/module``, ``proc``,
   ``dev`` ...; what serve created is recorded in ``DIR/teesim-serve.created.json``, and only that is ever
   removed: :mod:`teesim.serve.root`) and the kubelet listens on ``DIR/var/lib/kubelet/device-plugins/kubelet.sock`` and
   ``DIR/var/lib/kubelet/pod-resources/kubelet.sock``;
2. readiness: ``DIR/teesim-serve.json`` (``"state": "ready"``, the paths and the environment below) is
   written atomically and ``teesim serve: ready {...}`` (the same JSON on one line) is printed on stdout;
3. each ``--plugin COMMAND`` starts with ``TEESIM_HOST_ROOT``, ``TEESIM_DEVICE_PLUGIN_DIR``,
   ``TEESIM_KUBELET_SOCKET``, ``TEESIM_POD_RESOURCES_SOCKET``, ``TEESIM_PODS_URL`` and
   ``TEESIM_RESOURCES`` (``misc=resource`` pairs the scenario's consumers request from plugins) in its
   environment (``$TEESIM_...`` in its arguments is replaced too, no shell involved);
4. serve waits (``--registration-timeout``) until a plugin registered every resource in
   ``TEESIM_RESOURCES``, then plays the scenario in real time: virtual second 0 is that moment;
5. at the end the plugins get SIGTERM, and the report (the external plugin's column beside the
   built-in strategies' for the same scenario and seed) is printed, and written to ``--report DIR``
   (``report.json``, ``timeline-<node>.png``, ``plugin-<n>.log``); ``DIR/teesim-serve.json`` says
   ``"state": "done"`` with the exit status: 1 when a ``--fail-on`` condition holds, 0 otherwise
   (2: the scenario or the command line is wrong). SIGTERM or SIGINT: ``"state": "stopped"`` with the
   signal's name, exit 128 + its number.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from string import Template
from typing import Any, TextIO

from teesim._args import seconds, seed
from teesim._collection import collection_module
from teesim.kernel.backends import NodeWriter, RealDirBackend
from teesim.kernel.node import Node
from teesim.kubelet import sockets
from teesim.kubelet.server import Kubelet
from teesim.report.metrics import MetricsRecorder, percentile
from teesim.report.render import format_table, write_timelines
from teesim.report.runner import run_scenario, scenario_header
from teesim.serve.engine import ServeSimulation
from teesim.serve.root import prepare_root
from teesim.serve.strategy import SERVED, check_servable
from teesim.sim.scenario import Scenario, load_scenario
from teesim.strategies.base import STRATEGIES

emit_json = collection_module("plugins.module_utils.common.emit.json")

READY_FILE = "teesim-serve.json"
READY_LINE = "teesim serve: ready "
NOT_MEASURED = (
    "not measured for external plugins: teesim cannot tell which misc.current reading a plugin's "
    "device list was computed from (see docs/simulator-grpc.md)"
)


def _outside(metrics: dict[str, Any]) -> str | None:
    outside = metrics["failed_outside_race_window"]
    total = sum(outside.values())
    if not total:
        return None
    detail = ", ".join(f"{c} {n}" for c, n in sorted(outside.items()) if n)
    return f"{total} failed launch(es) outside the race window ({detail})"


def _failed(metrics: dict[str, Any]) -> str | None:
    n = metrics["failed_launches"]
    return f"{n} failed launch(es) (ENOSPC or EBUSY)" if n else None


def _admission(metrics: dict[str, Any]) -> str | None:
    n = metrics["admission_failures"]
    return f"{n} admission failure(s)" if n else None


def _pending(metrics: dict[str, Any]) -> str | None:
    n = metrics["pending_at_end"]
    return f"{n} pod(s) still pending at the end" if n else None


def _unregistered(metrics: dict[str, Any], serve: dict[str, Any]) -> str | None:
    missing = sorted(r for r, at in serve["registered_at_s"].items() if at is None)
    return f"never registered: {', '.join(missing)}" if missing else None


def _plugin_exit(metrics: dict[str, Any], serve: dict[str, Any]) -> str | None:
    early = [p for p in serve["plugins"] if p["exited_early"]]
    return "; ".join(f"{p['command']} exited with {p['exit_status']} before the end" for p in early) or None


FAIL_ON = {
    "outside-race-window": lambda m, s: _outside(m),
    "failed-launches": lambda m, s: _failed(m),
    "admission-failures": lambda m, s: _admission(m),
    "pending-at-end": lambda m, s: _pending(m),
    "not-registered": _unregistered,
    "plugin-exit": _plugin_exit,
}


def fail_on(conditions: list[str], entry: dict[str, Any]) -> list[str]:
    """The ``--fail-on`` conditions that hold for the served run, each with what made it hold."""
    held = []
    for name in conditions:
        why = FAIL_ON[name](entry["metrics"], entry["serve"])
        if why:
            held.append(f"{name}: {why}")
    return held


def write_state(root: Path, state: dict[str, Any]) -> Path:
    """``ROOT/teesim-serve.json``, replaced atomically (a reader never sees half of it)."""
    path = root / READY_FILE
    tmp = root / f".{READY_FILE}.tmp"
    tmp.write_text(emit_json.dumps(state, "teesim-serve.json"), encoding="utf-8")
    os.replace(tmp, path)
    return path


def plugin_env(kubelet: Kubelet, resources: list[tuple[str, str]]) -> dict[str, str]:
    """What a plugin is told about the node (also in the readiness file)."""
    return {
        "TEESIM_HOST_ROOT": str(kubelet.root.resolve()),
        "TEESIM_DEVICE_PLUGIN_DIR": str(kubelet.plugin_dir.resolve()),
        "TEESIM_KUBELET_SOCKET": str(kubelet.registration_socket.resolve()),
        "TEESIM_POD_RESOURCES_SOCKET": str(kubelet.pod_resources_socket.resolve()),
        "TEESIM_PODS_URL": kubelet.pods_url or "",
        "TEESIM_RESOURCES": ",".join(f"{m}={n}" for m, n in resources),
    }


def split_command(command: str) -> list[str]:
    """A ``--plugin`` command split as a shell would split it (no shell runs it); refused when empty or
    unbalanced, before anything starts."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"--plugin {command!r}: {exc}") from None
    if not argv:
        raise ValueError("--plugin '': empty command")
    return argv


class Plugins:
    """The ``--plugin`` processes: started with the node's environment, stopped at the end."""

    def __init__(self, commands: list[str], env: dict[str, str], logs: Path | None):
        for command in commands:
            split_command(command)
        self.commands = commands
        self.env = env
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen, TextIO | None]] = []

    def start(self) -> None:
        full_env = {**os.environ, **self.env}
        for index, command in enumerate(self.commands, 1):
            argv = [Template(arg).safe_substitute(self.env) for arg in split_command(command)]
            log = open(self.logs / f"plugin-{index}.log", "w", encoding="utf-8") if self.logs else None  # noqa: SIM115
            # Without --report the plugin writes to serve's stderr (file descriptor 2): stdout stays the
            # ready line and the table.
            out = log if log is not None else 2
            try:
                proc = subprocess.Popen(
                    argv, env=full_env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            except OSError as exc:
                if log is not None:
                    log.close()
                raise ValueError(f"--plugin {command!r}: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
            self.procs.append((command, proc, log))

    def stop(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """SIGTERM, SIGKILL after ``timeout``; what each did."""
        done = []
        for command, proc, log in self.procs:
            early = proc.poll() is not None
            if not early:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=timeout)
            if log is not None:
                log.close()
            done.append({"command": command, "exit_status": proc.returncode, "exited_early": early})
        return done


def _wait_registration(kubelet: Kubelet, resources: list[str], timeout: float) -> dict[str, float | None]:
    """When (seconds after readiness) each resource was registered with a device list; None: never."""
    start = time.monotonic()
    seen: dict[str, float | None] = dict.fromkeys(resources)

    def check(k: Kubelet) -> bool:
        snapshot = k.snapshot()
        for name in resources:
            if seen[name] is None and name in snapshot and k.connected(name):
                seen[name] = round(time.monotonic() - start, 3)
        return all(v is not None for v in seen.values())

    kubelet.wait_for(check, timeout)
    return seen


def _served_entry(sim: ServeSimulation, recorder: MetricsRecorder, serve: dict[str, Any]) -> dict[str, Any]:
    metrics = recorder.summary(sim)
    changes = metrics["detection"]["changes"]
    metrics["detection"] = {
        "changes": changes,
        "detected": None,
        "undetected": None,
        "p50_s": None,
        "p99_s": None,
        "max_s": None,
        "not_measured": NOT_MEASURED,
    }
    lag = sim.paced.lag
    serve["lag_s"] = {
        "instants": len(lag),
        "p50": round(percentile(lag, 50) or 0.0, 4) if lag else None,
        "p99": round(percentile(lag, 99) or 0.0, 4) if lag else None,
        "max": round(max(lag), 4) if lag else None,
    }
    serve["device_list_wakeups"] = sim.paced.wakeups
    return {
        "summary": sim.strategy.summary,
        "metrics": metrics,
        "failures": recorder.failure_data(),
        "timeline": recorder.timeline_data(),
        "serve": serve,
    }


def serve(
    scenario: Scenario,
    root: Path,
    *,
    plugins: list[str],
    report_dir: Path | None,
    registration_timeout: float,
    say: TextIO | None = None,
) -> dict[str, Any]:
    """Run ``scenario`` against the plugins; returns the served run's report entry (the ready line goes to
    ``say``, stdout by default)."""
    say = say or sys.stdout
    check_servable(scenario)
    (spec,) = scenario.world.nodes
    tops = {path.split("/", 1)[0] for path in [*Node(spec).files(), sockets.KUBELET_DIR]}
    prepare_root(root, sorted(tops))
    kubelet = Kubelet(root, rng=random.Random(f"{scenario.seed}/{spec.name}/devices"))
    sim = ServeSimulation(scenario, kubelet, NodeWriter(RealDirBackend(root)))
    wanted = sim.plugin_resources()
    kubelet.start()
    runner = Plugins(plugins, plugin_env(kubelet, wanted), report_dir)
    try:
        state = {"state": "ready", "scenario": scenario.name, "seed": scenario.seed, "env": runner.env}
        write_state(root, state)
        say.write(READY_LINE + emit_json.dumps(state, "ready line", indent=None))
        say.flush()
        runner.start()
        registered = _wait_registration(kubelet, sorted({name for _, name in wanted}), registration_timeout)
        for name, at in sorted(registered.items()):
            if at is None:
                print(f"teesim serve: no plugin registered {name} within {registration_timeout:g} s", file=sys.stderr)
        recorder = MetricsRecorder()
        started = time.monotonic()
        sim.run(recorder)
        wall = time.monotonic() - started
    except Stopped as exc:
        # Whoever waits on the readiness file learns that the run is over, and why.
        write_state(root, {"state": "stopped", "signal": exc.name})
        raise
    except BaseException as exc:
        write_state(root, {"state": "failed", "error": str(exc) or type(exc).__name__})
        raise
    finally:
        done = runner.stop()
        kubelet.stop()
    return _served_entry(
        sim,
        recorder,
        {"root": str(root), "registered_at_s": registered, "plugins": done, "wall_s": round(wall, 3)},
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, seed=args.seed)
    check_servable(scenario)
    root = Path(args.root)
    sockets.check_socket_path(sockets.registration_socket(sockets.kubelet_dir(root.resolve())))
    for command in args.plugin or []:
        split_command(command)
    report_dir = Path(args.report) if args.report else None
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
    previous = {signum: signal.signal(signum, _stop) for signum in STOP_SIGNALS}
    try:
        entry = serve(
            scenario,
            root,
            plugins=args.plugin or [],
            report_dir=report_dir,
            registration_timeout=args.registration_timeout,
        )
    except Stopped as exc:
        print(f"teesim serve: stopped by {exc.name}; the plugins were stopped and the sockets removed", file=sys.stderr)
        return 128 + exc.signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    compare = [] if args.compare == ["none"] else (args.compare or list(STRATEGIES))
    report = run_scenario(scenario, compare) if compare else {**scenario_header(scenario), "strategies": {}}
    report["strategies"] = {SERVED: entry, **report["strategies"]}
    sys.stdout.write(format_table(report))
    held = fail_on(args.fail_on or [], entry)
    for line in held:
        print(f"teesim serve: --fail-on {line}", file=sys.stderr)
    status = 1 if held else 0
    if report_dir is not None:
        (report_dir / "report.json").write_text(emit_json.dumps(report, "report.json", indent=1), encoding="utf-8")
        pngs = [] if args.no_png else write_timelines(report, report_dir)
        print(f"wrote {report_dir / 'report.json'}" + "".join(f", {p.name}" for p in pngs), file=sys.stderr)
    write_state(root, {"state": "done", "exit_status": status, "fail_on": held, "report": args.report})
    return status


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """SIGTERM or SIGINT during the run (a CI job cancelled, Ctrl-C): not a failure of the run. The state
    file says ``{"state": "stopped", "signal": "SIGTERM"}`` and serve exits 128 + the signal's number,
    as a shell reports a process a signal ended."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")


def _stop(signum: int, frame: object) -> None:
    # Unwind so that the plugins are stopped and the sockets removed.
    raise Stopped(signum)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run one scenario node in real time for external device plugins (any language); report and gate",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("scenario", help="scenario YAML path or bundled name (e.g. serve-double-pool-tdx)")
    parser.add_argument("--root", required=True, help="node root: host tree and var/lib/kubelet (keep it short)")
    parser.add_argument("--seed", type=seed, help="override the scenario's seed")
    parser.add_argument(
        "--plugin",
        action="append",
        metavar="COMMAND",
        help="start this plugin with the node's TEESIM_* environment and stop it at the end (repeatable)",
    )
    parser.add_argument(
        "--fail-on",
        action="append",
        choices=sorted(FAIL_ON),
        help="exit 1 when this holds for the external plugin's run (repeatable)",
    )
    parser.add_argument("--report", help="directory for report.json, timeline-<node>.png and plugin logs")
    parser.add_argument(
        "--compare",
        action="append",
        choices=[*sorted(STRATEGIES), "none"],
        help="built-in strategies to put beside the plugin (repeatable; default: all; none: no comparison)",
    )
    parser.add_argument(
        "--registration-timeout",
        type=seconds(),
        default=30.0,
        help="seconds to wait for plugins to register before the scenario starts (default: %(default)s)",
    )
    parser.add_argument("--no-png", action="store_true", help="with --report, skip the PNG timeline")
    parser.set_defaults(func=_cmd_serve)
