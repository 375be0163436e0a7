# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The TEE registry agrees with the vocabulary, the policy, the roles, preflight, the module docs and teesim."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.cluster import runtimeclasses
from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.host import preflight, readiness
from ansible_collections.confidential.tee.plugins.modules import tee_key_pools
from teesim.kernel.node import Node, NodeSpec
from teesim.kernel.tee_hosts import PROFILES

ROOT = Path(__file__).resolve().parents[5]
REGISTRY = tee_registry.REGISTRY


def test_every_record_is_unique_and_the_vendors_are_the_vocabulary_s():
    for field in ("key", "short", "vendor", "cpu_vendor", "misc", "teesim_profile"):
        values = [getattr(t, field) for t in REGISTRY]
        assert len(set(values)) == len(values), field
    assert tee_registry.VENDORS == tee.VENDORS
    assert {t.vendor: t.misc for t in REGISTRY} == tee.VENDOR_KEY_POOL


@pytest.mark.parametrize("tech", REGISTRY, ids=lambda t: t.key)
def test_a_record_names_only_the_vocabulary_s_resources(tech):
    assert tech.misc in tee.VENDOR_MISC_RESOURCES[tech.vendor]
    assert tech.nfd["resource"] == tee.NFD_KEYS[tech.misc]
    assert tee.NFD_FEATURES[tech.nfd["feature"]] == tech.misc
    assert tech.kubevirt["resource"] in tee.EXTENDED_RESOURCES
    # Where KubeVirt's plugin counts keys, it is the key-counting name the fleet report recognises.
    assert (tee.KUBEVIRT_KEYS.get(tech.misc) == tech.kubevirt["resource"]) is tech.kubevirt["counts_keys"]


@pytest.mark.parametrize("tech", REGISTRY, ids=lambda t: t.key)
def test_a_record_points_at_parts_that_exist(tech):
    defaults = yaml.safe_load((ROOT / "roles" / tech.host_role / "defaults" / "main.yml").read_text())
    assert defaults[f"{tech.host_role}_kernel_args"], "the host role owns the kernel arguments"
    assert tech.teesim_profile in PROFILES
    assert readiness.tee_vendor({"vendor": tech.cpu_vendor}) == tech.vendor
    assert runtimeclasses.class_name(tech.short, False) == tech.runtime_classes[0]
    assert runtimeclasses.class_name(tech.short, True) == tech.runtime_classes[1]


def test_the_policy_and_preflight_are_derived_from_the_registry():
    for tech in REGISTRY:
        res = pool_policy.TEE_RESOURCES[tech.vendor]
        assert (res.tee, res.misc, res.nfd_rule, res.nfd_label) == (
            tech.short,
            tech.misc,
            tech.nfd["rule"],
            tech.nfd["label"],
        )
        assert pool_policy.ADVERTISERS["kubevirt"].gates[tech.vendor] == tech.kubevirt["gate"]
    # The CPU TEE sections preflight has (skipped here: no CPU read).
    sections = {build({"cpu": {}}, {}, {})["id"] for build in (preflight.tdx_section, preflight.sev_section)}
    assert set(preflight.TEE_SECTION.values()) == sections


def test_the_module_documents_the_registry_s_vendors():
    """YAML cannot import Python: the documented choices are checked against the registry."""
    doc = yaml.safe_load(tee_key_pools.DOCUMENTATION)
    assert doc["options"]["nodes"]["suboptions"]["vendor"]["choices"] == list(tee_registry.VENDORS)


def test_lookups_refuse_what_the_registry_does_not_have():
    assert tee_registry.of_vendor("arm") is None and tee_registry.of_vendor(None) is None
    with pytest.raises(KeyError, match="no TEE for CPU vendor 'arm'; the registry has intel, amd"):
        tee_registry.by_vendor("arm")
    with pytest.raises(KeyError, match="no TEE 'cca'"):
        tee_registry.by_short("cca")
    with pytest.raises(KeyError, match="no TEE charges misc resource 'sev'"):
        tee_registry.of_misc(tee.SEV)
    assert tee_registry.vendor_choices() == "intel or amd"


@pytest.mark.parametrize("tech", REGISTRY, ids=lambda t: t.key)
def test_teesim_renders_each_tee_s_host_from_its_profile(tech):
    files = Node(NodeSpec(vendor=tech.vendor)).files()
    profile = PROFILES[tech.teesim_profile]
    assert f"vendor_id\t: {tech.cpu_vendor}\n" in files["proc/cpuinfo"]
    assert files["proc/cmdline"] == profile.cmdline + "\n"
    assert files[f"sys/module/kvm_{tech.kvm}/parameters/{tech.kvm_param}"] == "Y\n"
    with pytest.raises(ValueError, match="unknown vendor 'arm'; choose intel or amd"):
        Node(NodeSpec(vendor="arm"))
