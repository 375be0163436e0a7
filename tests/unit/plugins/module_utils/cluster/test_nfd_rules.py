"""nfd_rules: the NodeFeatureRule that advertises keys only where NFD is the pool."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import key_pools as kp
from ansible_collections.confidential.tee.plugins.module_utils.cluster import nfd_rules as nfd

SPLIT = [
    {"name": "kata-1", "vendor": "intel", "consumers": ["kata"]},
    {"name": "vm-1", "vendor": "intel", "consumers": ["kubevirt"]},
    {"name": "snp-1", "vendor": "amd", "consumers": ["kata"]},
]


def test_nfd_rule_advertises_keys_only_on_nfd_nodes():
    rule = nfd.node_feature_rule(kp.plan(SPLIT), "confidential-tee-keys")
    assert rule["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and "namespace" not in rule["metadata"]
    by_name = {r["name"]: r for r in rule["spec"]["rules"]}
    assert set(by_name) == {"intel.tdx", "intel.tdx.keys", "amd.sev-snp", "amd.sev-snp.keys"}
    assert by_name["intel.tdx"]["labels"] == {"intel.feature.node.kubernetes.io/tdx": "true"}
    assert by_name["intel.tdx.keys"]["extendedResources"] == {"tdx.intel.com/keys": "@cpu.security.tdx.total_keys"}
    assert by_name["intel.tdx.keys"]["matchFeatures"][1] == {
        "feature": "system.name",
        "matchExpressions": {"nodename": {"op": "In", "value": ["kata-1"]}},
    }
    assert by_name["amd.sev-snp.keys"]["extendedResources"] == {
        "sev-snp.amd.com/esids": "@cpu.security.sev.encrypted_state_ids"
    }


def test_nfd_rule_on_openshift_is_namespaced():
    rule = nfd.node_feature_rule(kp.plan(SPLIT[:2]), "r", "openshift", "openshift-nfd")
    assert rule["apiVersion"] == "nfd.openshift.io/v1alpha1" and rule["metadata"]["namespace"] == "openshift-nfd"
    with pytest.raises(kp.KeyPoolError, match="namespaced"):
        nfd.node_feature_rule(kp.plan(SPLIT[:2]), "r", "openshift")


def test_no_extended_resource_where_kubevirt_is_the_pool():
    plan = kp.plan([{"name": "t", "vendor": "intel", "consumers": ["kata", "kubevirt"]}])
    rules = nfd.rules(plan)
    assert [r["name"] for r in rules] == ["intel.tdx"] and "extendedResources" not in rules[0]


def _split(snp):
    return {"ciphertext_hiding": True, "snp": {"capacity": snp}, "sev_es": {"capacity": 99 - snp}}


def test_ciphertext_hiding_nodes_advertise_their_snp_range_not_the_joint_count():
    nodes = [
        {"name": "snp-plain", "vendor": "amd", "consumers": ["kata"], "sev_asids": {"ciphertext_hiding": False}},
        {"name": "snp-a", "vendor": "amd", "consumers": ["kata"], "sev_asids": _split(16)},
        {"name": "snp-b", "vendor": "amd", "consumers": ["kata"], "sev_asids": _split(16)},
        {"name": "snp-c", "vendor": "amd", "consumers": ["kata"], "sev_asids": _split(40)},
    ]
    plan = kp.plan(nodes)
    assert plan["nfd"]["snp"]["static_values"] == {"snp-a": 16, "snp-b": 16, "snp-c": 40}
    assert plan["nodes"]["snp-a"]["snp_asids"] == 16 and plan["nodes"]["snp-plain"]["snp_asids"] is None
    rules = {r["name"]: r for r in nfd.rules(plan)}
    assert rules["amd.sev-snp.keys"]["extendedResources"] == {
        "sev-snp.amd.com/esids": "@cpu.security.sev.encrypted_state_ids"
    }
    assert rules["amd.sev-snp.keys"]["matchFeatures"][1]["matchExpressions"]["nodename"]["value"] == ["snp-plain"]
    assert rules["amd.sev-snp.keys.snp-asids-16"]["extendedResources"] == {"sev-snp.amd.com/esids": "16"}
    assert rules["amd.sev-snp.keys.snp-asids-16"]["matchFeatures"][1]["matchExpressions"]["nodename"]["value"] == [
        "snp-a",
        "snp-b",
    ]
    assert rules["amd.sev-snp.keys.snp-asids-40"]["extendedResources"] == {"sev-snp.amd.com/esids": "40"}
    assert any("fixed at 16" in line for line in plan["summary"])


def test_ciphertext_hiding_with_an_unknown_snp_count_is_refused():
    broken = {"ciphertext_hiding": True, "snp": {"capacity": None}}
    with pytest.raises(kp.KeyPoolError, match=r"node snp-a: ciphertext hiding splits .* SNP count is None"):
        kp.plan([{"name": "snp-a", "vendor": "amd", "consumers": ["kata"], "sev_asids": broken}])
    with pytest.raises(kp.KeyPoolError, match="sev_asids must be the sev_asids fact"):
        kp.plan([{"name": "snp-a", "vendor": "amd", "consumers": ["kata"], "sev_asids": "16"}])


def test_an_snp_split_on_a_kubevirt_pool_warns():
    plan = kp.plan([{"name": "snp-vm", "vendor": "amd", "consumers": ["kubevirt"], "sev_asids": _split(8)}])
    assert any("only 8 ASIDs" in w and "EBUSY" in w for w in plan["warnings"])
    assert plan["nfd"]["snp"]["static_values"] == {}
