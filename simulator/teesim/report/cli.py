"""``teesim run`` and ``teesim scenarios``: compare the strategies on a scenario.

``teesim run SCENARIO`` (a path or a bundled name such as ``quick``) prints a progress bar per strategy
on stderr and the comparison table on stdout; ``--out DIR`` also writes ``report.json`` and one
``timeline-<node>.png`` per node; ``--json`` prints the JSON instead of the table. ``--real-node`` plays one node of
the scenario on a real kubelet and containerd instead (root, a checkout, ``make k8s node upstream``;
:mod:`teesim.report.real_node`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from teesim._args import integer, positive, seed
from teesim.report import real_node
from teesim.report.engines import ENGINES, make_engine
from teesim.report.render import deterministic_json, format_table, write_json, write_timelines
from teesim.report.runner import progress_bar, run_scenario
from teesim.report.sweep import format_sweep, make_tasks, parse_seeds, sweep
from teesim.sim.scenario import bundled_scenarios, load_scenario
from teesim.strategies.base import STRATEGIES


def _cmd_run(args: argparse.Namespace) -> int:
    if args.real_node:
        return _cmd_real_node(args)
    if args.pace is not None or args.node is not None:
        raise ValueError("--pace and --node go with --real-node")
    scenario = load_scenario(args.scenario, seed=args.seed)
    progress = None if args.quiet else progress_bar(sys.stderr)
    placers = None
    if args.kube_scheduler:
        from teesim.sim.kube_scheduler import placers_for

        placers = placers_for(Path(args.kube_scheduler), scenario.name, scenario.seed)
    report = run_scenario(scenario, args.strategy or None, progress, placers=placers)
    if args.json:
        sys.stdout.write(deterministic_json(report))
    else:
        sys.stdout.write(format_table(report))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_json(report, out / "report.json")
        pngs = [] if args.no_png else write_timelines(report, out)
        print(f"wrote {out / 'report.json'}" + "".join(f", {p.name}" for p in pngs), file=sys.stderr)
    return 0


def _cmd_real_node(args: argparse.Namespace) -> int:
    """One node of the scenario on a real node, paced, beside the model's run of the same node."""
    if args.out or args.kube_scheduler:
        raise real_node.RealNodeRefused("--real-node prints its table (or --json): no --out, no --kube-scheduler")
    scenario = load_scenario(args.scenario, seed=args.seed)
    plan = real_node.plan(scenario, args.node, args.strategy)
    why = real_node.unavailable(plan)
    if why:
        raise real_node.RealNodeRefused(why)
    pace = args.pace or plan.default_pace()
    model = real_node.model_outcome(plan)

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    say(f"{scenario.name}, node {plan.node.name}, {plan.strategy.name}: {len(plan.arrivals)} guests, pace {pace:g}")
    # SIGTERM (a CI job's timeout, kill) stops the run as Ctrl-C does: through the cleanup, not around it.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        real = real_node.play(plan, pace, say)
    except KeyboardInterrupt:
        print("teesim run: stopped; the real node and its control plane were stopped and removed", file=sys.stderr)
        return 130
    except RuntimeError as failed:  # a start that failed: the component's own words and log tail
        print(f"teesim run: error: the real node failed: {failed}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        sys.stdout.write(deterministic_json({"real": real, "model": model, "pace": pace}))
    else:
        sys.stdout.write(real_node.format_outcomes(plan, pace, real, model))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    tasks = make_tasks(args.scenario, parse_seeds(args.seeds), args.strategy or None)
    engine, workers = make_engine(args.engine, args.workers, args.address)
    if not args.quiet:
        print(f"{len(tasks)} runs on {args.engine} ({workers} workers)...", file=sys.stderr)
    report = sweep(tasks, engine, args.engine, workers)
    sys.stdout.write(deterministic_json(report) if args.json else format_sweep(report))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_json(report, out / "sweep.json")
        (out / "sweep.txt").write_text(format_sweep(report), encoding="utf-8")
        print(f"wrote {out / 'sweep.json'}, {out / 'sweep.txt'}", file=sys.stderr)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    for name, path in sorted(bundled_scenarios().items()):
        scenario = load_scenario(str(path))
        print(f"{name:<20} {scenario.description}")
    return 0


def register(subparsers: Any) -> None:
    run = subparsers.add_parser("run", help="run a scenario under every strategy and compare")
    run.add_argument("scenario", help="scenario YAML path or bundled name (see `teesim scenarios`)")
    run.add_argument("--out", help="directory for report.json and timeline-<node>.png")
    run.add_argument("--seed", type=seed, help="override the scenario's seed")
    run.add_argument(
        "--strategy", action="append", choices=sorted(STRATEGIES), help="only these strategies (repeatable)"
    )
    run.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    run.add_argument("--no-png", action="store_true", help="with --out, skip the PNG timelines")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--kube-scheduler",
        metavar="KUBECONFIG",
        help="let the kube-scheduler of this cluster bind the pods (a private control plane: the scenario's nodes "
        "become its Nodes; docs/simulator.md)",
    )
    real = run.add_argument_group(
        "a real node (root, a checkout, make k8s node upstream; docs/simulator.md)",
        "play one node of the scenario on a real kubelet v1.37.2 and containerd, paced, beside the model's run",
    )
    real.add_argument(
        "--real-node",
        action="store_true",
        help="run one node on a real node: strategies " + ", ".join(real_node.SUPPORTED) + " (default double-pool)",
    )
    real.add_argument(
        "--pace",
        type=positive(1e6),
        help="scenario seconds per wall second (default: the scenario in about 3 minutes)",
    )
    real.add_argument("--node", help="the scenario's node to run (default: its first)")
    run.set_defaults(func=_cmd_run)
    _register_sweep(subparsers)
    scenarios = subparsers.add_parser("scenarios", help="list the bundled scenarios")
    scenarios.set_defaults(func=_cmd_list)


def _register_sweep(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run scenarios x seeds x strategies in parallel; means and 95%% confidence intervals over seeds",
    )
    parser.add_argument("scenario", nargs="+", help="scenario YAML paths or bundled names")
    parser.add_argument("--seeds", default="1-10", help="seeds: 1-10, 3,5,8 or 1-3,9 (default: %(default)s)")
    parser.add_argument(
        "--strategy", action="append", choices=sorted(STRATEGIES), help="only these strategies (repeatable)"
    )
    parser.add_argument(
        "--engine", choices=ENGINES, default="process", help="where the runs go (default: %(default)s, this machine)"
    )
    parser.add_argument(
        "--workers", type=integer(1, 4096), help="processes or CPUs to use (default: the CPUs available here)"
    )
    parser.add_argument("--address", help="dask: the scheduler to use, tcp://host:8786 (default: start a local one)")
    parser.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    parser.add_argument("--out", help="directory for sweep.json and sweep.txt")
    parser.add_argument("--quiet", action="store_true", help="nothing on stderr")
    parser.set_defaults(func=_cmd_sweep)
