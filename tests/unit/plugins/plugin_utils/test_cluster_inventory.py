"""cluster_inventory: the cluster playbook's node group from one read of each node's variables (issue 31)."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy
from ansible_collections.confidential.tee.plugins.plugin_utils import cluster_inventory as ci

# The inventory check lists the key-pool policy's modes (plugins/module_utils/common/pool_policy.py).
MODES = ", ".join(pool_policy.mode_names())


class HostVars:
    """``raw_get`` gives the stored variables; ``hostvars[host]`` the templated ones (a template here: ``{{x}}``)."""

    def __init__(self, stored: dict):
        self.stored, self.reads, self.templated = stored, [], []

    def raw_get(self, host):
        self.reads.append(host)
        return self.stored[host]

    def __getitem__(self, host):
        self.templated.append(host)
        return {k: ("intel" if v == "{{ x }}" else v) for k, v in self.stored[host].items()}


def _seen(hostvars):
    return {h: ci.node_variables(hostvars, h, ci.stored_variables(hostvars, h)) for h in hostvars.stored}


def test_plain_values_are_read_once_and_never_templated():
    hv = HostVars({"a": {"tee_cpu_vendor": "intel", "tee_node_consumers": ["kata"], "groups": {}, "tee_host": {}}})
    assert _seen(hv) == {"a": {"tee_cpu_vendor": "intel", "tee_node_consumers": ["kata"], "tee_host": {}}}
    assert hv.reads == ["a"] and hv.templated == []


def test_a_templated_value_is_templated_as_a_task_would():
    hv = HostVars({"a": {"tee_cpu_vendor": "{{ x }}"}, "b": {"tee_cpu_vendor": "amd"}})
    assert _seen(hv) == {"a": {"tee_cpu_vendor": "intel"}, "b": {"tee_cpu_vendor": "amd"}}
    assert hv.templated == ["a"]


def test_summary_plans_without_the_node_map_and_keeps_the_group_order():
    seen = {
        "z": {"tee_cpu_vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"], "tee_node_gpu": "yes"},
        "a": {"tee_cpu_vendor": "amd", "tee_host": {"qgs": None, "sev_asids": None}},
    }
    found = ci.summary(seen, {"tee_output": "manifests"})
    assert found["errors"] == [] and found["unknown_vendor"] == []
    assert found["gpu_hosts"] == ["z"]
    assert "nodes" not in found["plan"] and "summary" not in found["plan"]
    assert found["plan"]["overview"] == [
        "a (SNP): one pool sev-snp.amd.com/esids advertised by NFD (NodeFeatureRule extended resource); virt-handler "
        "kept off the node, charged by kata",
        "z (TDX): one pool devices.kubevirt.io/tdx advertised by KubeVirt's virt-handler device plugin, charged by "
        "kata and kubevirt",
    ]
    assert ci.summary(seen, host_facts=True)["plan"] is None


def test_summary_with_problems_plans_nothing_and_names_node_and_variable():
    seen = {"node-04999": {"tee_key_pool_mode": "shared"}}
    found = ci.summary(seen, {"tee_cluster_gather_host_facts": ci.UNSET})
    assert found["errors"] == [f"tee_key_pool_mode must be one of {MODES}, got 'shared' for node node-04999"]
    assert (found["plan"], found["gpu_hosts"]) == (None, [])


def test_unknown_vendor_plans_nothing():
    found = ci.summary({"a": {}})
    assert (found["unknown_vendor"], found["plan"]) == (["a"], None)


def test_summary_keeps_a_refused_plan_as_data_for_the_cluster_playbooks_own_fail_task():
    # The filters raise it (filter/cluster.py accepted, tests/unit/plugins/filter/test_key_pools_plan.py).
    nodes = {
        "tdx-1": {"tee_cpu_vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"], "tee_key_pool_mode": "nfd"}
    }
    refused = ci.summary(nodes)["plan"]
    assert set(refused) == {"refused"}
    assert refused["refused"].startswith("node tdx-1: two pools for the same TDX keys")
