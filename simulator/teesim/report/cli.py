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

from teesim.report.render import deterministic_json, format_table, write_json, write_timelines
from teesim.report.runner import progress_bar, run_scenario
from teesim.report.scenario import bundled_scenarios, load_scenario
from teesim.strategies.base import STRATEGIES


def _cmd_run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, seed=args.seed)
    progress = None if args.quiet else progress_bar(sys.stderr)
    report = run_scenario(scenario, args.strategy or None, progress)
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


def _cmd_list(args: argparse.Namespace) -> int:
    for name, path in sorted(bundled_scenarios().items()):
        scenario = load_scenario(str(path))
        print(f"{name:<20} {scenario.description}")
    return 0


def register(subparsers: Any) -> None:
    run = subparsers.add_parser("run", help="run a scenario under every strategy and compare")
    run.add_argument("scenario", help="scenario YAML path or bundled name (see `teesim scenarios`)")
    run.add_argument("--out", help="directory for report.json and timeline-<node>.png")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument(
        "--strategy", action="append", choices=sorted(STRATEGIES), help="only these strategies (repeatable)"
    )
    run.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    run.add_argument("--no-png", action="store_true", help="with --out, skip the PNG timelines")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_cmd_run)
    scenarios = subparsers.add_parser("scenarios", help="list the bundled scenarios")
    scenarios.set_defaults(func=_cmd_list)
