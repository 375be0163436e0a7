#!/usr/bin/env python3
"""KubeVirt's own virt-handler device plugins against ``teesim serve``, beside the models that claim to be them.

KubeVirt v1.9.0's device manager (``upstream/kubevirt-plugins``: ``NewDeviceController`` + ``Run`` as
virt-handler calls them, feature gate ``WorkloadEncryptionTDX``) runs under ``scripts/teesim-serve-ns.sh
--cgroup --pid --run-dir tdx-qgs``: a private mount and PID namespace where the served root's
``var/lib/kubelet`` and ``sys/fs/cgroup`` are the real paths and ``/proc/1/root`` is that namespace's root,
so KubeVirt reads ``misc.capacity`` and dials the kubelet exactly where it would on a node. ``/run/tdx-qgs``
exists (empty), as on a host with the TDX quote generation service installed: KubeVirt's TDX plugin watches
that directory and stops (and re-registers after a back-off) when it cannot.

Per seed, one ``teesim serve`` run puts KubeVirt's plugin in the external-plugin column and the model beside
it for the same scenario and seed (``--compare``):

* ``serve-kubevirt-static-tdx`` (``upstream/scenarios``): KubeVirt's plugin is the only key pool, against the
  built-in ``kubevirt-static`` strategy;
* ``serve-double-pool-tdx`` (bundled): KubeVirt's plugin and NFD's pool for Kata (teesim's NFD model, which
  ``scripts/upstream_nfd.py`` checks against NFD's own rule engine on the same tree), against
  ``double-pool``.

Usage: scripts/upstream_kubevirt.py [--seeds N] [--jobs J] [--json FILE]
(prints a Markdown table with means and 95 % intervals over seeds; exit 3 without Go)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "simulator"))

from teesim.report.sweep import summarise  # noqa: E402
from teesim.sim.scenario import load_scenario  # noqa: E402

BUILD = REPO / "upstream" / "build.sh"
NS = REPO / "scripts" / "teesim-serve-ns.sh"
KUBEVIRT_VERSION = "v1.9.0"
SERVED = "external-plugin"
TDX = "devices.kubevirt.io/tdx"
# (scenario, the model that claims to be what is served)
PAIRS = (
    (str(REPO / "upstream" / "scenarios" / "serve-kubevirt-static-tdx.yaml"), "kubevirt-static"),
    ("serve-double-pool-tdx", "double-pool"),
)
METRICS = (
    ("failed_launches_by_consumer.kubevirt", "failed launches, KubeVirt"),
    ("failed_launches_by_consumer.kata", "failed launches, Kata"),
    ("failed_outside_race_window.kubevirt", "failed outside the race window, KubeVirt"),
    ("failed_outside_race_window.kata", "failed outside the race window, Kata"),
    ("guests_failed_to_start", "guests with a failed launch (Kata + KubeVirt)"),
    ("launched.kubevirt", "VMIs launched"),
    ("advertised_kubevirt_max", f"`{TDX}` advertised (max over the run)"),
    ("advertised_kubevirt_min", f"`{TDX}` advertised (min over the run)"),
    ("advertised_nfd_max", "NFD's `tdx.intel.com/keys` advertised (max over the run)"),
)


def build() -> Path:
    done = subprocess.run([str(BUILD), "kubevirt-plugins"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(done.returncode, done.stderr.strip())
    return Path(done.stdout.strip().rpartition("=")[2]) / "kubevirt-plugins"


class BuildError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def plugin_command(binary: Path, node: str = "tdx-node") -> str:
    """The ``--plugin`` command: KubeVirt's plugins in the serve namespace (``$TEESIM_HOST_ROOT`` is serve's)."""
    return " ".join(
        [
            shlex.quote(str(NS)),
            "--cgroup --pid --run-dir tdx-qgs $TEESIM_HOST_ROOT",
            shlex.quote(str(binary)),
            f"--node-name {node} --feature-gates WorkloadEncryptionTDX",
        ]
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "simulator"), env.get("PYTHONPATH")]))
    return env


def serve_once(binary: Path, scenario: str, model: str, seed: int) -> dict[str, Any]:
    """One served run of ``scenario`` at ``seed``: the report.json, KubeVirt's plugin log included."""
    root = Path(tempfile.mkdtemp(prefix="kv-", dir="/tmp"))  # short: the socket path has a length limit
    report = Path(tempfile.mkdtemp(prefix="kv-report-"))
    command = [
        *(sys.executable, "-m", "teesim.cli", "serve", scenario, "--root", str(root), "--seed", str(seed)),
        *("--report", str(report), "--no-png", "--compare", model, "--plugin", plugin_command(binary)),
        *("--fail-on", "not-registered", "--fail-on", "plugin-exit", "--registration-timeout", "60"),
    ]
    try:
        done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300, check=False)
        log = (report / "plugin-1.log").read_text(encoding="utf-8", errors="replace") if report.exists() else ""
        if done.returncode:
            raise RuntimeError(
                f"teesim serve {scenario} --seed {seed} exited {done.returncode}: {done.stderr[-3000:]}\n"
                f"KubeVirt's log (end):\n{log[-3000:]}"
            )
        result = json.loads((report / "report.json").read_text(encoding="utf-8"))
        result["plugin_log"] = log
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(report, ignore_errors=True)


def metrics_of(entry: dict[str, Any]) -> dict[str, float | None]:
    """The compared metrics of one strategy column of a report."""
    m = entry["metrics"]
    series = entry["timeline"]["tdx-node/tdx"]

    def column(name: str) -> list[float]:
        index = series["columns"].index(name)
        return [row[index] for row in series["rows"] if row[index] is not None]

    advertised, nfd = column("advertised"), column("nfd")
    return {
        "failed_launches_by_consumer.kubevirt": m["failed_launches_by_consumer"].get("kubevirt", 0),
        "failed_launches_by_consumer.kata": m["failed_launches_by_consumer"].get("kata", 0),
        "failed_outside_race_window.kubevirt": m["failed_outside_race_window"].get("kubevirt", 0),
        "failed_outside_race_window.kata": m["failed_outside_race_window"].get("kata", 0),
        "guests_failed_to_start": m["kata"]["pods_with_failed_launch"] + m["kubevirt"]["pods_with_failed_launch"],
        "launched.kubevirt": m["launched"].get("kubevirt", 0),
        "advertised_kubevirt_max": max(advertised) if advertised else None,
        "advertised_kubevirt_min": min(advertised) if advertised else None,
        "advertised_nfd_max": max(nfd) if nfd else None,
    }


def nfd_pool(scenario: str) -> dict[str, Any]:
    """NFD's own discovery and Kata's rule (``scripts/upstream_nfd.py``) on the served node's tree, beside the
    NFD model the double-pool runs use for Kata's pool: the pool NFD's rule engine would publish."""
    sys.path.insert(0, str(REPO / "scripts"))
    import upstream_nfd

    (spec,) = load_scenario(scenario).world.nodes
    binaries = upstream_nfd.build()
    with tempfile.TemporaryDirectory(prefix="nfd-served-") as tmp:
        tree = Path(tmp) / "root"
        upstream_nfd.write_tree(spec, tree)
        features = upstream_nfd.discover(binaries["nfd"], tree, spec.name)
        kata = upstream_nfd.dryrun(binaries["kubectl-nfd"], upstream_nfd.KATA_RULE, features, Path(tmp))
        model = upstream_nfd.model_resources(tree)
    return {"nfd": kata["extended_resources"], "model": model}


def sweep(binary: Path, seeds: list[int], jobs: int) -> list[dict[str, Any]]:
    """Every (scenario, seed): the served and the model columns' metrics."""
    tasks = [(scenario, model, seed) for scenario, model in PAIRS for seed in seeds]

    def one(task: tuple[str, str, int]) -> dict[str, Any]:
        scenario, model, seed = task
        report = serve_once(binary, scenario, model, seed)
        return {
            "scenario": Path(scenario).stem,
            "model": model,
            "seed": seed,
            "upstream": metrics_of(report["strategies"][SERVED]),
            "modelled": metrics_of(report["strategies"][model]),
            "serve": {k: report["strategies"][SERVED]["serve"][k] for k in ("plugins", "lag_s", "wall_s")},
        }

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, tasks))


def _cell(summary: dict[str, Any]) -> str:
    if summary["mean"] is None:
        return "n/a"
    ci = summary["ci95"]
    return f"{summary['mean']:g} [{ci[0]:g}, {ci[1]:g}]" if ci else f"{summary['mean']:g}"


def table(runs: list[dict[str, Any]], pool: dict[str, Any] | None = None) -> str:
    seeds = sorted({r["seed"] for r in runs})
    lines = [
        f"KubeVirt {KUBEVIRT_VERSION}'s own TDX device plugin under `teesim serve`, {len(seeds)} seeds "
        f"({seeds[0]}..{seeds[-1]}); mean [95 % interval] over seeds",
        "",
    ]
    if pool is not None:
        lines += [
            f"Kata's pool on the served node: NFD's rule engine publishes {_pairs(pool['nfd'])}, teesim's NFD model "
            f"(used by the double-pool runs) {_pairs(pool['model'])}.",
            "",
        ]
    lines += [
        "| scenario | model | metric | KubeVirt's plugin | model | equal in every seed |",
        "|---|---|---|---|---|---|",
    ]
    for scenario, model in ((Path(s).stem, m) for s, m in PAIRS):
        rows = [r for r in runs if r["scenario"] == scenario]
        lines += metric_lines(f"{scenario} | {model}", rows, METRICS)
    return "\n".join(lines) + "\n"


def metric_lines(first_cells: str, rows: list[dict[str, Any]], metrics: tuple[tuple[str, str], ...]) -> list[str]:
    """A table line per metric: upstream's and the model's summaries over ``rows``, and in how many seeds they agree."""
    lines = []
    for key, label in metrics:
        upstream = summarise([r["upstream"][key] for r in rows])
        modelled = summarise([r["modelled"][key] for r in rows])
        same = sum(1 for r in rows if r["upstream"][key] == r["modelled"][key])
        lines.append(f"| {first_cells} | {label} | {_cell(upstream)} | {_cell(modelled)} | {same}/{len(rows)} |")
    return lines


def _pairs(mapping: dict[str, str]) -> str:
    return ", ".join(f"`{k}`={v}" for k, v in sorted(mapping.items())) or "nothing"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30, help="seeds 1..N (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=6, help="served runs at once (default %(default)s)")
    parser.add_argument("--json", help="also write every run's metrics as JSON here")
    args = parser.parse_args(argv)
    try:
        binary = build()
    except BuildError as exc:
        print(f"upstream_kubevirt: {exc}", file=sys.stderr)
        return 3 if exc.status == 3 else 1
    runs = sweep(binary, list(range(1, args.seeds + 1)), args.jobs)
    sys.stdout.write(table(runs, nfd_pool("serve-double-pool-tdx")))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
