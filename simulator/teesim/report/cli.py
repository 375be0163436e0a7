"""``teesim run`` and ``teesim scenarios``: compare the strategies on a scenario.

``teesim run SCENARIO`` (a path or a bundled name such as ``quick``) prints a progress bar per strategy
on stderr and the comparison table on stdout; ``--out DIR`` also writes ``report.json`` and one
``timeline-<node>.png`` per node; ``--json`` prints the JSON instead of the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from teesim._args import integer, seed
from teesim.report.engines import ENGINES, make_engine
from teesim.report.render import deterministic_json, format_table, write_json, write_timelines
from teesim.report.runner import progress_bar, run_scenario
from teesim.report.sweep import format_sweep, make_tasks, parse_seeds, sweep
from teesim.sim.scenario import bundled_scenarios, load_scenario
from teesim.strategies.base import STRATEGIES


def _cmd_run(args: argparse.Namespace) -> int:
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
