#!/usr/bin/env python3
"""How much does reading TEE capacity cost an Ansible run? Prints figures; asserts nothing.

Builds N simulated node trees (default 100), puts them in one inventory (local connection, each host
with its own ``tee_host_root``) and times, side by side on the same inventory:

* ``ping``      -- ``ansible.builtin.ping``: the floor, one module round trip per host;
* ``modules``   -- ``tee_capacity_info`` + ``tee_host_info`` (two round trips);
* ``combined``  -- ``tee_host_info`` with ``capacity: true`` (one round trip, the same data);
* ``naive``     -- what people write today: several ``slurp``/``stat``/``command`` tasks reading the same files.

Targets (issue 2): modules <= 1.3x ping, modules >= 4x faster than naive. Each variant runs ``--repeat``
times (default 3) and the median is reported.
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
from teesim.kernel.cli import build_node_tree  # noqa: E402

ROOT = "{{ tee_host_root }}"
VARIANTS: dict[str, list[dict]] = {
    "ping": [{"name": "ping", "ansible.builtin.ping": {}}],
    "modules": [
        {"name": "capacity", "confidential.tee.tee_capacity_info": {"host_root": ROOT}},
        {"name": "host", "confidential.tee.tee_host_info": {"host_root": ROOT, "gather_gpu": False}},
    ],
    "combined": [
        {
            "name": "host and capacity",
            "confidential.tee.tee_host_info": {"host_root": ROOT, "gather_gpu": False, "capacity": True},
        },
    ],
    "naive": [
        {"name": f"slurp {path}", "ansible.builtin.slurp": {"src": f"{ROOT}/{path}"}, "register": f"r{i}"}
        for i, path in enumerate(
            [
                "sys/fs/cgroup/misc.capacity",
                "sys/fs/cgroup/misc.current",
                "sys/fs/cgroup/misc.peak",
                "sys/module/kvm_intel/parameters/tdx",
                "proc/cmdline",
                "proc/cpuinfo",
            ]
        )
    ]
    + [
        {"name": "stat vhost-vsock", "ansible.builtin.stat": {"path": f"{ROOT}/dev/vhost-vsock"}},
        {
            "name": "list misc cgroup files",
            "ansible.builtin.command": {"cmd": f"find {ROOT}/sys/fs/cgroup -maxdepth 1 -name misc.*"},
            "changed_when": False,
        },
    ],
}


def build_fleet(directory: Path, hosts: int) -> Path:
    inventory: dict = {"tee_nodes": {"hosts": {}}}
    for index in range(hosts):
        root = directory / f"node-{index:03d}"
        build_node_tree(root, capacity={"tdx": 63}, usage={"tdx": index % 64}, name=root.name)
        inventory["tee_nodes"]["hosts"][root.name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "tee_host_root": str(root),
        }
    path = directory / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def time_variant(directory: Path, inventory: Path, name: str, forks: int) -> float:
    playbook = directory / f"{name}.yml"
    playbook.write_text(
        yaml.safe_dump([{"name": name, "hosts": "tee_nodes", "gather_facts": False, "tasks": VARIANTS[name]}])
    )
    return time_playbook(inventory, playbook, forks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forks", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tee-bench-") as tmp:
        directory = Path(tmp)
        inventory = build_fleet(directory, args.hosts)
        # Variants interleave round by round so machine noise hits all of them alike.
        samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.repeat):
            for name in VARIANTS:
                samples[name].append(time_variant(directory, inventory, name, args.forks))
        medians = {name: statistics.median(values) for name, values in samples.items()}
    ping = medians["ping"]
    print(f"{args.hosts} simulated hosts, forks={args.forks}, median of {args.repeat} runs, {os.cpu_count()} CPUs")
    print(f"{'variant':<10} {'tasks':>5} {'seconds':>8} {'x ping':>7} {'naive / this':>13}")
    for name, seconds in medians.items():
        print(
            f"{name:<10} {len(VARIANTS[name]):>5} {seconds:>8.2f} {seconds / ping:>7.2f} "
            f"{medians['naive'] / seconds:>13.2f}"
        )
    print(
        f"target modules <= 1.3x ping: {medians['modules'] / ping:.2f}x; "
        f"combined {medians['combined'] / ping:.2f}x; "
        f"target >= 4x faster than naive: modules {medians['naive'] / medians['modules']:.2f}x, "
        f"combined {medians['naive'] / medians['combined']:.2f}x"
    )


if __name__ == "__main__":
    main()
