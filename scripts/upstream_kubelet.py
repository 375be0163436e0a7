"""The real kubelet against teesim's kubelet model: the comparisons of scripts/kubelet_comparison.py as tables.

Starts ``make k8s``'s control plane and, per scenario, ``make node``'s node (root: cgroups, a mount namespace,
runc), runs the scenario on it and through teesim's model, and prints one row per step: what differs, or that
nothing does.
Exits 1 when something differs. Without root it says so and exits 0: the other tables of ``make upstream-report``
do not need it. docs/simulator.md, "The real kubelet v1.37.2 against the model", explains every difference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kube_control_plane import ControlPlane
from kube_node import RealNode
from kubelet_comparison import SCENARIOS, Scenario, differences, run_steps


def table(name: str, records: list[dict], scenario: Scenario, note: str) -> str:
    lines = [
        f"### The real kubelet against teesim's kubelet model: {name}" + note,
        "",
        "| step | the real node settled after | what differs (model / real) |",
        "|---|---|---|",
    ]
    for record in records:
        found = differences([record])
        unexplained = set(scenario.unexplained(found))
        cell = "; ".join(
            f"{what}: {model!r} / {real!r}" + ("" if (step, what, model, real) in unexplained else " (explained)")
            for step, what, model, real in found
        )
        lines.append(f"| {record['step']} | {record['settled_s']} s | {cell or 'nothing'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every step's model and real state as JSON here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.stdout.write("### The real kubelet against teesim's kubelet model: not run (it needs root)\n")
        return 0
    runs, left = {}, []
    with ControlPlane(scheduler=True) as plane:
        for name, scenario in SCENARIOS.items():
            started = time.monotonic()
            node = RealNode(plane, **scenario.node()).start()
            try:
                runs[name] = run_steps(plane, node, scenario)
            finally:
                left += node.stop()
            sys.stdout.write(table(name, runs[name], scenario, f" ({time.monotonic() - started:.0f} s wall)") + "\n")
    if left:
        sys.stderr.write(f"a node left behind: {left}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    unexplained = [d for name, records in runs.items() for d in SCENARIOS[name].unexplained(differences(records))]
    return 1 if unexplained or left else 0


if __name__ == "__main__":
    sys.exit(main())
