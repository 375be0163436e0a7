# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The key-pool policy decides as the planner always did, and every spelling of its mode list is its own."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee
from ansible_collections.confidential.tee.plugins.modules import tee_key_pools

ROOT = Path(__file__).resolve().parents[5]
CONSUMER_SETS = [c for n in range(3) for c in itertools.combinations((tee.KATA, tee.KUBEVIRT), n)]


def test_the_mode_list_is_auto_then_the_policy_modes():
    assert pool_policy.mode_names() == ("auto", "kernel", "kubevirt", "nfd")
    assert len(set(pool_policy.mode_names())) == len(pool_policy.mode_names())


@pytest.mark.parametrize("vendor", tee.VENDORS)
@pytest.mark.parametrize("consumers", CONSUMER_SETS)
def test_auto_chooses_as_the_planner_did_before_the_policy(vendor, consumers):
    # The rule key_pools.py spelled out until issue 44: KubeVirt's plugin where KubeVirt runs and can share.
    counts = vendor == tee.INTEL
    kata, kubevirt = tee.KATA in consumers, tee.KUBEVIRT in consumers
    assert pool_policy.auto_mode(vendor, consumers) == ("kubevirt" if kubevirt and (counts or not kata) else "nfd")


def test_what_each_mode_refuses():
    both = (tee.KATA, tee.KUBEVIRT)
    assert pool_policy.problems_of("nfd", tee.INTEL, both) == [("second_pool", tee.KUBEVIRT)]
    assert pool_policy.problems_of("kubevirt", tee.INTEL, both) == []
    assert pool_policy.problems_of("kubevirt", tee.AMD, both) == [("no_key_count", tee.KATA)]
    assert pool_policy.problems_of("kubevirt", tee.AMD, (tee.KUBEVIRT,)) == []
    assert pool_policy.shared_modes(tee.INTEL) == ["kernel", "kubevirt"]
    # The node agent's pool counts keys on AMD too: the one mode where SNP Kata and KubeVirt share a node.
    assert pool_policy.shared_modes(tee.AMD) == ["kernel"]
    assert pool_policy.problems_of("kernel", tee.AMD, both) == []
    assert pool_policy.modes_drawing(tee.EXTERNAL) == ["kernel"]
    assert pool_policy.apart_modes(tee.AMD) == ["nfd"]


def test_kubevirt_on_amd_renders_the_sev_slots_and_counts_keys_as_sev_esids():
    """One name per role: the plan charges what virt-handler serves (/dev/sev slots, not keys); the key-counting
    name is the SNP work's ASID pool, which fleet reports and teesim recognise."""
    kubevirt = pool_policy.ADVERTISERS["kubevirt"]
    assert kubevirt.resources[tee.AMD] == tee.KUBEVIRT_SEV and kubevirt.counts_keys[tee.AMD] is False
    assert kubevirt.key_resources[tee.SEV_ES] == tee.KUBEVIRT_SEV_ESIDS
    assert kubevirt.resources[tee.INTEL] == kubevirt.key_resources[tee.TDX] == tee.KUBEVIRT_TDX


def test_every_mode_names_a_known_advertiser_and_known_consumers():
    for mode in pool_policy.MODES:
        assert mode.advertiser in pool_policy.ADVERTISERS, mode
        assert set(mode.draws) | set(mode.refuses) <= set(tee.CONSUMERS), mode
        assert not set(mode.draws) & set(mode.refuses), mode
    for advertiser in pool_policy.ADVERTISERS.values():
        assert set(advertiser.resources) == set(advertiser.counts_keys) == set(pool_policy.TEE_RESOURCES), advertiser
    assert any(m.auto for m in pool_policy.MODES)


def test_the_module_choices_are_the_policy_modes():
    """YAML cannot import Python: the module's documented choices are checked against the policy."""
    doc = yaml.safe_load(tee_key_pools.DOCUMENTATION)
    assert doc["options"]["nodes"]["suboptions"]["mode"]["choices"] == list(pool_policy.mode_names())


def test_the_docs_mode_table_lists_the_policy_modes():
    text = (ROOT / "docs" / "key-pools.md").read_text()
    table = text.split("## The choices, per node", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M)
    assert rows == [m.name for m in pool_policy.MODES] + ["auto"]


def test_no_other_file_spells_the_mode_list():
    """Inventories, playbooks and roles point at docs/key-pools.md; the module documents the checked choices."""
    spelled = re.compile(r"auto\W{1,6}kubevirt\W{1,6}nfd")
    allowed = {Path("plugins/modules/tee_key_pools.py")}
    found = []
    for top in ("plugins", "roles", "playbooks", "scripts", "simulator/teesim", "docs"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".yml", ".yaml", ".md") and spelled.search(path.read_text(errors="replace")):
                found.append(path.relative_to(ROOT))
    assert set(found) <= allowed, found
