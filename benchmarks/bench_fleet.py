#!/usr/bin/env python3
"""What does the fleet report cost over plain ``ping``, with Ansible's strategy and with mitogen's? Prints
figures; asserts nothing.

Builds ``teesim fleet build --copies N`` (the five simulated node kinds, 20 copies = 100 hosts, without the GPU
capture, whose nvidia-smi stand-in would time Python start-ups instead of the module), and runs, round by round on
the same inventory (local connection, forks 16):

* ``ping``  -- one ``ansible.builtin.ping`` task: the floor, one module round trip per host;
* ``per-host`` -- the fleet playbook's first play alone (``tee_host_info`` with ``preflight: true`` and
  ``result: fleet``, as the playbook calls it);
* ``fleet`` -- ``playbooks/fleet_report.yml``: the per-host play, then drift against the fleet's Kubernetes
  objects and the report (HTML, Markdown, JSON, .prom) on the controller.

All three under the default ``linear`` strategy and, when mitogen is installed (``pip install
'confidential-tee[mitogen]'``), under ``mitogen_linear``. Each figure is the median of ``--repeat`` runs: wall
seconds and CPU seconds of the whole ``ansible-playbook`` process tree (the machine this runs on is shared: CPU time
moves less with other people's load than wall time); the load average is printed before and after.

Then the controller's share: the fleet playbook's two plays on localhost (its wall and CPU time, from
``callback_plugins/play_cpu.py``) at ``--hosts`` and at ``--scale-hosts``, per host and per extra host.

Targets (issue 20): fleet <= 1.3x ping (default strategy); under mitogen the fleet report faster than a vanilla
``ping``, and as close to mitogen's ``ping`` as its per-task costs allow. Issue 31 (C4), at 1,000 hosts:
fleet <= 1.3x ping and the controller's part linear (``make benchmark`` runs ``--hosts 1000 --scale-hosts 100
--repeat 1 --no-mitogen --no-per-host``: the ratio at 1,000, the per-host cost at 100 and at 1,000).
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

from playbook_timer import Run, mitogen_strategy_path, run_playbook  # noqa: E402
from teesim.fixtures.fleet import build_fleet  # noqa: E402

KINDS = 5  # teesim's mixed fleet without the GPU capture
# mitogen lists every installed collection once per task and host for a collection module (docs/fleet.md). The
# fleet playbook names two collections (confidential.tee, and kubernetes.core for its API source's module_defaults),
# so the mitogen runs see only those two, as an execution environment built for the report would, instead of the
# `ansible` bundle's 94 on sys.path; --mitogen-scan-sys-path measures them with the bundle.
LEAN_COLLECTIONS = ("kubernetes.core",)


def lean_collections(directory: Path) -> dict[str, str]:
    """Settings for a collection search path with this checkout and ``LEAN_COLLECTIONS`` only (links)."""
    import ansible_collections

    root = directory / "ansible_collections"
    (root / "confidential").mkdir(parents=True)
    (root / "confidential" / "tee").symlink_to(REPO)
    bundle = Path(next(iter(ansible_collections.__path__)))
    for name in LEAN_COLLECTIONS:
        namespace, collection = name.split(".")
        (root / namespace).mkdir(exist_ok=True)
        (root / namespace / collection).symlink_to(bundle / namespace / collection)
    return {"ANSIBLE_COLLECTIONS_PATH": str(directory), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}


def _play(name: str, tasks: list[dict]) -> list[dict]:
    return [{"name": name, "hosts": "tee_nodes", "gather_facts": False, "tasks": tasks}]


def _write_playbooks(directory: Path) -> dict[str, tuple[Path, list[str]]]:
    ping = directory / "ping.yml"
    ping.write_text(yaml.safe_dump(_play("ping", [{"name": "ping", "ansible.builtin.ping": {}}])))
    per_host = directory / "per_host.yml"
    task = {
        "name": "preflight",
        "confidential.tee.tee_host_info": {
            "host_root": "{{ tee_host_root }}",
            "preflight": True,
            "gather_gpu": False,
            "result": "fleet",
        },
        "register": "tee_fleet_node",
    }
    per_host.write_text(yaml.safe_dump(_play("per-host", [task])))
    fleet_args = [
        "-e",
        f"tee_fleet_kubernetes_dir={directory / 'kubernetes'}",
        "-e",
        f"tee_fleet_report_dir={directory / 'report'}",
    ]
    return {
        "ping": (ping, []),
        "per-host": (per_host, []),
        "fleet": (REPO / "playbooks" / "fleet_report.yml", fleet_args),
    }


CONTROLLER_PLAYS = (
    "Read the Kubernetes objects from the API (tee_fleet_kubernetes=api only)",
    "Compare with Kubernetes and write the report",
)


def _controller(run: Run) -> tuple[float, float]:
    """(wall, CPU) seconds of the fleet playbook's plays on the controller (the API reads, then the report)."""
    plays = [p for p in run.plays if p["play"] in CONTROLLER_PLAYS]
    if len(plays) != len(CONTROLLER_PLAYS):
        sys.exit(f"the fleet playbook's controller plays are not {CONTROLLER_PLAYS}: update bench_fleet.py")
    return sum(p["wall_s"] for p in plays), sum(p["cpu_s"] for p in plays)


def _median(runs: list[Run], attribute: str) -> float:
    return statistics.median(getattr(run, attribute) for run in runs)


VARIANTS = ("ping", "per-host", "fleet")


def measure(
    hosts: int, repeat: int, forks: int, strategies: dict[str, dict], only: tuple[str, ...] = VARIANTS
) -> tuple[int, dict[str, list[Run]]]:
    samples: dict[str, list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="tee-fleet-bench-") as tmp:
        directory = Path(tmp)
        summary = build_fleet(directory, captures=None, copies=max(hosts // KINDS, 1))
        inventory = directory / "inventory.yml"
        variants = _write_playbooks(directory)
        for _ in range(repeat):
            for strategy, options in strategies.items():
                for name in only:
                    playbook, extra = variants[name]
                    run = run_playbook(inventory, playbook, forks, extra, cwd=directory, **options)
                    samples.setdefault(f"{strategy} {name}", []).append(run)
    return len(summary["nodes"]), samples


def _line(label: str, runs: list[Run], wall_base: float, cpu_base: float, base: str) -> str:
    wall, cpu = _median(runs, "wall_s"), _median(runs, "cpu_s")
    each = ", ".join(f"{run.wall_s:.1f}" for run in runs)
    return (
        f"  {label:<18} {wall:6.2f} s wall ({each}), {cpu:6.2f} s CPU"
        f"   {wall / wall_base:4.2f}x / {cpu / cpu_base:4.2f}x {base}"
    )


def report(hosts: int, samples: dict[str, list[Run]], has_mitogen: bool, why_not: str) -> None:
    vanilla_ping = samples["linear ping"]
    vp_wall, vp_cpu = _median(vanilla_ping, "wall_s"), _median(vanilla_ping, "cpu_s")
    print("linear (Ansible's default strategy); ratios wall / CPU to its ping:")
    for name in ("ping", "per-host", "fleet"):
        if f"linear {name}" in samples:
            print(_line(name, samples[f"linear {name}"], vp_wall, vp_cpu, "ping"))
    wall, cpu = zip(*(_controller(run) for run in samples["linear fleet"]), strict=True)
    print(
        f"  controller's part (plays 2 and 3): {statistics.median(wall):.2f} s wall, "
        f"{statistics.median(cpu):.2f} s CPU = {1000 * statistics.median(cpu) / hosts:.1f} ms CPU per host; "
        f"fleet / ping {_median(samples['linear fleet'], 'wall_s') / vp_wall:.2f}x wall (target <= 1.3x)"
    )
    if not has_mitogen:
        print(f"mitogen: {why_not}, its figures are left out")
        return
    mp_wall, mp_cpu = _median(samples["mitogen ping"], "wall_s"), _median(samples["mitogen ping"], "cpu_s")
    print("mitogen_linear; ratios wall / CPU to mitogen's ping, then to the linear ping:")
    for name in ("ping", "per-host", "fleet"):
        runs = samples[f"mitogen {name}"]
        print(
            _line(name, runs, mp_wall, mp_cpu, "mitogen ping")
            + f"   {_median(runs, 'wall_s') / vp_wall:4.2f}x / {_median(runs, 'cpu_s') / vp_cpu:4.2f}x linear ping"
        )


def scaling(small: tuple[int, list[Run]], large: tuple[int, list[Run]]) -> None:
    (n_small, runs_small), (n_large, runs_large) = small, large
    wall_small, cpu_small = (statistics.median(v) for v in zip(*map(_controller, runs_small), strict=True))
    wall_large, cpu_large = (statistics.median(v) for v in zip(*map(_controller, runs_large), strict=True))
    print("the controller's part (plays 2 and 3, linear), per host and per extra host:")
    for hosts, wall, cpu in ((n_small, wall_small, cpu_small), (n_large, wall_large, cpu_large)):
        print(f"  {hosts:4d} hosts: {wall:6.2f} s wall, {cpu:6.2f} s CPU = {1000 * cpu / hosts:5.1f} ms CPU per host")
    extra = n_large - n_small
    print(
        f"  each of the {extra} extra hosts: {1000 * (cpu_large - cpu_small) / extra:5.1f} ms CPU, "
        f"{1000 * (wall_large - wall_small) / extra:5.1f} ms wall"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100, help="rounded down to a multiple of 5")
    parser.add_argument(
        "--scale-hosts",
        type=int,
        default=500,
        help="second fleet size for the controller's share (smaller or larger than --hosts; 0: none)",
    )
    parser.add_argument(
        "--no-per-host", action="store_true", help="leave out the per-host play alone (saves a run at large --hosts)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forks", type=int, default=16)
    parser.add_argument("--no-mitogen", action="store_true", help="only Ansible's default strategy")
    parser.add_argument(
        "--mitogen-scan-sys-path", action="store_true", help="mitogen with every collection on sys.path (slower)"
    )
    args = parser.parse_args()
    has_mitogen = mitogen_strategy_path() is not None and not args.no_mitogen
    strategies: dict[str, dict] = {"linear": {}}
    start_load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tee-lean-collections-") as lean:
        if has_mitogen:
            env = {} if args.mitogen_scan_sys_path else lean_collections(Path(lean))
            strategies["mitogen"] = {"mitogen": True, "env": env}
        only = tuple(v for v in VARIANTS if not (args.no_per_host and v == "per-host"))
        hosts, samples = measure(args.hosts, args.repeat, args.forks, strategies, only)
    print(
        f"{hosts} simulated hosts, forks={args.forks}, median of {args.repeat} runs, {os.cpu_count()} CPUs, "
        f"load average {start_load:.1f} before, {os.getloadavg()[0]:.1f} after"
        + (
            ""
            if not has_mitogen or args.mitogen_scan_sys_path
            else "; mitogen sees confidential.tee and " + ", ".join(LEAN_COLLECTIONS) + " only"
        )
    )
    why_not = "--no-mitogen" if args.no_mitogen else "not installed (pip install 'confidential-tee[mitogen]')"
    report(hosts, samples, has_mitogen, why_not)
    if args.scale_hosts and args.scale_hosts // KINDS != args.hosts // KINDS:
        other_hosts, other = measure(args.scale_hosts, 1, args.forks, {"linear": {}}, only=("fleet",))
        sizes = sorted([(hosts, samples["linear fleet"]), (other_hosts, other["linear fleet"])])
        scaling(sizes[0], sizes[1])
        print(f"load average {os.getloadavg()[0]:.1f} after the {other_hosts}-host run")


if __name__ == "__main__":
    main()
