#!/usr/bin/env python3
"""What does the fleet report cost over plain ``ping``? Prints figures; asserts nothing.

Builds ``teesim fleet build --copies N`` (the five simulated node kinds, 20 copies = 100 hosts, without the GPU
capture, whose nvidia-smi stand-in would time Python start-ups instead of the module), and times, side by
side on the same inventory (local connection, forks 16):

* ``ping``  -- one ``ansible.builtin.ping`` task: the floor, one module round trip per host;
* ``preflight`` -- the fleet playbook's first play alone (``tee_host_info`` with ``preflight: true``);
* ``fleet`` -- ``playbooks/fleet_report.yml``: one ``tee_host_info`` (preflight) round trip per host, then
  drift against the fleet's Kubernetes objects and the report (HTML, Markdown, JSON, .prom) on the controller.

Target (issue 10): fleet <= 1.3x ping. Variants interleave round by round; the median of ``--repeat`` runs is
reported, with the report task's own time from the play's timing so the per-host part can be told apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "simulator"))

from playbook_timer import time_playbook  # noqa: E402
from teesim.cluster.fleet import build_fleet  # noqa: E402

KINDS = 5  # teesim's mixed fleet without the GPU capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100, help="rounded down to a multiple of 5")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forks", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tee-fleet-bench-") as tmp:
        directory = Path(tmp)
        summary = build_fleet(directory, reference=None, copies=max(args.hosts // KINDS, 1))
        inventory = directory / "inventory.yml"
        ping = directory / "ping.yml"
        ping.write_text(
            yaml.safe_dump(
                [
                    {
                        "name": "ping",
                        "hosts": "tee_nodes",
                        "gather_facts": False,
                        "tasks": [{"name": "ping", "ansible.builtin.ping": {}}],
                    }
                ]
            )
        )
        fleet_args = [
            "-e",
            f"tee_fleet_kubernetes_dir={directory / 'kubernetes'}",
            "-e",
            f"tee_fleet_report_dir={directory / 'report'}",
        ]
        preflight = directory / "preflight.yml"
        task = {
            "name": "preflight",
            "confidential.tee.tee_host_info": {
                "host_root": "{{ tee_host_root }}",
                "preflight": True,
                "gather_gpu": False,
            },
            "register": "tee_fleet_node",
        }
        preflight.write_text(
            yaml.safe_dump([{"name": "preflight", "hosts": "tee_nodes", "gather_facts": False, "tasks": [task]}])
        )
        variants = {
            "ping": (ping, []),
            "preflight": (preflight, []),
            "fleet": (REPO / "playbooks" / "fleet_report.yml", fleet_args),
        }
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeat):
            for name, (playbook, extra) in variants.items():
                samples[name].append(time_playbook(inventory, playbook, args.forks, extra, cwd=directory))
        medians = {name: statistics.median(values) for name, values in samples.items()}
    hosts = len(summary["nodes"])
    print(f"{hosts} simulated hosts, forks={args.forks}, median of {args.repeat} runs, {os.cpu_count()} CPUs")
    for name, seconds in medians.items():
        runs = ", ".join(f"{value:.1f}" for value in samples[name])
        print(f"{name:<6} {seconds:>7.2f} s  ({runs})")
    ping_s = medians["ping"]
    print(f"preflight / ping: {medians['preflight'] / ping_s:.2f}x (the per-host part: play 1 of the fleet playbook)")
    print(
        f"fleet / ping: {medians['fleet'] / ping_s:.2f}x (target <= 1.3x); the controller's part (Kubernetes "
        f"objects, drift, report) adds {medians['fleet'] - medians['preflight']:.1f} s"
    )


if __name__ == "__main__":
    main()
