#!/usr/bin/env python3
"""`make fleet-report`: the fleet readiness and TEE key drift report for a simulated mixed fleet.

1. `teesim fleet build`: host trees for TDX, SEV-SNP, old-kernel and no-misc nodes plus the real H100 capture
   that ships with teesim, and the cluster's Kubernetes objects as JSON files;
2. `ansible-playbook playbooks/fleet_report.yml`: one tee_host_info round trip per node, then drift against the
   Kubernetes objects and the report (HTML, Markdown, JSON, node_exporter .prom);
3. prints where the report is and its headline.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from steps import BIN, REPO, ansible_env, exit_with, run, shown, step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / ".build" / "fleet", help="where to write everything")
    parser.add_argument("--captures", type=Path, help="real host captures (default: the ones teesim ships)")
    args = parser.parse_args()
    out = args.out.resolve()
    env = ansible_env()

    step("1/2 simulated mixed fleet (teesim fleet build)")
    run([BIN / "teesim", "fleet", "build", "--out", out, *(["--captures", args.captures] if args.captures else [])])
    step("2/2 preflight, capacity and drift (ansible-playbook playbooks/fleet_report.yml)")
    run(
        [
            *(BIN / "ansible-playbook", "-i", out / "inventory.yml", "playbooks/fleet_report.yml"),
            *("-e", f"tee_fleet_kubernetes_dir={out / 'kubernetes'}", "-e", f"tee_fleet_report_dir={out / 'report'}"),
        ],
        env=env,
    )
    report = json.loads((out / "report" / "report.json").read_text())
    summary = report["summary"]
    step("done")
    print(f"{summary['nodes']} nodes, {summary['ready']} ready; not ready: {', '.join(summary['not_ready']) or 'none'}")
    print(f"{summary['findings']} drift findings ({summary['critical']} critical): {summary['findings_by_id']}")
    for name in ("report.html", "report.md", "report.json", "tee-fleet.prom"):
        print(f"{name:<15} {shown(out / 'report' / name)}")
    print(f"{'textfile/':<15} {shown(out / 'report' / 'textfile')} (one .prom per node for node_exporter)")
    return 0


if __name__ == "__main__":
    exit_with(main, "fleet-report")
