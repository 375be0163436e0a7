"""The real kubelet against teesim's kubelet model: the comparison of scripts/kubelet_comparison.py as a table.

Starts ``make k8s``'s control plane and ``make node``'s node (root: cgroups, a mount namespace, runc), runs the
scenario on it and through teesim's model, and prints one row per step: what differs, or that nothing does.
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
from kubelet_comparison import KEYS, NODE, differences, run_steps


def table(records: list[dict], note: str) -> str:
    lines = [
        "### The real kubelet against teesim's kubelet model" + note,
        "",
        "| step | what differs (model / real) |",
        "|---|---|",
    ]
    for record in records:
        found = differences([record])
        cell = "; ".join(f"{what}: {model!r} / {real!r}" for _, what, model, real in found) or "nothing"
        lines.append(f"| {record['step']} | {cell} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every step's model and real state as JSON here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.stdout.write("### The real kubelet against teesim's kubelet model: not run (it needs root)\n")
        return 0
    started = time.monotonic()
    with ControlPlane(scheduler=True) as plane:
        node = RealNode(plane, name=NODE, capacity={"tdx": KEYS}).start()
        try:
            records = run_steps(plane, node)
        finally:
            left = node.stop()
    if left:
        sys.stderr.write(f"the node left behind: {left}\n")
    sys.stdout.write(table(records, f" ({time.monotonic() - started:.0f} s wall)"))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if differences(records) or left else 0


if __name__ == "__main__":
    sys.exit(main())
