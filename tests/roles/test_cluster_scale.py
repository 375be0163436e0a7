"""playbooks/cluster.yml at fleet scale (issue 31): with 5,000 generated nodes the whole-inventory checks still name
the variable and the node, however far down the inventory it sits, and nothing is written.

The inventory is the one benchmarks/bench_cluster.py times (host facts off, nothing read from the nodes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy  # noqa: E402
from bench_cluster import generated_inventory  # noqa: E402

# The inventory check lists the key-pool policy's modes (plugins/module_utils/common/pool_policy.py).
MODES = ", ".join(pool_policy.mode_names())

PLAYBOOK = REPO / "playbooks" / "cluster.yml"
NODES = 5000


def _spoil(inventory: Path, bad: dict) -> None:
    """Set the variables ``bad`` maps to on its hosts (inventory names)."""
    data = yaml.safe_load(inventory.read_text())
    hosts = data["all"]["children"]["tee_nodes"]["hosts"]
    for host, variables in bad.items():
        hosts[host].update(variables)
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
def existing(tmp_path) -> Path:
    """A manifest directory with a file in it: it must stay byte-identical."""
    out = tmp_path / "manifests"
    out.mkdir()
    (out / "99-mine.yaml").write_text("kind: Mine\n")
    return out


def _files(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _stages(directory: Path) -> list[str]:
    return [p.name for p in directory.parent.iterdir() if ".tee-staging-" in p.name]


@pytest.mark.slow
def test_bad_variables_anywhere_in_5000_nodes_are_all_named_and_nothing_is_written(
    ansible_playbook_cli, tmp_path, existing
):
    inventory = generated_inventory(tmp_path, NODES, tee_manifest_dir=str(existing))
    _spoil(inventory, {"node-00000": {"tee_node_gpu": "maybe"}, "node-04999": {"tee_key_pool_mode": "shared"}})
    before = _files(existing)
    proc = ansible_playbook_cli(PLAYBOOK, "-i", str(inventory), cwd=tmp_path)
    assert proc.returncode != 0
    # The whole inventory is checked before anything happens: the first node's problem and the last one's.
    assert "tee_node_gpu must be true or false, got 'maybe' for node node-00000" in proc.flat, proc.flat[-3000:]
    assert f"tee_key_pool_mode must be one of {MODES}, got 'shared' for node node-04999" in proc.flat
    assert "Read the TEE nodes' host facts" not in proc.flat
    assert _files(existing) == before and _stages(existing) == []


@pytest.mark.slow
def test_a_node_without_a_vendor_at_the_end_of_5000_stops_the_run_before_anything_is_written(
    ansible_playbook_cli, tmp_path, existing
):
    # Well-formed, so the input check passes: the collected nodes are refused as a whole, by name.
    inventory = generated_inventory(tmp_path, NODES, tee_manifest_dir=str(existing))
    _spoil(inventory, {"node-04999": {"tee_cpu_vendor": "auto"}})
    before = _files(existing)
    proc = ansible_playbook_cli(PLAYBOOK, "-i", str(inventory), cwd=tmp_path)
    assert proc.returncode != 0
    assert "No CPU vendor for node-04999: set tee_cpu_vendor" in proc.flat, proc.flat[-3000:]
    assert _files(existing) == before and _stages(existing) == []


@pytest.mark.slow
def test_a_node_whose_host_facts_cannot_be_read_commits_nothing(render, tmp_path):
    # Its vendor is in the inventory, so the plan goes ahead without its facts; the commit must not.
    hosts = {
        "tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"]},
        "snp-1": {"vendor": "amd", "tee_cpu_vendor": "amd", "tee_host_root": str(tmp_path / "no-such-root")},
    }
    proc, files = render(hosts)
    assert proc.returncode != 0
    assert "Reading the host facts or the GPU role failed on snp-1" in proc.flat, proc.flat[-3000:]
    assert files == {} and _stages(tmp_path / "manifests") == []
