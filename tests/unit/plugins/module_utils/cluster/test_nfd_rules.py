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
