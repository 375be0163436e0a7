"""key_pools: one pool per node, and refusals that name both advertisers and the fix."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import key_pools as kp


def node(name, vendor="intel", consumers=("kata",), mode="auto"):
    return {"name": name, "vendor": vendor, "consumers": list(consumers), "mode": mode}


def test_double_pool_is_refused_naming_both_objects_and_the_fix():
    # Kata's chart defaults (NFD advertises) next to KubeVirt's TDX plugin on the same node.
    with pytest.raises(kp.KeyPoolError) as raised:
        kp.plan([node("tdx-1", consumers=("kata", "kubevirt"), mode="nfd")], rule_name="kata-tee-keys")
    message = str(raised.value)
    assert "node tdx-1: two pools for the same TDX keys" in message
    assert "NodeFeatureRule kata-tee-keys (rule intel.tdx) advertises tdx.intel.com/keys" in message
    assert "advertises devices.kubevirt.io/tdx" in message and "WorkloadEncryptionTDX" in message
    assert "tee_key_pool_mode: kubevirt" in message and "remove kubevirt from its tee_node_consumers" in message


def test_snp_with_kata_and_kubevirt_on_one_node_has_no_shared_pool():
    for mode in ("auto", "nfd", "kubevirt"):
        with pytest.raises(kp.KeyPoolError, match="snp-1") as raised:
            kp.plan([node("snp-1", "amd", ("kata", "kubevirt"), mode)])
        assert "--max-devices" in str(raised.value)


def test_kata_overhead_on_kubevirts_tdx_plugin_is_one_pool():
    plan = kp.plan([node("tdx-1", consumers=("kata", "kubevirt"))])
    entry = plan["nodes"]["tdx-1"]
    assert entry["mode"] == "kubevirt"
    assert entry["pool"] == {"resource": "devices.kubevirt.io/tdx", "advertiser": "kubevirt", "counts_keys": True}
    assert entry["virt_handler"] and not entry["nfd_extended_resource"]
    assert plan["kata"] == {"tdx": {"resource": "devices.kubevirt.io/tdx", "nodes": ["tdx-1"]}}
    assert plan["nfd"]["tdx"]["resource_nodes"] == []
    assert plan["kubevirt"] == {
        "feature_gates": ["WorkloadEncryptionTDX"],
        "nodes": ["tdx-1"],
        "tdx_nodes": ["tdx-1"],
        "excluded_nodes": [],
    }


def test_split_nodes_keep_virt_handler_off_the_nfd_nodes():
    plan = kp.plan([node("kata-1"), node("kata-2"), node("vm-1", consumers=("kubevirt",)), node("snp-kata", "amd")])
    assert plan["nfd"]["tdx"]["resource_nodes"] == ["kata-1", "kata-2"]
    assert plan["nfd"]["snp"]["resource_nodes"] == ["snp-kata"]
    assert plan["kubevirt"]["nodes"] == ["vm-1"]
    assert plan["kubevirt"]["excluded_nodes"] == ["kata-1", "kata-2", "snp-kata"]
    assert plan["kata"]["tdx"]["resource"] == "tdx.intel.com/keys"


def test_without_kubevirt_nodes_nothing_is_excluded():
    assert kp.plan([node("kata-1")])["kubevirt"]["excluded_nodes"] == []


def test_kata_only_node_in_kubevirt_mode_still_needs_the_gate():
    plan = kp.plan([node("tdx-1", mode="kubevirt")])
    assert plan["kubevirt"]["feature_gates"] == ["WorkloadEncryptionTDX"]
    assert plan["kubevirt"]["tdx_nodes"] == ["tdx-1"]


def test_one_runtimeclass_cannot_serve_two_pools():
    with pytest.raises(kp.KeyPoolError, match="kata-qemu-tdx") as raised:
        kp.plan([node("a", mode="nfd"), node("b", mode="kubevirt")])
    assert "tdx.intel.com/keys on a" in str(raised.value) and "devices.kubevirt.io/tdx on b" in str(raised.value)


def test_openshift_kata_cc_serves_one_tee():
    with pytest.raises(kp.KeyPoolError, match="kata-cc"):
        kp.plan([node("a"), node("b", "amd")], openshift=True)
    assert kp.plan([node("a"), node("b", "amd")])["kata"].keys() == {"tdx", "snp"}


def test_kubevirt_sev_plugin_is_not_a_key_pool_and_says_so():
    plan = kp.plan([node("snp-vm", "amd", ("kubevirt",))])
    assert plan["nodes"]["snp-vm"]["pool"]["counts_keys"] is False
    assert plan["kubevirt"]["feature_gates"] == ["WorkloadEncryptionSEV"]
    assert "virtualMachineInstancesPerNode" in plan["warnings"][0]
    with pytest.raises(kp.KeyPoolError, match="no key pool at all"):
        kp.plan([node("snp-kata", "amd", ("kata",), "kubevirt")])


def test_node_without_consumers_has_no_pool():
    plan = kp.plan([node("idle", consumers=())])
    assert plan["nodes"]["idle"]["pool"] is None and plan["nodes"]["idle"]["mode"] == "none"
    assert plan["kata"] == {} and "no key pool" in plan["summary"][0]


def test_every_problem_is_reported_at_once():
    with pytest.raises(kp.KeyPoolError) as raised:
        kp.plan([node("t1", consumers=("kata", "kubevirt"), mode="nfd"), node("s1", "amd", ("kata", "kubevirt"))])
    assert "node s1" in str(raised.value) and "node t1" in str(raised.value)


@pytest.mark.parametrize(
    "nodes, message",
    [
        ({"name": "x"}, "must be a list"),
        (["x"], "must be a mapping"),
        ([{"name": "Bad_Name", "vendor": "intel"}], "not a Kubernetes node name"),
        ([{"name": "n", "vendor": "arm"}], "intel or amd"),
        ([{"name": "n", "vendor": "intel", "consumers": "kata"}], "must be a list"),
        ([{"name": "n", "vendor": "intel", "consumers": ["vms"]}], "unknown consumers"),
        ([{"name": "n", "vendor": "intel", "mode": "both"}], "mode must be one of"),
        ([{"name": "n", "vendor": "intel"}, {"name": "n", "vendor": "amd"}], "listed twice"),
    ],
)
def test_bad_input_is_refused_clearly(nodes, message):
    with pytest.raises(kp.KeyPoolError, match=message):
        kp.plan(nodes)


def test_foreign_rules_are_the_ones_advertising_key_resources():
    rules = [
        {
            "metadata": {"name": "confidential-tee-keys"},
            "spec": {"rules": [{"extendedResources": {"tdx.intel.com/keys": "@x"}}]},
        },
        {
            "metadata": {"name": "kata-tee-keys"},
            "spec": {"rules": [{"extendedResources": {"tdx.intel.com/keys": "@x"}}]},
        },
        {
            "metadata": {"name": "amd64-tee-keys"},
            "spec": {"rules": [{"extendedResources": {"sev-snp.amd.com/esids": "@y"}}]},
        },
        {"metadata": {"name": "gpu-labels", "namespace": "nfd"}, "spec": {"rules": [{"labels": {"a": "b"}}]}},
        {"metadata": {"name": "broken"}, "spec": None},
    ]
    found = kp.foreign_key_rules(rules, own_names=["confidential-tee-keys"], remove_names=["amd64-tee-keys"])
    assert found == [{"name": "kata-tee-keys", "namespace": None, "resources": ["tdx.intel.com/keys"]}]


@pytest.mark.parametrize("name", ["a..b", "a-.b", "Tdx-1", "tdx_1", "a" * 254])
def test_node_names_are_dns1123_subdomains(name):
    with pytest.raises(kp.KeyPoolError, match=r"is not a Kubernetes node name.*tee_k8s_node_name"):
        kp.plan([node(name)])


def test_a_valid_253_character_node_name_is_planned():
    longest = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert longest in kp.plan([node(longest)])["nodes"]


def test_renamed_and_third_pool_rules_are_found_and_garbage_is_skipped():
    def rule(name, resources):
        return {"metadata": {"name": name}, "spec": {"rules": [{"name": "r", "extendedResources": resources}]}}

    rules = [
        rule("amd64-tee-keys", {"sev-snp.amd.com/esids": "@cpu.security.sev.encrypted_state_ids"}),
        rule("kata-tee-keys", {"sev-snp.amd.com/esids": "@cpu.security.sev.encrypted_state_ids"}),
        rule("nvidia", {"feature.node.kubernetes.io/snp-esids": "@cpu.security.sev.encrypted_state_ids"}),
        rule("labels-only", {"feature.node.kubernetes.io/gpu": "8"}),
        {"metadata": "junk", "spec": {"rules": 5}},
        7,
    ]
    assert kp.stale_rules(rules) == ["amd64-tee-keys"]
    found = kp.foreign_key_rules(rules, own_names=["confidential-tee-keys"], remove_names=kp.stale_rules(rules))
    assert [f["name"] for f in found] == ["kata-tee-keys", "nvidia"]
    assert found[1]["resources"] == ["feature.node.kubernetes.io/snp-esids"]


def test_the_overview_is_one_line_per_decision_naming_a_few_nodes():
    nodes = [{"name": f"tdx-{i:04d}", "vendor": "intel", "consumers": ["kata", "kubevirt"]} for i in range(3000)]
    nodes += [{"name": f"snp-{i:04d}", "vendor": "amd", "consumers": ["kata"]} for i in range(2)]
    nodes += [{"name": "bare", "vendor": "intel"}]
    found = kp.plan(nodes)
    assert len(found["summary"]) == 3003
    assert found["overview"] == [
        "bare (TDX): no consumers, no key pool; NFD labels only",
        "snp-0000, snp-0001 (2 nodes, SNP): " + found["summary"][1].split(": ", 1)[1],
        "tdx-0000, tdx-0001, tdx-0002, tdx-0003, tdx-0004 and 2,995 more (3,000 nodes, TDX): "
        + found["summary"][3].split(": ", 1)[1],
    ]
    # The per-node line and the overview say the same decision.
    names = sorted(n["name"] for n in nodes)
    assert all(line.startswith(name + " (") for line, name in zip(found["summary"], names, strict=True))


def test_kernel_mode_is_one_pool_for_kata_and_vmis_kept_by_the_agent():
    plan = kp.plan(
        [node("tdx-1", consumers=("kata", "kubevirt"), mode="kernel"), node("snp-1", "amd", ("kata",), "kernel")]
    )
    tdx = plan["nodes"]["tdx-1"]
    assert tdx["pool"] == {"resource": "tdx.intel.com/keys", "advertiser": "agent", "counts_keys": True}
    assert tdx["key_agent"] and tdx["virt_handler"] and not tdx["nfd_extended_resource"]
    assert plan["kata"]["tdx"]["resource"] == "tdx.intel.com/keys"
    assert plan["kernel"] == {
        "tdx": {"resource": "tdx.intel.com/keys", "nodes": ["tdx-1"], "kubevirt_resource": "devices.kubevirt.io/tdx"},
        "snp": {"resource": "sev-snp.amd.com/esids", "nodes": ["snp-1"]},
    }
    assert plan["nfd"]["tdx"]["resource_nodes"] == [] and plan["kubevirt"]["feature_gates"] == ["WorkloadEncryptionTDX"]
    assert "tee-key-agent" in plan["summary"][1] and "admission policy" in plan["summary"][1]


def test_kernel_mode_shares_an_snp_node_between_kata_and_kubevirt():
    plan = kp.plan([node("snp-1", "amd", ("kata", "kubevirt"), "kernel")])
    assert plan["kernel"]["snp"]["kubevirt_resource"] == "devices.kubevirt.io/sev"
    assert plan["nodes"]["snp-1"]["pool"]["resource"] == "sev-snp.amd.com/esids"


def test_the_admission_policy_needs_every_kubevirt_node_of_the_tee_in_kernel_mode():
    with pytest.raises(kp.KeyPoolError) as raised:
        kp.plan(
            [node("a", consumers=("kubevirt",), mode="kernel"), node("b", consumers=("kubevirt",), mode="kubevirt")]
        )
    assert "KubeVirt TDX nodes b are in another mode" in str(raised.value)
    assert "give every KubeVirt TDX node tee_key_pool_mode: kernel (now on a)" in str(raised.value)


def test_the_double_pool_refusal_offers_the_kernel_mode():
    with pytest.raises(kp.KeyPoolError, match="set tee_key_pool_mode: kernel for snp-1"):
        kp.plan([node("snp-1", "amd", ("kata", "kubevirt"))])
