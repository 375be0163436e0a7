#!/usr/bin/env python3
"""The real kube-scheduler binding teesim's pods, beside teesim's scheduler model, over the same seeds.

One control plane for the whole sweep (``scripts/kube_control_plane.py``: etcd, kube-apiserver with real TLS,
RBAC and the default admission plugins, kube-scheduler; Kubernetes v1.37.2 from ``make k8s``). Each (strategy,
seed) is run twice by teesim's engine: once with its own scheduler model, once with kube-scheduler placing
every pod (:class:`teesim.sim.kube_scheduler.KubeScheduler`, one namespace per run). Both runs play the same
arrivals; the kubelet model admits, starts and charges ``misc.current`` in both. Compared: the metrics the
KubeVirt rows compare (``scripts/upstream_kubevirt.py``), and every placement decision (kube-scheduler's
answer and the model's on the same node status).

The scenario is ``serve-double-pool-tdx`` (one TDX node, 8 keys, 40 s), the one the KubeVirt rows use: with a
single node the comparison does not depend on kube-scheduler's random choice among equally scored nodes
(``pkg/scheduler/schedule_one.go``, ``selectHost``), which the model replaces by fewest pods, then name.

Usage: scripts/upstream_scheduler.py [--seeds N] [--json FILE]
(prints a Markdown table with means and 95 % intervals over seeds; exit 1 when a placement differs)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "simulator"))
sys.path.insert(0, str(REPO / "scripts"))

from teesim.report.metrics import MetricsRecorder  # noqa: E402
from teesim.sim.kube_scheduler import ApiClient, KubeScheduler, scratch_namespace  # noqa: E402
from teesim.sim.scenario import load_scenario  # noqa: E402
from teesim.sim.simulation import Simulation  # noqa: E402
from teesim.strategies.base import get_strategy  # noqa: E402
from upstream_kubevirt import metric_lines, metrics_of  # noqa: E402

K8S_VERSION = "v1.37.2"
SCENARIO = "serve-double-pool-tdx"
# The double pool as shipped; the one pool that reads the kernel (no failure outside the race window in the
# results sweep); the collection's one pool (tee_key_pool_mode: kubevirt, Kata's overhead on KubeVirt's name); the
# mode the collection deploys against that (tee_key_pool_mode: kernel, its agent's decision code patching the Node).
STRATEGIES = ("double-pool", "unified-reconciling", "kata-overhead-on-kubevirt", "kernel-pool")
METRICS = (
    ("failed_launches_by_consumer.kubevirt", "failed launches, KubeVirt"),
    ("failed_launches_by_consumer.kata", "failed launches, Kata"),
    ("failed_outside_race_window.kubevirt", "failed outside the race window, KubeVirt"),
    ("failed_outside_race_window.kata", "failed outside the race window, Kata"),
    ("guests_failed_to_start", "guests with a failed launch (Kata + KubeVirt)"),
    ("launched.kubevirt", "VMIs launched"),
    ("pending_at_end", "pods still pending at the end"),
    ("advertised_kubevirt_max", "the VMIs' key resource advertised (max over the run)"),
    ("advertised_kubevirt_min", "the VMIs' key resource advertised (min over the run)"),
    ("advertised_nfd_max", "NFD's `tdx.intel.com/keys` advertised (max over the run)"),
)


def entry(sim: Simulation, recorder: MetricsRecorder) -> dict[str, Any]:
    """A strategy's report entry, as ``teesim run`` writes it."""
    return {"metrics": recorder.summary(sim), "timeline": recorder.timeline_data()}


def run_once(api: ApiClient, strategy: str, seed: int, scenario: str = SCENARIO) -> dict[str, Any]:
    """``scenario`` at ``seed`` under ``strategy``: teesim's scheduler model, then kube-scheduler."""
    world = load_scenario(scenario, seed=seed).world
    model = Simulation(world, get_strategy(strategy))
    model_recorder = MetricsRecorder()
    model.run(model_recorder)
    placer = KubeScheduler(api, scratch_namespace("teesim", strategy, f"s{seed}"))
    real = Simulation(world, get_strategy(strategy), placer=placer.place)
    placer.attach(real)
    real_recorder = MetricsRecorder()
    try:
        real.run(real_recorder)
    finally:
        placer.close()
    return {
        "scenario": Path(scenario).stem,
        "strategy": strategy,
        "seed": seed,
        "upstream": compared(entry(real, real_recorder)),
        "modelled": compared(entry(model, model_recorder)),
        "placements": placer.summary(),
    }


def compared(report_entry: dict[str, Any]) -> dict[str, Any]:
    values = metrics_of(report_entry)
    values["pending_at_end"] = report_entry["metrics"]["pending_at_end"]
    return values


def sweep(api: ApiClient, seeds: list[int], strategies=STRATEGIES) -> list[dict[str, Any]]:
    return [run_once(api, strategy, seed) for strategy in strategies for seed in seeds]


def table(runs: list[dict[str, Any]], note: str = "") -> str:
    seeds = sorted({r["seed"] for r in runs})
    decisions = sum(r["placements"]["decisions"] for r in runs)
    differ = sum(len(r["placements"]["fit_disagreements"]) for r in runs)
    overhead = sum(len(r["placements"]["overhead_mismatches"]) for r in runs)
    lines = [
        f"kube-scheduler {K8S_VERSION} placing teesim's pods on `{SCENARIO}`, {len(seeds)} seeds "
        f"({seeds[0]}..{seeds[-1]}); mean [95 % interval] over seeds{note}",
        "",
        f"Placement decisions: {decisions}, where kube-scheduler and the model differ: {differ}; pods whose "
        f"`spec.overhead` RuntimeClass admission set differently from teesim's pod: {overhead}.",
        "",
        "| scenario | strategy | metric | kube-scheduler | model | equal in every seed |",
        "|---|---|---|---|---|---|",
    ]
    for strategy in dict.fromkeys(r["strategy"] for r in runs):
        rows = [r for r in runs if r["strategy"] == strategy]
        bound = sum(r["placements"]["bound"] for r in rows)
        tried = sum(r["placements"]["decisions"] for r in rows)
        lines.append(f"| {SCENARIO} | {strategy} | pods bound / decisions (sum) | {bound} / {tried} | same | - |")
        lines += metric_lines(f"{SCENARIO} | {strategy}", rows, METRICS)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30, help="seeds 1..N (default %(default)s)")
    parser.add_argument("--json", help="also write every run's metrics and placements as JSON here")
    args = parser.parse_args(argv)
    from kube_control_plane import ControlPlane

    started = time.monotonic()
    with ControlPlane(scheduler=True) as plane:
        api = ApiClient.from_kubeconfig(plane.admin_kubeconfig)
        runs = sweep(api, list(range(1, args.seeds + 1)))
    elapsed = time.monotonic() - started
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    note = f" ({elapsed:.0f} s wall on {platform.node() or 'this machine'}, load average {load} at the end)"
    sys.stdout.write(table(runs, note))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    differ = sum(len(r["placements"]["fit_disagreements"]) for r in runs)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
