"""``teesim fleet build``: a simulated mixed fleet, its host trees and its Kubernetes objects.

Writes, under ``--out``:

* ``nodes/<name>/``: a host tree per node (``host_root`` for the collection's modules), built by the kernel
  model (:func:`teesim.kernel.cli.build_node_tree`) or, for ``gpu-h100``, from the real H100 capture in
  ``../shared/reference/hosts/h100-cc-off`` (skipped with a note when the reference is absent);
* ``kubernetes/{nodes,pods,runtimeclasses,nodefeaturerules}.json``: what ``kubectl get -o json`` would
  return for the same cluster (see :mod:`teesim.cluster.k8s_objects`);
* ``inventory.yml``: the group ``tee_nodes`` with a local-connection host per node (``tee_host_root``,
  ``tee_node_name`` and, for the GPU node, ``tee_nvidia_smi_path``).

The nodes and what each demonstrates:

* ``tdx-1``: 63 TDX keys advertised twice (NFD ``tdx.intel.com/keys`` for Kata and KubeVirt's
  ``devices.kubevirt.io/tdx``): a double pool; 20 keys in use, 14 by running pods, 6 by VMs in
  ``machine.slice`` outside Kubernetes;
* ``tdx-2``: the BIOS key split now gives 31 keys; KubeVirt's plugin started before TDX was ready and
  latched 0 (stale advertiser);
* ``snp-1``: every ASID is an SEV-ES ASID (no ``sev`` line): NFD's prefix match advertises 99 SEV ASIDs;
  SEV-ES guests use 12 ASIDs that no resource counts; RuntimeClass ``kata-snp`` requests
  ``sev-snp.amd.com/esids``, which nothing advertises;
* ``tdx-old``: a 6.1 kernel with a KVM TDX backport but no ``tdx`` misc resource: keys come from MSR 0x87;
* ``tdx-nomisc``: a 5.10 kernel without the misc controller or KVM TDX: not ready;
* ``gpu-h100``: the real H100 host (CC capable, CC off, not ready; no TDX/SNP).

``copies`` repeats the mix (names get a ``-<n>`` suffix) for benchmarks over many hosts.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teesim._collection import (
    KUBEVIRT_GENERIC_DEVICES,
    KUBEVIRT_SEV,
    KUBEVIRT_TDX,
    NFD_FEATURE_SEV_ASIDS,
    NFD_FEATURE_TDX_KEYS,
    NFD_SEV_ASIDS,
    NFD_SNP_ESIDS,
    NFD_TDX_KEYS,
)
from teesim.cluster import k8s_objects as k8s
from teesim.kernel.capture import build_capture_tree
from teesim.kernel.cli import build_node_tree

H100_CAPTURE = Path("hosts") / "h100-cc-off"
TDX_LABEL = {"intel.feature.node.kubernetes.io/tdx": "true"}
SNP_LABEL = {"amd.feature.node.kubernetes.io/snp": "true"}

KATA_TDX = k8s.runtime_class("kata-tdx", "kata-qemu-tdx", {NFD_TDX_KEYS: "1"}, TDX_LABEL)
KATA_SNP = k8s.runtime_class("kata-snp", "kata-qemu-snp", {NFD_SNP_ESIDS: "1"}, SNP_LABEL)
RULES = [
    k8s.node_feature_rule(
        "intel-tdx",
        [
            {
                "name": "intel.tdx",
                "labels": dict(TDX_LABEL),
                "extendedResources": {NFD_TDX_KEYS: NFD_FEATURE_TDX_KEYS},
                "matchFeatures": [{"feature": "cpu.security", "matchExpressions": {"tdx.enabled": {"op": "Exists"}}}],
            }
        ],
    ),
    k8s.node_feature_rule(
        "amd-sev",
        [
            {
                "name": "amd.sev",
                "labels": {"amd.feature.node.kubernetes.io/sev": "true"},
                "extendedResources": {NFD_SEV_ASIDS: NFD_FEATURE_SEV_ASIDS},
                "matchFeatures": [{"feature": "cpu.security", "matchExpressions": {"sev.enabled": {"op": "Exists"}}}],
            },
            {
                "name": "amd.sev-snp",
                "labels": dict(SNP_LABEL),
                "matchFeatures": [
                    {"feature": "cpu.security", "matchExpressions": {"sev.snp.enabled": {"op": "Exists"}}}
                ],
            },
        ],
    ),
]


@dataclass
class NodePlan:
    """One simulated node: how to build its tree, what its Node advertises, which pods run on it."""

    name: str
    address: str
    tree: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    extended: dict[str, str] = field(default_factory=dict)
    pods: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, name, phase)
    os_image: str = "Ubuntu 24.04.3 LTS"


def _pods(prefix: str, kind: str, count: int, phase: str = "Running") -> list[tuple[str, str, str]]:
    return [(kind, f"{prefix}-{n}", phase) for n in range(count)]


def default_plans() -> list[NodePlan]:
    kubevirt = dict.fromkeys(KUBEVIRT_GENERIC_DEVICES, "1k")
    return [
        NodePlan(
            "tdx-1",
            "10.0.0.11",
            tree={
                "vendor": "intel",
                "capacity": {"tdx": 63},
                "charges": [("kubepods.slice", "tdx", 14), ("machine.slice", "tdx", 6)],
                "registers": True,
            },
            labels=dict(TDX_LABEL),
            extended={**kubevirt, KUBEVIRT_TDX: "63", NFD_TDX_KEYS: "63"},
            pods=_pods("kata-web", "kata-tdx", 8)
            + _pods("td-vm", "kubevirt-tdx", 6)
            + _pods("kata-batch", "kata-tdx", 1, "Pending")
            + _pods("kata-job", "kata-tdx", 2, "Succeeded"),
        ),
        NodePlan(
            "tdx-2",
            "10.0.0.12",
            tree={"vendor": "intel", "capacity": {"tdx": 31}, "charges": [("kubepods.slice", "tdx", 3)]},
            labels=dict(TDX_LABEL),
            extended={**kubevirt, KUBEVIRT_TDX: "0", NFD_TDX_KEYS: "31"},
            pods=_pods("kata-api", "kata-tdx", 3),
        ),
        NodePlan(
            "snp-1",
            "10.0.0.21",
            tree={
                "vendor": "amd",
                "capacity": {"sev": 0, "sev_es": 99},
                "charges": [("kubepods.slice", "sev_es", 9), ("machine.slice", "sev_es", 3)],
                "registers": True,
            },
            labels={"amd.feature.node.kubernetes.io/sev": "true", **SNP_LABEL},
            extended={**kubevirt, KUBEVIRT_SEV: "110", NFD_SEV_ASIDS: "99"},
            pods=_pods("snp-vm", "kubevirt-sev", 9),
        ),
        NodePlan(
            "tdx-old",
            "10.0.0.13",
            tree={"vendor": "intel", "profile": "old", "capacity": {"tdx": 31}, "tdx_misc": False, "registers": True},
            labels=dict(TDX_LABEL),
            extended=dict(kubevirt),
            os_image="Ubuntu 22.04.5 LTS",
        ),
        NodePlan(
            "tdx-nomisc",
            "10.0.0.14",
            tree={"vendor": "intel", "profile": "no-misc", "kvm_tdx": "absent"},
            extended=dict(kubevirt),
            os_image="Debian GNU/Linux 11 (bullseye)",
        ),
    ]


def _pod_objects(plan: NodePlan, name: str) -> list[dict[str, Any]]:
    objects = []
    for kind, pod_name, phase in plan.pods:
        pod_name = f"{name}-{pod_name}"
        if kind == "kata-tdx":
            objects.append(k8s.kata_pod(pod_name, name, KATA_TDX, phase))
        elif kind == "kubevirt-tdx":
            objects.append(k8s.virt_launcher_pod(pod_name, name, KUBEVIRT_TDX, phase))
        elif kind == "kubevirt-sev":
            objects.append(k8s.virt_launcher_pod(pod_name, name, KUBEVIRT_SEV, phase))
    return objects


def _host(root: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "tee_host_root": str(root),
        "tee_node_name": name,
        **extra,
    }


def _gpu_node(out: Path, reference: Path | None, suffix: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The H100 capture as a node (host vars, Node object), or ``None`` when the reference is absent."""
    capture = reference / H100_CAPTURE if reference else None
    if capture is None or not (capture / "host-probe.txt").is_file():
        return None
    name = "gpu-h100" + suffix
    root = out / "nodes" / name
    smi = build_capture_tree(capture, root)
    release = (root / "proc/sys/kernel/osrelease").read_text().strip()
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    node = k8s.node(name, "10.0.0.31", labels, {"nvidia.com/gpu": "1"}, release, "Ubuntu 24.04.3 LTS")
    return _host(root, name, tee_nvidia_smi_path=str(smi)), node


def build_fleet(out: Path, reference: Path | None = None, copies: int = 1) -> dict[str, Any]:
    """Write the fleet under ``out``; returns ``{"nodes": [...], "notes": [...]}``."""
    hosts, nodes, pods, notes = {}, [], [], []
    for copy in range(copies):
        suffix = "" if copies == 1 else f"-{copy}"
        for plan in default_plans():
            name = plan.name + suffix
            root = out / "nodes" / name
            tree = dict(plan.tree)
            node = build_node_tree(root, name=name, **tree)
            hosts[name] = _host(root, name)
            release = node.spec.profile.release
            nodes.append(k8s.node(name, plan.address, plan.labels, plan.extended, release, plan.os_image))
            pods += _pod_objects(plan, name)
        gpu = _gpu_node(out, reference, suffix)
        if gpu is None:
            notes.append(f"gpu-h100 left out: no H100 capture under {reference or '../shared/reference'}")
        else:
            hosts[gpu[1]["metadata"]["name"]] = gpu[0]
            nodes.append(gpu[1])
    kube = out / "kubernetes"
    kube.mkdir(parents=True, exist_ok=True)
    documents = {
        "nodes.json": nodes,
        "pods.json": pods,
        "runtimeclasses.json": [KATA_TDX, KATA_SNP],
        "nodefeaturerules.json": RULES,
    }
    for filename, objects in documents.items():
        (kube / filename).write_text(json.dumps(k8s.as_list(objects), indent=2, sort_keys=True) + "\n")
    (out / "inventory.yml").write_text(yaml.safe_dump({"tee_nodes": {"hosts": hosts}}, sort_keys=True))
    return {"nodes": sorted(hosts), "notes": notes}


def default_reference() -> Path | None:
    for candidate in (
        Path(__file__).resolve().parents[3].parent / "shared" / "reference",
        Path("/work/shared/reference"),
    ):
        if candidate.is_dir():
            return candidate
    return None


def _cmd_build(args: argparse.Namespace) -> int:
    reference = Path(args.reference) if args.reference else default_reference()
    summary = build_fleet(Path(args.out), reference, args.copies)
    print(f"wrote {args.out}: {len(summary['nodes'])} nodes ({', '.join(summary['nodes'])})")
    for note in summary["notes"]:
        print("note: " + note)
    return 0


def register(subparsers: Any) -> None:
    fleet = subparsers.add_parser("fleet", help="a simulated mixed fleet: host trees and Kubernetes objects")
    fleet_sub = fleet.add_subparsers(dest="fleet_command", metavar="ACTION")
    fleet_sub.required = True
    build = fleet_sub.add_parser("build", help="write node trees, kubernetes/*.json and inventory.yml")
    build.add_argument("--out", required=True, help="directory to write")
    build.add_argument(
        "--reference", help="../shared/reference (real host captures); default: found beside the checkout"
    )
    build.add_argument("--copies", type=int, default=1, help="repeat the mix (for benchmarks)")
    build.set_defaults(func=_cmd_build)
