# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Adding a TEE technology is a record in the registry plus its names and facts: a toy TEE ("toy-cca", CPU vendor
``arm``), added to a copy of the tree, reaches the inventory check, the key-pool plan, the NodeFeatureRule, the
Kata RuntimeClasses, KubeVirt's feature gate, the fleet report's remedies, the module's choices and teesim's
simulated host, which the host facts then read as that TEE's host (issue 44's "done when": a TEE in at most 6
files plus its tests).

The files it changes: the registry record (``common/tee_registry.py``), its names (``common/tee.py``: the misc
resource, the extended resources, the vendor), its facts probe (``host/host_facts.py``), its simulated host
(``simulator/teesim/kernel/tee_hosts.py``) and the vendor in the module's documented choices (YAML cannot import
the registry; ``test_tee_registry.py`` checks them). What it does not get: preflight checks (the preflight
verdict says it has none for the TEE), a host role with kernel arguments, a teesim strategy or scenario.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[5]
LIMIT = 6  # issue 44: a TEE in at most 6 files plus its tests

REGISTRY = Path("plugins", "module_utils", "common", "tee_registry.py")
VOCABULARY = Path("plugins", "module_utils", "common", "tee.py")
FACTS = Path("plugins", "module_utils", "host", "host_facts.py")
TEESIM_HOSTS = Path("simulator", "teesim", "kernel", "tee_hosts.py")
MODULE = Path("plugins", "modules", "tee_key_pools.py")

# (file, old, new): each old text must occur exactly once.
EDITS = (
    (
        VOCABULARY,
        'INTEL = "intel"\n',
        'ARM = "arm"\nNFD_CCA_KEYS = "cca.arm.example/keys"\nKUBEVIRT_CCA = "devices.kubevirt.io/cca"\n'
        'NFD_FEATURE_CCA_REALMS = "@cpu.security.cca.realms"\nINTEL = "intel"\n',
    ),
    (VOCABULARY, 'TDX = "tdx"\n', 'TDX = "tdx"\nCCA = "cca"\n'),
    (VOCABULARY, "MISC_RESOURCES = (SEV, SEV_ES, TDX)", "MISC_RESOURCES = (SEV, SEV_ES, TDX, CCA)"),
    (VOCABULARY, "MISC_REPORT_ORDER = (TDX, SEV, SEV_ES)", "MISC_REPORT_ORDER = (TDX, SEV, SEV_ES, CCA)"),
    (VOCABULARY, "VENDORS = (INTEL, AMD)", "VENDORS = (INTEL, AMD, ARM)"),
    (
        VOCABULARY,
        '    Technology("SEV-SNP", AMD, SEV_ES),\n',
        '    Technology("SEV-SNP", AMD, SEV_ES),\n    Technology("CCA", ARM, CCA),\n',
    ),
    (VOCABULARY, "VENDOR_KEY_POOL = {", "VENDOR_KEY_POOL = {ARM: CCA, "),
    (VOCABULARY, "NFD_FEATURES = {", "NFD_FEATURES = {NFD_FEATURE_CCA_REALMS: CCA, "),
    (VOCABULARY, "NFD_KEYS = {", "NFD_KEYS = {CCA: NFD_CCA_KEYS, "),
    (VOCABULARY, "KUBEVIRT_KEYS = {", "KUBEVIRT_KEYS = {CCA: KUBEVIRT_CCA, "),
    (VOCABULARY, "EXTENDED_RESOURCES = (\n", "EXTENDED_RESOURCES = (\n    NFD_CCA_KEYS,\n    KUBEVIRT_CCA,\n"),
    (
        REGISTRY,
        "\n)\n\nVENDORS = ",
        """
    TeeTech(
        "toy-cca",
        "cca",
        "CCA",
        (tee.ARM, "ToyArmLimited", "Arm"),
        tee.CCA,
        nfd={
            "rule": "arm.cca",
            "label": "arm.feature.node.kubernetes.io/cca",
            "match": "cca.enabled",
            "resource": tee.NFD_CCA_KEYS,
            "feature": tee.NFD_FEATURE_CCA_REALMS,
        },
        kubevirt={
            "resource": tee.KUBEVIRT_CCA,
            "gate": "WorkloadEncryptionCCA",
            "counts_keys": True,
            "reads": "misc.capacity cca",
        },
        agent_reads="misc.capacity cca - keys held outside Kubernetes",
        host_role="cca_host",
        preflight="cca",
        kvm=("toy", "cca"),
    ),
)

VENDORS = """,
    ),
    (
        FACTS,
        '    facts["boot"] = boot_verdict(facts)\n',
        """    toy_loaded = reader.isdir("sys/module/kvm_toy")
    kvm["toy"] = {"loaded": toy_loaded, "cca": _read_param(reader, "sys/module/kvm_toy", "cca") if toy_loaded else None}
    enabled = kvm["toy"]["cca"] is True
    facts["cca"] = {"enabled": enabled, "ready": enabled, "reasons": [] if enabled else ["kvm_toy cca is not Y"]}
    facts["boot"] = boot_verdict(facts)
""",
    ),
    (
        TEESIM_HOSTS,
        "\n}\n\n\ndef host_profile",
        """
    "toy-cca": HostProfile(
        capacity={"cca": 8},
        cpu={"vendor_id": "ToyArmLimited", "model name": "Toy CCA host (simulated by teesim)", "flags": "fp asimd"},
        cmdline="BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet kvm_toy.cca=1",
        power_state="freeze mem",
        module_files=lambda _, capacity: {"sys/module/kvm_toy/parameters/cca": "YN"[not capacity.get("cca")] + "\\n"},
        registers=lambda _spec, _capacity: {},
    ),
}


def host_profile""",
    ),
    (MODULE, "        choices: [intel, amd]\n", "        choices: [intel, amd, arm]\n"),
)

# Run in the copy: everything that is keyed on the TEE, read through the copy's own modules.
PROBE = r"""
import json, sys
from pathlib import Path
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.cluster import inputs, key_pools, nfd_rules
from ansible_collections.confidential.tee.plugins.module_utils.cluster import runtimeclasses
from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.fleet import drift
from ansible_collections.confidential.tee.plugins.module_utils.host import host_facts, preflight
from ansible_collections.confidential.tee.plugins.modules import tee_key_pools
import teesim
from teesim.kernel.cli import build_node_tree
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

nfd = key_pools.plan([{"name": "cca-1", "vendor": "arm", "consumers": ["kata"], "mode": "nfd"}])
auto = key_pools.plan([{"name": "cca-1", "vendor": "arm", "consumers": ["kata", "kubevirt"]}])
build_node_tree(Path(sys.argv[1]), vendor="arm", name="cca-1")
facts = host_facts.gather_host_facts(HostReader(sys.argv[1]))
facts = preflight.gather_preflight(HostReader(sys.argv[1]), facts)
print(json.dumps({
    "registry": tee_registry.__file__,
    "teesim": teesim.__file__,
    "vendors": list(inputs.VENDORS),
    "node": nfd["nodes"]["cca-1"],
    "rules": nfd_rules.rules(nfd),
    "classes": runtimeclasses.kata_classes(nfd, gpu=True),
    "auto": {"mode": auto["nodes"]["cca-1"]["mode"], "kata": auto["kata"], "gates": auto["kubevirt"]["feature_gates"]},
    "shared": pool_policy.shared_modes("arm"),
    "remedy": drift.collection_remedies().get(("double_pool", "cca")),
    "choices": yaml.safe_load(tee_key_pools.DOCUMENTATION)["options"]["nodes"]["suboptions"]["vendor"]["choices"],
    "tee_vendor": facts["tee_vendor"],
    "cca": facts["cca"],
    "boot": facts["boot"],
    "capacity": {r["name"]: r["capacity"] for r in facts["capacity"]["resources"].values()}
    if isinstance(facts["capacity"]["resources"], dict) else facts["capacity"]["resources"],
    "preflight": {k: facts["preflight"][k] for k in ("technology", "ready", "blocking")},
}))
"""


def _add_toy(tree: Path) -> None:
    for path, old, new in EDITS:
        source = (tree / path).read_text()
        assert source.count(old) == 1, f"{path}: {old!r} is not there once"
        (tree / path).write_text(source.replace(old, new))


def test_a_toy_tee_in_five_files_reaches_every_renderer_the_plan_and_teesim(tmp_path, toy_trees):
    collections, tree = toy_trees.collections, toy_trees.tree
    _add_toy(tree)

    changed = toy_trees.changed()
    assert changed == sorted(str(p) for p in (REGISTRY, VOCABULARY, FACTS, TEESIM_HOSTS, MODULE))
    assert len(changed) <= LIMIT

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(collections), str(tree / "simulator"), str(tree / "scripts")])
    )
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    env["TEESIM_NATIVE"] = "0"  # the copy's teesim is edited: it runs from source, as an edited checkout does
    host = tmp_path / "host"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(host)], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # The copy's modules answered, not the checkout's.
    assert seen["registry"].startswith(str(tree)) and seen["teesim"].startswith(str(tree))

    assert seen["vendors"] == ["auto", "intel", "amd", "arm"]
    assert seen["choices"] == ["intel", "amd", "arm"]
    node = seen["node"]
    assert (node["tee"], node["misc_resource"], node["mode"]) == ("cca", "cca", "nfd")
    assert node["pool"] == {"resource": "cca.arm.example/keys", "advertiser": "nfd", "counts_keys": True}

    # NFD: the label rule and the keys rule limited to the node, both matching the registry's feature.
    labels, keys = seen["rules"]
    assert labels == {
        "name": "arm.cca",
        "labels": {"arm.feature.node.kubernetes.io/cca": "true"},
        "matchFeatures": [{"feature": "cpu.security", "matchExpressions": {"cca.enabled": {"op": "Exists"}}}],
    }
    assert keys["name"] == "arm.cca.keys"
    assert keys["extendedResources"] == {"cca.arm.example/keys": "@cpu.security.cca.realms"}

    # Kata: both RuntimeClasses, on the TEE's label, charging its key.
    assert [c["metadata"]["name"] for c in seen["classes"]] == ["kata-qemu-cca", "kata-qemu-nvidia-gpu-cca"]
    for cls in seen["classes"]:
        assert cls["scheduling"]["nodeSelector"]["arm.feature.node.kubernetes.io/cca"] == "true"
        assert cls["overhead"]["podFixed"]["cca.arm.example/keys"] == "1"

    # KubeVirt counts the toy's keys, so auto shares its plugin's pool, gated by the registry's gate.
    assert seen["auto"] == {
        "mode": "kubevirt",
        "kata": {"cca": {"resource": "devices.kubevirt.io/cca", "nodes": ["cca-1"]}},
        "gates": ["WorkloadEncryptionCCA"],
    }
    assert seen["shared"] == ["kernel", "kubevirt"]
    assert "kubevirt (Kata's RuntimeClass overhead then requests KubeVirt's devices.kubevirt.io/cca" in seen["remedy"]

    # teesim's toy host, read by the collection's host facts: the TEE, its facts, its key pool.
    assert seen["tee_vendor"] == "arm"
    assert seen["cca"] == {"enabled": True, "ready": True, "reasons": []}
    assert seen["boot"] == {"ok": True, "vendor": "arm", "technology": "CCA", "reasons": []}
    assert seen["capacity"]["cca"] == 8
    assert seen["preflight"] == {
        "technology": "CCA",
        "ready": False,
        "blocking": ["preflight has no checks for CCA yet"],
    }
