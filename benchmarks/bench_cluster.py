#!/usr/bin/env python3
"""What do more nodes cost ``playbooks/cluster.yml`` (the cluster side, manifests mode)? Prints figures and ratios
from one run; asserts nothing.

* **C1** (issue 31), host facts off: the playbook over ``--small`` (10) and ``--large`` (5,000) generated nodes, side
  by side; target: the large run at most 1.5x the small one. The nodes are data (``tee_cpu_vendor`` set; TDX
  nodes with Kata and KubeVirt or KubeVirt alone, SNP nodes with Kata; GPU nodes only with ``--gpu-every``, as each
  still costs the ``gpu_cc_node`` role's tasks), nothing is read from them.
* **C2**, host facts on: the playbook against one ``ansible.builtin.ping`` task over the same simulated hosts
  (``teesim fleet build``, the five node kinds, ``--facts-hosts``); target: at most 1.3x ``ping``. Every node then
  costs one module round trip (``tee_host_info``), as ``ping`` does; what stays is the playbook's fixed cost (the
  cluster roles render twice: once to check, once to write), so the ratio falls as the fleet grows: the fixed
  cost and the per-host costs of both are printed, with the ratio they predict at ``--large`` hosts.

Wall and CPU seconds of the whole ``ansible-playbook`` process tree, and of each play
(``callback_plugins/play_cpu.py``); the load average before and after (the machine this runs on is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "simulator"))

from playbook_timer import Run, run_playbook  # noqa: E402
from teesim.fixtures.fleet import build_fleet  # noqa: E402

PLAYBOOK = REPO / "playbooks" / "cluster.yml"
KINDS = 5  # teesim's mixed fleet without the GPU capture


def node_vars(index: int, gpu_every: int = 0) -> dict:
    """A generated node: TDX with Kata and KubeVirt, TDX with KubeVirt, or SNP with Kata; every ``gpu_every``th
    a GPU node (0: none)."""
    kind = index % 3
    host = {
        "tee_cpu_vendor": "amd" if kind == 2 else "intel",
        "tee_node_consumers": [["kata", "kubevirt"], ["kubevirt"], ["kata"]][kind],
    }
    if gpu_every and index % gpu_every == gpu_every - 1:
        host["tee_node_gpu"] = True
    return host


def generated_inventory(directory: Path, nodes: int, gpu_every: int = 0, **cluster_vars) -> Path:
    """An inventory of ``nodes`` generated hosts (local connection, nothing read from them); used by the tests too."""
    hosts = {f"node-{i:05d}": node_vars(i, gpu_every) for i in range(nodes)}
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "tee_output": "manifests",
                "tee_cluster_gather_host_facts": False,
                **cluster_vars,
            },
            "children": {"tee_nodes": {"hosts": hosts}},
        }
    }
    path = directory / f"inventory-{nodes}.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def _plays(run: Run) -> str:
    return "; ".join(f"{p['play'][:40]} {p['wall_s']:.1f}" for p in run.plays if p["wall_s"] >= 0.5)


def _row(label: str, run: Run, base: Run | None = None) -> str:
    ratio = f"   {run.wall_s / base.wall_s:5.2f}x wall, {run.cpu_s / base.cpu_s:5.2f}x CPU" if base else ""
    return f"  {label:<28} {run.wall_s:7.1f} s wall {run.cpu_s:7.1f} s CPU{ratio}"


def c1(small: int, large: int, forks: int, gpu_every: int) -> None:
    gpus = f", every {gpu_every}th a GPU node" if gpu_every else ", no GPU node"
    print(f"C1: cluster.yml, manifests, host facts off; {small} and {large} generated nodes{gpus}, forks {forks}")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="tee-cluster-bench-") as tmp:
        directory = Path(tmp)
        for nodes in (small, large):
            out = str(directory / f"out-{nodes}")
            inventory = generated_inventory(directory, nodes, gpu_every, tee_manifest_dir=out)
            runs[nodes] = run_playbook(inventory, PLAYBOOK, forks, cwd=directory)
            print(f"    (load average {os.getloadavg()[0]:.1f} after the {nodes}-node run)", flush=True)
    print(_row(f"{small} nodes", runs[small]))
    print(_row(f"{large} nodes", runs[large], runs[small]) + "   (target <= 1.5x wall)")
    extra = large - small
    print(
        f"  each extra node: {1000 * (runs[large].wall_s - runs[small].wall_s) / extra:.2f} ms wall, "
        f"{1000 * (runs[large].cpu_s - runs[small].cpu_s) / extra:.2f} ms CPU"
    )
    print(f"  plays of the {large}-node run (s wall, >= 0.5 s): {_plays(runs[large])}")


def _fleet_runs(directory: Path, hosts: int, forks: int) -> tuple[int, Run, Run]:
    fleet = directory / f"fleet-{hosts}"
    summary = build_fleet(fleet, captures=None, copies=max(hosts // KINDS, 1))
    inventory = fleet / "inventory.yml"
    ping = fleet / "ping.yml"
    ping.write_text(
        yaml.safe_dump(
            [{"name": "ping", "hosts": "tee_nodes", "gather_facts": False, "tasks": [{"ansible.builtin.ping": {}}]}]
        )
    )
    extra = ["-e", "tee_output=manifests", "-e", f"tee_manifest_dir={fleet / 'out'}"]
    ping_run = run_playbook(inventory, ping, forks, cwd=fleet)
    cluster_run = run_playbook(inventory, PLAYBOOK, forks, extra, cwd=fleet)
    return len(summary["nodes"]), ping_run, cluster_run


def c2(sizes: list[int], large: int, forks: int) -> None:
    print(f"C2: cluster.yml, manifests, host facts on, against ping over the same simulated hosts, forks {forks}")
    measured = []
    with tempfile.TemporaryDirectory(prefix="tee-cluster-bench-") as tmp:
        for size in sizes:
            hosts, ping, cluster = _fleet_runs(Path(tmp), size, forks)
            measured.append((hosts, ping, cluster))
            print(f"    (load average {os.getloadavg()[0]:.1f} after the {hosts}-host runs)", flush=True)
    for hosts, ping, cluster in measured:
        print(_row(f"{hosts} hosts: ping", ping))
        print(_row(f"{hosts} hosts: cluster.yml", cluster, ping) + "   (target <= 1.3x wall)")
        print(f"    plays (s wall, >= 0.5 s): {_plays(cluster)}")
    if len(measured) < 2:
        return
    (n0, p0, c0), (n1, p1, c1_) = measured[0], measured[-1]
    ping_each = (p1.wall_s - p0.wall_s) / (n1 - n0)
    cluster_each = (c1_.wall_s - c0.wall_s) / (n1 - n0)
    if ping_each <= 0 or cluster_each <= 0:
        print(f"  per host: the {n0}- and {n1}-host runs are too noisy to part fixed and per-host costs (wall fell)")
        return
    ping_fixed, cluster_fixed = p0.wall_s - ping_each * n0, c0.wall_s - cluster_each * n0
    predicted = (cluster_fixed + cluster_each * large) / (ping_fixed + ping_each * large)
    print(
        f"  per host: ping {1000 * ping_each:.0f} ms wall, cluster.yml {1000 * cluster_each:.0f} ms wall "
        f"({cluster_each / ping_each:.2f}x); fixed: ping {ping_fixed:.1f} s, cluster.yml {cluster_fixed:.1f} s; "
        f"at {large} hosts these predict {predicted:.2f}x ping"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10, help="C1's small inventory")
    parser.add_argument("--large", type=int, default=5000, help="C1's large inventory (and C2's prediction)")
    parser.add_argument(
        "--facts-hosts",
        type=int,
        nargs="*",
        default=[100, 1000],
        help="C2's simulated fleet sizes (multiples of 5); none: skip C2",
    )
    parser.add_argument(
        "--gpu-every", type=int, default=0, help="C1: every Nth node a GPU node (each costs a role run); 0: none"
    )
    parser.add_argument("--forks", type=int, default=16)
    parser.add_argument("--only", choices=("c1", "c2"), help="one target only")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    if args.only != "c2":
        c1(args.small, args.large, args.forks, args.gpu_every)
    if args.only != "c1" and args.facts_hosts:
        c2(sorted(args.facts_hosts), args.large, args.forks)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
