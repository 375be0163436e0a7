#!/usr/bin/env python3
"""`make demo`: a simulated TDX node, planned, validated, simulated and reported.

1. builds a host-shaped tree for a TDX node (kernel 6.16+ profile, 63 TDX keys, 12 in use by VMs outside
   Kubernetes) with teesim;
2. runs ansible-playbook: the roles' plan for the node (rendered MachineConfigs), then this collection's
   modules read and validate the node's capacity through `host_root`;
3. runs the same node in teesim with Kata pods and KubeVirt VMs side by side under every key-tracking
   strategy (the double pool first), writes the report and the node's timeline, and ends with one line:
   what failed under the double pool, which strategy avoids it, and where the timeline is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from steps import BIN, REPO, ansible_env, exit_with, run, shown, step

NODE = "sim-tdx-node"
# Where strategies tie, the conclusion names first the mode the collection deploys (its node agent's pool), then the
# recommendation of docs/simulator.md.
KERNEL_POOL = "kernel-pool"  # what confidential.tee deploys with tee_key_pool_mode: kernel
PREFERRED = (KERNEL_POOL, "unified-reconciling")
ONE_STATIC_POOL = "kata-overhead-on-kubevirt"  # what confidential.tee.cluster renders with tee_key_pool_mode: kubevirt
WHAT = {
    KERNEL_POOL: "one pool the node agent keeps at what the kernel has free: tee_key_pool_mode: kernel",
    "unified-reconciling": "one pool that reads misc.current",
    "reconciling": "KubeVirt's pool reconciled with misc.current",
    "secure-guest-resources": "one pool lowered by the keys reserved for VMs outside Kubernetes",
    ONE_STATIC_POOL: "one static pool: confidential.tee.cluster with tee_key_pool_mode: kubevirt",
}


def write_inventory(path: Path, node_root: Path) -> None:
    # Local connection with the playbook's own interpreter: discovery would pick a pyenv shim on some hosts.
    hosts = {
        NODE: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "tee_host_root": str(node_root),
            "tee_cpu_vendor": "intel",
        }
    }
    path.write_text("---\n" + yaml.safe_dump({"tee_nodes": {"hosts": hosts}}, sort_keys=True))


def parse_keys(text: str) -> tuple[str, int]:
    resource, _, count = text.partition("=")
    if resource != "tdx" or not count.isdigit():
        raise SystemExit(f"demo: expected tdx=N, got {text!r} (the demo node is a TDX node)")
    return resource, int(count)


def node_scenario(capacity: int, in_use: int) -> dict:
    """The demo node in teesim: its keys, the VMs outside Kubernetes that hold ``in_use`` of them, and Kata pods
    and KubeVirt VMs arriving side by side, each kind about 40 % of the keys at a time: each pool alone has room,
    both together do not."""
    rate = round(capacity * 0.4 / 600, 4)  # arrivals per second: 40 % of the keys for 600 s on average
    outside = [{"consumer": "external", "resource": "tdx", "node": NODE, "at": 0, "count": in_use, "duration": 1800}]
    return {
        "name": "demo-" + NODE,
        "description": f"the node make demo built: {capacity} TDX keys, {in_use} held by VMs outside Kubernetes;"
        " Kata pods and KubeVirt VMs arrive side by side",
        "seed": 1,
        "duration": 1800,
        "nodes": [{"name": NODE, "vendor": "intel", "profile": "current", "capacity": {"tdx": capacity}}],
        "workloads": [
            *(outside if in_use else []),
            {"consumer": "kata", "resource": "tdx", "rate": rate, "duration": [400, 800]},
            {"consumer": "kubevirt", "resource": "tdx", "rate": rate, "duration": [400, 800]},
        ],
    }


def _shortfall(metrics: dict) -> tuple[int, int]:
    """Failed launches, then guests that never started or still wait at the end (a strategy that fails nothing
    by starting nothing does not avoid the problem)."""
    never = metrics["kata"]["never_started"] + metrics["kubevirt"]["never_started"]
    return metrics["failed_launches"], never + metrics["pending_at_end"]


def conclusion(report: dict, png: Path) -> str:
    """One line: what failed under the double pool, which strategy avoids it, where the timeline is."""
    strategies = {name: result["metrics"] for name, result in report["strategies"].items()}
    baseline = strategies["double-pool"]
    order = [s for s in PREFERRED if s in strategies] + [s for s in strategies if s not in PREFERRED]
    best = min(order, key=lambda s: (sum(_shortfall(strategies[s])), _shortfall(strategies[s])))
    failed, waiting = _shortfall(strategies[best])
    if baseline["failed_launches"] == 0:
        return f"Conclusion: no launch failed on {NODE} under the double pool in this run; timeline: {png}"
    by_consumer = ", ".join(f"{c} {n}" for c, n in sorted(baseline["failed_launches_by_consumer"].items()) if n)
    outcome = "none" if failed == 0 else f"{failed}"
    outcome += f" ({waiting} guests never started)" if waiting else ""
    line = (
        f"Conclusion: under the double pool (Kata and KubeVirt each advertise all "
        f"{report['nodes'][0]['capacity']['tdx']} keys) {baseline['failed_launches']} launches failed on {NODE}"
        f" ({by_consumer}); {best} ({WHAT.get(best, 'see the table')}) had {outcome}"
    )
    static = strategies.get(ONE_STATIC_POOL)
    if static is not None and best != ONE_STATIC_POOL and static["failed_launches"]:
        line += f", {ONE_STATIC_POOL} ({WHAT[ONE_STATIC_POOL]}) {static['failed_launches']}"
    return line + f"; timeline: {png}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / ".build" / "demo", help="where to write everything")
    parser.add_argument("--capacity", default="tdx=63", help="node capacity, tdx=N")
    parser.add_argument("--usage", default="tdx=12", help="keys already in use by VMs outside Kubernetes, tdx=N")
    args = parser.parse_args()
    _, capacity = parse_keys(args.capacity)
    _, in_use = parse_keys(args.usage)

    out = args.out.resolve()
    node_root = out / NODE
    out.mkdir(parents=True, exist_ok=True)
    env = ansible_env()

    step("1/3 simulated TDX node")
    run(
        [
            *(BIN / "teesim", "node", "build", "--profile", "current", "--vendor", "intel"),
            *("--capacity", args.capacity, "--usage", args.usage, "--name", NODE, "--out", node_root),
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

    step("3/3 the same node under every key-tracking strategy (teesim run, double pool first)")
    scenario = out / "scenario.yaml"
    scenario.write_text("---\n" + yaml.safe_dump(node_scenario(capacity, in_use), sort_keys=False))
    run([BIN / "teesim", "run", scenario, "--out", out / "report", "--quiet"], env=env)

    report = json.loads((out / "report" / "report.json").read_text())
    png = out / "report" / f"timeline-{NODE}.png"
    step("done")
    print(f"node tree:   {shown(node_root)}")
    print(f"manifests:   {shown(out / 'manifests')}")
    print(f"sim report:  {shown(out / 'report' / 'report.json')}")
    print(conclusion(report, shown(png)))
    return 0


if __name__ == "__main__":
    exit_with(main, "demo")
