#!/usr/bin/env python3
"""`make demo`: a simulated TDX node, planned, validated, simulated and reported.

1. builds a host-shaped tree for a TDX node (kernel 6.16+ profile, 63 TDX keys, 12 in use) with teesim;
2. runs ansible-playbook: the roles' plan for the node (rendered MachineConfigs), then this collection's
   modules read and validate the node's capacity through `host_root`;
3. runs a short teesim scenario comparing the key-tracking strategies (double pool first) and writes its report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from steps import BIN, REPO, ansible_env, exit_with, run, step


def write_inventory(path: Path, node_root: Path) -> None:
    # Local connection with the playbook's own interpreter: discovery would pick a pyenv shim on some hosts.
    path.write_text(
        "---\n"
        "tee_nodes:\n"
        "  hosts:\n"
        "    sim-tdx-node:\n"
        "      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
        f"      tee_host_root: {node_root}\n"
        "      tee_cpu_vendor: intel\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / ".build" / "demo", help="where to write everything")
    parser.add_argument("--capacity", default="tdx=63", help="node capacity, RES=N")
    parser.add_argument("--usage", default="tdx=12", help="keys already in use, RES=N")
    parser.add_argument("--scenario", default="quick.yaml", help="bundled teesim scenario to run")
    args = parser.parse_args()

    out = args.out.resolve()
    node_root = out / "sim-tdx-node"
    out.mkdir(parents=True, exist_ok=True)
    env = ansible_env()

    step("1/3 simulated TDX node")
    run(
        [
            *(BIN / "teesim", "node", "build", "--profile", "current", "--vendor", "intel"),
            *("--capacity", args.capacity, "--usage", args.usage, "--name", "sim-tdx-node", "--out", node_root),
        ]
    )
    inventory = out / "inventory.yml"
    write_inventory(inventory, node_root)

    step("2/3 plan and validate with ansible-playbook")
    run(
        [
            *(BIN / "ansible-playbook", "-i", inventory, "playbooks/demo.yml"),
            *("-e", f"tee_manifest_dir={out}/manifests", "-e", "tee_cpu_vendor=intel"),
        ],
        env=env,
    )

    step("3/3 compare key-tracking strategies (teesim)")
    run([BIN / "teesim", "run", args.scenario, "--out", out / "report"], env=env)

    step("done")
    print(f"node tree:   {node_root}")
    print(f"manifests:   {out / 'manifests'}")
    print(f"sim report:  {out / 'report'} (report.json, timeline-*.png)")
    return 0


if __name__ == "__main__":
    exit_with(main, "demo")
