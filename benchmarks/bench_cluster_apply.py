#!/usr/bin/env python3
"""C3 (issue 31): ``playbooks/cluster.yml`` in apply mode against a live control plane, next to
``kubectl apply --server-side`` of the same objects. Prints figures and ratios from one run; asserts nothing.

On a control plane of this checkout's Kubernetes release (scripts/kube_control_plane.py, as the live tests start
it: NFD's, KataConfig's, MachineConfig's and KubeVirt's CRDs, ``--nodes`` Node objects registered as their kubelets
would), the playbook applies the objects for the generated inventory of bench_cluster.py (every ``--gpu-every``th
node a GPU node: its labels go to its Node, its kubelet drop-in to a simulated host tree), twice. Then, on a fresh
control plane with the same CRDs and Nodes, ``kubectl apply --server-side`` applies the same objects as the
playbook renders them in manifests mode (``tee_output: manifests``), twice.

For each run: wall and CPU seconds (the process tree), and the write requests the apiserver counted
(``apiserver_request_total`` from its /metrics, before and after: verbs POST, PUT, PATCH, DELETE, APPLY, with
and without dry run; the apiserver's own lease renewals left out). Target: the playbook's first run at most 2x
kubectl's, and its second run sends no write.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "simulator"), str(REPO / "scripts")]

from bench_cluster import generated_inventory  # noqa: E402
from kube_control_plane import ControlPlane, installed_kubevirt, kubevirt_crds  # noqa: E402
from playbook_timer import Run, run_playbook  # noqa: E402
from teesim.fixtures import k8s_objects  # noqa: E402

PLAYBOOK = REPO / "playbooks" / "cluster.yml"
CRDS = REPO.parent / "shared" / "reference" / "crds"
WRITES = ("POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE")
SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def start_plane(nodes: list[str]) -> ControlPlane:
    plane = ControlPlane().start()
    try:
        plane.install_crds(*(CRDS / f for f in ("nfd-api-crds.yaml", "kataconfigs.yaml", "machineconfigs.yaml")))
        plane.install_crds(*(p for p in kubevirt_crds() if p.name == "kubevirts.kubevirt.io.yaml"))
        plane.load_objects(
            [
                k8s_objects.node(name, f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", {}, {}, "6.16.0", "Debian 13")
                for i, name in enumerate(nodes)
            ]
            + [installed_kubevirt()]
        )
    except BaseException:
        plane.stop()
        raise
    return plane


def writes(plane: ControlPlane) -> Counter:
    """The apiserver's write requests so far, by (verb, dry run or not, resource)."""
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    counts: Counter = Counter()
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        labels = dict(LABEL.findall(match.group(1)))
        # The apiserver renews its own leases every 10 s (PUT leases): not the collection's, not kubectl's.
        if labels.get("verb") in WRITES and labels.get("resource") != "leases":
            dry = "dry-run" if labels.get("dry_run") else "real"
            counts[(labels["verb"], dry, labels.get("resource", "") + "/" + labels.get("subresource", ""))] += int(
                float(match.group(2))
            )
    return counts


def _summary(delta: Counter) -> str:
    by = Counter()
    for (verb, dry, _resource), n in delta.items():
        by[f"{verb}{' (dry run)' if dry == 'dry-run' else ''}"] += n
    real = sum(n for (_v, dry, _r), n in delta.items() if dry == "real")
    detail = ", ".join(f"{k} {v}" for k, v in sorted(by.items()) if v)
    return f"{real} writes ({detail or 'none'})"


def _measured(plane: ControlPlane, action) -> tuple[Run, Counter]:
    before = writes(plane)
    run = action()
    after = writes(plane)
    return run, after - before


def kubectl_apply(plane: ControlPlane, directory: Path) -> Run:
    command = [
        str(plane.bin_dir / "kubectl"),
        f"--kubeconfig={plane.admin_kubeconfig}",
        "apply",
        "--server-side",
        "--field-manager=confidential-tee",
        # The KubeVirt CR's feature gates have another manager (its installer); the playbook merge-patches them.
        "--force-conflicts",
        "-R",
        "-f",
        str(directory),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"kubectl apply failed:\n{done.stderr[-3000:]}")
    return Run(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def gpu_roots(directory: Path, names: list[str]) -> dict[str, str]:
    """A simulated host tree (``teesim node build``) for each GPU node, where its drop-ins are written."""
    template = directory / "host-template"
    teesim = Path(sys.executable).parent / "teesim"
    subprocess.run([str(teesim), "node", "build", "--out", str(template), "--vendor", "intel"], check=True)
    roots = {}
    for name in names:
        shutil.copytree(template, directory / "hosts" / name, symlinks=True)
        roots[name] = str(directory / "hosts" / name)
    return roots


def _row(label: str, run: Run, delta: Counter) -> str:
    return f"  {label:<34} {run.wall_s:7.1f} s wall {run.cpu_s:7.1f} s CPU   {_summary(delta)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpu-every", type=int, default=10, help="every Nth node a GPU node; 0: none")
    parser.add_argument("--forks", type=int, default=16)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    print(f"C3: cluster.yml, apply mode, {args.nodes} nodes, every {args.gpu_every}th a GPU node, forks {args.forks}")
    with tempfile.TemporaryDirectory(prefix="tee-cluster-apply-bench-") as tmp:
        directory = Path(tmp)
        # No containerd drop-in (its check runs the node's containerd, which the simulated hosts lack); no wait for
        # the GPU Operator's CC manager to report the mode (none runs here; kubectl does not wait either).
        inventory = generated_inventory(
            directory, args.nodes, args.gpu_every, gpu_cc_node_containerd=False, gpu_cc_node_wait_cc_state=False
        )
        data = yaml.safe_load(inventory.read_text())
        hosts = data["all"]["children"]["tee_nodes"]["hosts"]
        roots = gpu_roots(directory, [n for n, h in hosts.items() if h.get("tee_node_gpu")])
        for name, root in roots.items():
            hosts[name]["tee_host_root"] = root

        # The objects as manifests (no cluster needed), for kubectl.
        manifests = directory / "manifests"
        data["all"]["vars"]["tee_manifest_dir"] = str(manifests)
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        rendered = run_playbook(inventory, PLAYBOOK, args.forks, cwd=directory)
        files = sorted(p.relative_to(manifests) for p in manifests.rglob("*") if p.is_file())
        print(f"  manifests rendered in {rendered.wall_s:.1f} s wall: {', '.join(map(str, files))}", flush=True)

        results = {}
        started = time.perf_counter()
        plane = start_plane(list(hosts))
        print(f"  control plane up, {len(hosts)} Nodes registered in {time.perf_counter() - started:.1f} s", flush=True)
        try:
            data["all"]["vars"].update(tee_output="apply", tee_kubeconfig=str(plane.admin_kubeconfig))
            data["all"]["vars"].pop("tee_manifest_dir")
            inventory.write_text(yaml.safe_dump(data, sort_keys=False))
            for attempt in ("first", "second"):
                results[f"cluster.yml, {attempt} run"] = _measured(
                    plane, lambda: run_playbook(inventory, PLAYBOOK, args.forks, cwd=directory)
                )
                run, delta = results[f"cluster.yml, {attempt} run"]
                print(_row(f"cluster.yml, {attempt} run", run, delta), flush=True)
                print(f"    (load average {os.getloadavg()[0]:.1f} after the playbook's {attempt} run)", flush=True)
        finally:
            plane.stop()
        plane = start_plane(list(hosts))
        try:
            for attempt in ("first", "second"):
                results[f"kubectl apply --server-side, {attempt}"] = _measured(
                    plane, lambda: kubectl_apply(plane, manifests)
                )
            print(f"    (load average {os.getloadavg()[0]:.1f} after kubectl)", flush=True)
        finally:
            plane.stop()

    for label, (run, delta) in results.items():
        print(_row(label, run, delta))
    (pb, _), (kc, _) = results["cluster.yml, first run"], results["kubectl apply --server-side, first"]
    print(
        f"  first runs, cluster.yml / kubectl: {pb.wall_s / kc.wall_s:.2f}x wall, {pb.cpu_s / kc.cpu_s:.2f}x CPU"
        "   (target <= 2x)"
    )
    _pb2, d2 = results["cluster.yml, second run"]
    print(f"  second cluster.yml run: {_summary(d2)}   (target: no write)")
    for (verb, dry, res), n in sorted(d2.items()):
        if n:
            print(f"    {verb:<6} {dry:<8} {res:<40} {n}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
