# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Adding a key-pool mode is one entry in the policy: a toy mode, added to a copy of the tree and nowhere else,
reaches the inventory check, the cluster plan, the fleet report's remedies, the mode-to-strategy mapping and the
demo's conclusion (issue 44's "done when": a mode in at most 3 files; this one needs no advertiser, renderer or
docs change, so it is 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[5]
POLICY = Path("plugins", "module_utils", "common", "pool_policy.py")
# What the derived code reads: the collection's Python, the demo script and teesim.
# The toy goes first, before the kernel mode (which also counts external VMs), so that it is what every derived
# table shows first.
ANCHOR = "    # First: the one pool every consumer draws from"
# Kata, KubeVirt and external VMs share KubeVirt's pool; auto never picks it; modelled by an existing strategy.
TOY = (
    '    PoolMode("toy", "kubevirt", (KATA, KUBEVIRT, EXTERNAL), (), "reconciling", auto=False,'
    ' summary="one toy pool"),\n'
)

# Run in the copy: every derived table, read through the copy's own modules.
PROBE = r"""
import json, sys
from pathlib import Path
from ansible_collections.confidential.tee.plugins.module_utils.cluster import inputs, key_pools
from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy
from ansible_collections.confidential.tee.plugins.module_utils.fleet import drift
import demo, teesim
from teesim.strategies.base import STRATEGIES

node = {"name": "n1", "vendor": "intel", "consumers": ["kata", "kubevirt"], "mode": "toy"}
plan = key_pools.plan([node])
try:
    key_pools.plan([dict(node, vendor="amd")])
    amd = None
except key_pools.KeyPoolError as exc:
    amd = str(exc)
auto = key_pools.plan([dict(node, mode="auto")])["nodes"]["n1"]["mode"]
failed = {"failed_launches": 3, "failed_launches_by_consumer": {"kata": 3}, "kata": {"never_started": 0},
          "kubevirt": {"never_started": 0}, "pending_at_end": 0}
report = {"nodes": [{"capacity": {"tdx": 8}}], "strategies": {
    "double-pool": {"metrics": dict(failed, failed_launches=5)},
    "unified-reconciling": {"metrics": dict(failed, failed_launches=0)},
    "reconciling": {"metrics": failed}}}
print(json.dumps({
    "teesim": teesim.__file__,
    "policy": pool_policy.__file__,
    "modes": list(inputs.MODES),
    "plan": plan["nodes"]["n1"],
    "amd": amd,
    "auto": auto,
    "external": drift.collection_remedy("external_usage", "n1", None),
    "strategies": pool_policy.strategies(),
    "strategy_exists": pool_policy.mode("toy").strategy in STRATEGIES,
    "conclusion": demo.conclusion(report, Path("t.png")),
}))
"""


def test_a_toy_mode_in_the_policy_alone_reaches_every_consumer_of_it(tmp_path, toy_trees):
    collections, tree = toy_trees.collections, toy_trees.tree
    policy = (tree / POLICY).read_text()
    assert policy.count(ANCHOR) == 1, "the toy mode goes before the first entry of MODES"
    (tree / POLICY).write_text(policy.replace(ANCHOR, TOY + ANCHOR))
    assert toy_trees.changed() == [str(POLICY)]

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(collections), str(tree / "simulator"), str(tree / "scripts")])
    )
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # The copy's modules answered, not the checkout's.
    assert seen["policy"].startswith(str(tree)) and seen["teesim"].startswith(str(tree))

    assert seen["modes"] == ["auto", "toy", "kernel", "kubevirt", "nfd"]
    assert seen["plan"]["mode"] == "toy"
    assert seen["plan"]["pool"] == {
        "resource": "devices.kubevirt.io/tdx",
        "advertiser": "kubevirt",
        "counts_keys": True,
    }
    assert seen["plan"]["virt_handler"] is True and seen["plan"]["nfd_extended_resource"] is False
    # The policy's rule, not a mode name, refuses Kata's overhead on KubeVirt's AMD slots.
    assert seen["amd"].startswith("node n1: mode toy would point Kata's overhead at devices.kubevirt.io/sev")
    assert seen["auto"] == "kubevirt"  # auto=False: auto keeps choosing as before
    # The first mode that counts external VMs becomes the fleet report's remedy for them.
    assert seen["external"] == (
        "run confidential.tee.cluster with tee_key_pool_mode: toy for n1: its pool counts the keys of guests "
        "outside Kubernetes"
    )
    assert seen["strategies"] == {
        "toy": "reconciling",
        "kernel": "kernel-pool",
        "kubevirt": "kata-overhead-on-kubevirt",
        "nfd": "split-nodes",
    }
    assert seen["strategy_exists"] is True
    assert ", reconciling (one toy pool: confidential.tee.cluster with tee_key_pool_mode: toy) 3;" in seen["conclusion"]
