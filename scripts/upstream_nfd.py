#!/usr/bin/env python3
"""NFD's own discovery and rule engine on teesim's host trees, against the collection's plan and teesim's model.

For every kernel profile teesim ships (:data:`PROFILES`) this writes the node's host tree, runs NFD v0.19.0's
``nfd export features`` over it the way NFD's worker DaemonSet sees a host (NFD's container link flags,
``hostpath.pathPrefix=/host-``, and the DaemonSet's host mounts ``/host-sys``, ``/host-boot``,
``/host-etc/os-release``, ``/host-usr/lib``, ``/host-lib``, ``/host-proc/swaps``, in a private mount namespace
rooted in an otherwise empty directory), then evaluates with NFD's rule engine (``kubectl-nfd dryrun``):

* Kata's ``kata-tee-keys`` rule (``upstream/nfd/kata-tee-keys.yaml``), compared with teesim's NFD model
  (``teesim.cluster.nfd.discover``, which claims to be that rule): extended resources;
* the collection's NodeFeatureRule (``nfd_tee_rules``: ``key_pools.plan`` rendered by
  ``nfd_rules.node_feature_rule``, the node's ``sev_asids`` read by the collection's host reader as
  ``tee_host_info`` does), compared with what the plan says the node gets: the vendor's label where its
  TEE is enabled in KVM, and its key resource = the node's ``misc.capacity`` (the SNP range with
  ciphertext hiding), none where the capacity has no such line.

nfd-master drops an extended resource whose ``@feature.element`` is missing (``filterExtendedResource``
returns the lookup error); ``kubectl-nfd dryrun`` reports the same lookup error and leaves it out, so a
missing element is "not advertised" on both sides.

Usage: scripts/upstream_nfd.py [--json FILE]  (prints a Markdown table; exit 1 on any difference, 3 without Go)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "simulator"))

from teesim._collection import collection_module  # noqa: E402
from teesim.cluster import nfd as nfd_model  # noqa: E402
from teesim.kernel.node import Node, NodeSpec  # noqa: E402
from teesim.kernel.profiles import CURRENT, NO_MISC, OLD  # noqa: E402

key_pools = collection_module("plugins.module_utils.cluster.key_pools")
nfd_rules = collection_module("plugins.module_utils.cluster.nfd_rules")
host_facts = collection_module("plugins.module_utils.host.host_facts")
preflight = collection_module("plugins.module_utils.host.preflight")
host_reader = collection_module("plugins.module_utils.common.host_reader")
tee_registry = collection_module("plugins.module_utils.common.tee_registry")

NFD_VERSION = "v0.19.0"
KATA_RULE = REPO / "upstream" / "nfd" / "kata-tee-keys.yaml"
BUILD = REPO / "upstream" / "build.sh"
NODE = "tee-node-1"
# NFD's worker DaemonSet (deployment/components/common/worker-mounts.yaml, v0.19.0): host path -> mount point.
DAEMONSET_MOUNTS = (
    ("boot", "host-boot"),
    ("etc/os-release", "host-etc/os-release"),
    ("sys", "host-sys"),
    ("proc/swaps", "host-proc/swaps"),
    ("usr/lib", "host-usr/lib"),
    ("lib", "host-lib"),
)


# Directories every Linux host's sysfs has, which teesim's trees leave out (no NIC, PCI, USB or block device
# modelled): present and empty, as on a host without such devices. ``nfd export features`` stops at the first
# source that fails (its network, pci, usb and storage sources fail on a missing directory), where the worker
# would log the error and go on.
EMPTY_SYSFS_DIRS = ("sys/class/net", "sys/bus/pci/devices", "sys/bus/usb/devices", "sys/block")


@dataclass(frozen=True)
class Profile:
    name: str
    spec: NodeSpec
    what: str


PROFILES = (
    Profile("tdx-6.16", NodeSpec(name=NODE, vendor="intel", profile=CURRENT, capacity={"tdx": 63}), "TDX, 6.16+"),
    Profile(
        "tdx-no-misc-resource",
        NodeSpec(name=NODE, vendor="intel", profile=CURRENT, capacity={"tdx": 63}, tdx_misc=False),
        "KVM TDX (a backport) without the tdx misc resource",
    ),
    Profile(
        "tdx-kvm-off",
        NodeSpec(name=NODE, vendor="intel", profile=CURRENT, capacity={"tdx": 63}, kvm_tdx="N"),
        "kvm_intel tdx=N beside a tdx misc line (teesim node build --kvm-tdx N)",
    ),
    Profile("tdx-pre-6.6", NodeSpec(name=NODE, vendor="intel", profile=OLD, capacity={"tdx": 31}), "TDX, pre-6.6 misc"),
    Profile(
        "tdx-no-misc",
        NodeSpec(name=NODE, vendor="intel", profile=NO_MISC, capacity={"tdx": 63}),
        "TDX, no misc controller",
    ),
    Profile("snp", NodeSpec(name=NODE, vendor="amd", capacity={"sev": 410, "sev_es": 99}), "SEV-SNP, 6.16+"),
    Profile(
        "snp-ciphertext-hiding",
        NodeSpec(name=NODE, vendor="amd", capacity={"sev": 410, "sev_es": 99}, ciphertext_hiding_asids=64),
        "SEV-SNP with ciphertext hiding (64 SNP ASIDs)",
    ),
    Profile(
        "snp-no-misc",
        NodeSpec(name=NODE, vendor="amd", profile=NO_MISC, capacity={"sev": 410, "sev_es": 99}),
        "SEV-SNP, no misc controller",
    ),
)


def build() -> dict[str, Path]:
    """The cached NFD build (``upstream/build.sh nfd``); exit status 3 means no Go."""
    done = subprocess.run([str(BUILD), "nfd"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(done.returncode, done.stderr.strip())
    path = done.stdout.strip().rpartition("=")[2]
    return {"nfd": Path(path) / "nfd", "kubectl-nfd": Path(path) / "kubectl-nfd"}


class BuildError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def write_tree(spec: NodeSpec, root: Path) -> None:
    for rel, text in Node(spec).files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for rel in EMPTY_SYSFS_DIRS:
        (root / rel).mkdir(parents=True, exist_ok=True)


# Runs inside `unshare --mount`: an empty tmpfs root holding the binary and the DaemonSet's host mounts.
_IN_NAMESPACE = r"""
set -euo pipefail
tree="$1" nfd="$2" top="$3"
shift 3
mount -t tmpfs nfd-worker "$top"
mkdir -p "$top/proc" "$top/tmp"
touch "$top/nfd"
mount --bind "$nfd" "$top/nfd"
mount -t proc proc "$top/proc"
while [[ $# -gt 0 ]]; do
  src="$tree/$1" dst="$top/$2"
  shift 2
  if [[ -d "$src" ]]; then mkdir -p "$dst"; mount --rbind "$src" "$dst"
  elif [[ -e "$src" ]]; then mkdir -p "$(dirname "$dst")"; touch "$dst"; mount --bind "$src" "$dst"
  else mkdir -p "$dst"; fi
done
exec chroot "$top" /nfd export features
"""


def discover(nfd: Path, tree: Path, node_name: str) -> dict[str, Any]:
    """``nfd export features`` over ``tree`` as NFD's worker pod sees its host; the features JSON."""
    with tempfile.TemporaryDirectory(prefix="nfd-worker-") as top:
        mounts = [part for pair in DAEMONSET_MOUNTS for part in pair]
        userns = ["--map-root-user"] if os.getuid() else []
        done = subprocess.run(
            [
                *("unshare", *userns, "--mount", "--propagation", "private", "bash", "-c", _IN_NAMESPACE),
                *("nfd-worker", str(tree), str(nfd), top, *mounts),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_NAME": node_name},
            check=False,
        )
    if done.returncode:
        raise RuntimeError(f"nfd export features failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


_SECTION = re.compile(r"^\*\*\*\t(Labels|Extended Resources|Taints|Annotations)\t\*\*\*$")


def dryrun(kubectl_nfd: Path, rule: dict | Path, features: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """``kubectl-nfd dryrun`` of ``rule`` against a NodeFeature carrying ``features``: labels, extended
    resources and the lookup errors NFD reported (the resources they concern are left out, as nfd-master does)."""
    node_feature = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": NODE},
        "spec": {"features": features},
    }
    nf_path = workdir / "nodefeature.json"
    nf_path.write_text(json.dumps(node_feature), encoding="utf-8")
    if isinstance(rule, Path):
        rule_path = rule
    else:
        rule_path = workdir / "rule.json"
        rule_path.write_text(json.dumps(rule), encoding="utf-8")
    done = subprocess.run(
        [str(kubectl_nfd), "dryrun", "-f", str(rule_path), "-n", str(nf_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out: dict[str, Any] = {"labels": {}, "extended_resources": {}, "errors": done.stderr.strip().splitlines()}
    section = None
    for line in done.stdout.splitlines():
        match = _SECTION.match(line)
        if match:
            section = {"Labels": "labels", "Extended Resources": "extended_resources"}.get(match.group(1))
        elif section and "=" in line and not line.startswith("\t"):
            key, _, value = line.partition("=")
            out[section][key] = value
    if done.returncode not in (0, 1) or (done.returncode == 1 and not out["errors"]):
        raise RuntimeError(f"kubectl-nfd dryrun failed ({done.returncode}): {done.stdout}{done.stderr}")
    return out


def model_resources(tree: Path) -> dict[str, str]:
    """teesim's NFD model on the same tree (what the simulator advertises for Kata's rule)."""
    advertised = nfd_model.discover(lambda rel: (tree / rel).read_text(encoding="utf-8"))
    return {name: str(count) for name, count in sorted(advertised.items())}


def collection_rule_and_claim(tree: Path, vendor: str) -> tuple[dict, dict[str, Any]]:
    """The collection's NodeFeatureRule for this node (a Kata node, NFD its pool) and what its plan says
    the node gets, from the node as the collection's host reader sees it."""
    host = host_reader.HostReader(str(tree))
    facts = host_facts.gather_host_facts(host)
    facts = preflight.gather_preflight(host, facts)
    node = {"name": NODE, "vendor": vendor, "consumers": ["kata"], "mode": "nfd", "sev_asids": facts["sev_asids"]}
    plan = key_pools.plan([node])
    rule = nfd_rules.node_feature_rule(plan, "confidential-tee-keys")
    res = key_pools.TEE_RESOURCES[vendor]
    entry = plan["nfd"][res.tee]
    tech = tee_registry.by_vendor(vendor)
    enabled = facts["kvm"][tech.kvm].get(tech.kvm_param)
    # The collection's reading of the kvm module parameter NFD's rule matches on (True, False, or None: unread).
    labels = {entry["label"]: "true"} if enabled is True else {}
    resources: dict[str, str] = {}
    static = entry["static_values"].get(NODE)
    capacity = _capacity(facts, res.misc)
    if labels and NODE in entry["resource_nodes"]:
        if static is not None:
            resources[entry["resource"]] = str(static)
        elif capacity:  # the kernel prints no line for a capacity of 0 (misc.c, misc_cg_capacity_show)
            resources[entry["resource"]] = str(capacity)
    return rule, {"labels": labels, "extended_resources": resources}


def _capacity(facts: dict, misc: str) -> int | None:
    entry = ((facts.get("capacity") or {}).get("resources") or {}).get(misc) or {}
    value = entry.get("capacity") if isinstance(entry, dict) else entry
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_profile(binaries: dict[str, Path], profile: Profile) -> dict[str, Any]:
    """One profile: NFD's features, both rules evaluated by NFD, the model's and the plan's claims."""
    with tempfile.TemporaryDirectory(prefix=f"nfd-{profile.name}-") as tmp:
        tree = Path(tmp) / "root"
        write_tree(profile.spec, tree)
        features = discover(binaries["nfd"], tree, NODE)
        security = features.get("attributes", {}).get("cpu.security", {}).get("elements", {})
        kata = dryrun(binaries["kubectl-nfd"], KATA_RULE, features, Path(tmp))
        rule, claim = collection_rule_and_claim(tree, profile.spec.vendor)
        ours = dryrun(binaries["kubectl-nfd"], rule, features, Path(tmp))
        model = model_resources(tree)
    kata_tee = {k: v for k, v in kata["extended_resources"].items()}
    return {
        "profile": profile.name,
        "what": profile.what,
        "cpu_security": {k: v for k, v in sorted(security.items()) if k.startswith(("tdx", "sev"))},
        "kata_rule": {"nfd": kata, "model": {"extended_resources": model}},
        "collection_rule": {"nfd": ours, "plan": claim},
        "kata_equal": kata_tee == model,
        "collection_equal": ours["labels"] == claim["labels"]
        and ours["extended_resources"] == claim["extended_resources"],
    }


def _fmt(mapping: dict[str, str]) -> str:
    return ", ".join(f"`{k}`={v}" for k, v in sorted(mapping.items())) or "none"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        f"NFD {NFD_VERSION} (`nfd export features` as its worker DaemonSet sees a host, `kubectl-nfd dryrun`) "
        "on teesim's host trees",
        "",
        "| kernel profile | NFD `cpu.security` | Kata's `kata-tee-keys`: NFD | teesim model | equal "
        "| collection's rule: NFD | plan | equal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        kata, ours = r["kata_rule"], r["collection_rule"]
        lines.append(
            f"| {r['profile']} ({r['what']}) | {_fmt(r['cpu_security'])} "
            f"| {_fmt(kata['nfd']['extended_resources'])}; labels {_fmt(kata['nfd']['labels'])} "
            f"| {_fmt(kata['model']['extended_resources'])} | {'yes' if r['kata_equal'] else '**NO**'} "
            f"| {_fmt(ours['nfd']['extended_resources'])}; labels {_fmt(ours['nfd']['labels'])} "
            f"| {_fmt(ours['plan']['extended_resources'])}; labels {_fmt(ours['plan']['labels'])} "
            f"| {'yes' if r['collection_equal'] else '**NO**'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        binaries = build()
    except BuildError as exc:
        print(f"upstream_nfd: {exc}", file=sys.stderr)
        return 3 if exc.status == 3 else 1
    results = [check_profile(binaries, profile) for profile in PROFILES]
    sys.stdout.write(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0 if all(r["kata_equal"] and r["collection_equal"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
