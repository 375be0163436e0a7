"""kubevirt_cc: TDX attestation from QGS facts, atomic-list merges, virt-handler placement."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import key_pools as kp
from ansible_collections.confidential.tee.plugins.module_utils.cluster import kubevirt_cc as kv

SOCKET = kv.DEFAULT_QGS_SOCKET
PRESENT = {"path": SOCKET, "present": True, "is_socket": True}
ABSENT = {"path": SOCKET, "present": False, "is_socket": False}


def test_enforced_only_when_every_tdx_node_has_the_socket():
    decision = kv.tdx_attestation(["a", "b"], {"a": PRESENT, "b": PRESENT})
    assert decision["enforced"] is True and decision["warnings"] == []
    decision = kv.tdx_attestation(["a", "b"], {"a": PRESENT, "b": ABSENT})
    assert decision["enforced"] is False and decision["missing"] == ["b"]
    assert "b: /var/run/tdx-qgs/qgs.socket does not exist" in decision["warnings"][0]


def test_unknown_facts_never_enforce():
    cases = {
        "a": None,
        "b": {"path": "/run/other.sock", "present": True, "is_socket": True},
        "c": {"path": SOCKET, "present": None, "is_socket": None},
        "d": {"path": SOCKET, "present": True, "is_socket": False},
    }
    decision = kv.tdx_attestation(list(cases), cases)
    assert decision["enforced"] is False
    assert decision["unknown"] == ["a", "b", "c"] and decision["missing"] == ["d"]
    assert "tee_host_info checked /run/other.sock" in decision["evidence"]["b"]
    assert "not a socket" in decision["evidence"]["d"]


def test_enforced_mode_refuses_nodes_without_the_socket():
    with pytest.raises(kv.KubeVirtConfigError, match="Unhealthy") as raised:
        kv.tdx_attestation(["a"], {"a": ABSENT}, mode="enforced")
    assert "qgsd" in str(raised.value)
    assert kv.tdx_attestation(["a"], {"a": PRESENT}, mode="enforced")["enforced"] is True


def test_disabled_mode_warns():
    decision = kv.tdx_attestation(["a"], {"a": PRESENT}, mode="disabled")
    assert decision["enforced"] is False and "not enforced" in decision["warnings"][0]


def test_custom_socket_path_and_bad_modes():
    facts = {"a": {"path": "/run/qgs/qgs.socket", "present": True, "is_socket": True}}
    assert kv.tdx_attestation(["a"], facts, socket_path="/run/qgs/qgs.socket")["enforced"] is True
    with pytest.raises(kv.KubeVirtConfigError, match="absolute"):
        kv.tdx_attestation(["a"], facts, socket_path="qgs.socket")
    with pytest.raises(kv.KubeVirtConfigError, match="mode"):
        kv.tdx_attestation(["a"], facts, mode="strict")


def test_gates_and_devices_merge_with_what_is_there():
    assert kv.merge_gates(["CPUManager", "VSOCK"], ["WorkloadEncryptionTDX", "VSOCK"]) == [
        "CPUManager",
        "VSOCK",
        "WorkloadEncryptionTDX",
    ]
    ours = kv.gpu_devices([{"pci_vendor_selector": "10de:2330", "resource_name": "nvidia.com/GH100"}])
    assert ours == [
        {"pciVendorSelector": "10DE:2330", "resourceName": "nvidia.com/GH100", "externalResourceProvider": True}
    ]
    existing = [
        {"pciVendorSelector": "8086:0001", "resourceName": "intel.com/qat"},
        {"pciVendorSelector": "10DE:1", "resourceName": "nvidia.com/GH100"},
    ]
    assert kv.merge_devices(existing, ours) == [existing[0], ours[0]]


@pytest.mark.parametrize(
    "device, message",
    [
        ({"pci_vendor_selector": "10de2330", "resource_name": "nvidia.com/x"}, "vendor:device"),
        ({"pci_vendor_selector": "10de:2330", "resource_name": "GH100"}, "qualified resource name"),
        ("10de:2330", "must be a mapping"),
    ],
)
def test_bad_gpu_devices(device, message):
    with pytest.raises(kv.KubeVirtConfigError, match=message):
        kv.gpu_devices([device])


def test_placement_exclusion_is_added_to_every_term_and_replaced_next_time():
    existing = {
        "nodeSelector": {"kubevirt.io/schedulable": "true"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    ]
                }
            }
        },
    }
    first = kv.merge_placement(existing, ["kata-2", "kata-1"])
    terms = first["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(
        t["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["kata-1", "kata-2"]}]
        for t in terms
    )
    assert (
        terms[0]["matchExpressions"]
        == existing["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][
            0
        ]["matchExpressions"]
    )
    assert first["nodeSelector"] == existing["nodeSelector"]
    assert kv.merge_placement(first, ["kata-1", "kata-2"]) == first  # idempotent
    again = kv.merge_placement(first, ["kata-3"])
    assert again["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1][
        "matchFields"
    ][0]["values"] == ["kata-3"]
    assert kv.merge_placement(kv.merge_placement({}, ["x"]), []) == {}  # our exclusion removed, nothing left


def test_kubevirt_spec_fragment():
    plan = kp.plan(
        [
            {"name": "tdx-1", "vendor": "intel", "consumers": ["kata", "kubevirt"]},
            {"name": "k", "vendor": "intel", "consumers": ["kata"], "mode": "kubevirt"},
        ]
    )
    attestation = kv.tdx_attestation(plan["kubevirt"]["tdx_nodes"], {"tdx-1": PRESENT, "k": PRESENT})
    want = kv.desired(plan, attestation, [], vsock=True)
    base = {
        "configuration": {
            "developerConfiguration": {"featureGates": ["Snapshot"], "disabledFeatureGates": ["VSOCK", "Other"]}
        }
    }
    spec, warnings = kv.kubevirt_spec(want, base)
    developer = spec["configuration"]["developerConfiguration"]
    assert developer["featureGates"] == ["Snapshot", "WorkloadEncryptionTDX", "VSOCK"]
    # WorkloadEncryptionSEV is Beta (on by default) and no node uses KubeVirt's SEV pool: disabled.
    assert developer["disabledFeatureGates"] == ["Other", "WorkloadEncryptionSEV"] and "VSOCK" in warnings[0]
    assert spec["configuration"]["confidentialCompute"] == {
        "tdx": {"attestation": {"enforced": True, "qgsSocketPath": SOCKET}}
    }
    assert "workloads" not in spec and "permittedHostDevices" not in spec["configuration"]


# --- WorkloadEncryptionSEV is Beta (on by default): the SEV plugin never reaches a node NFD counts for Kata ------


def _gpu_only_want(nodes):
    plan = kp.plan(nodes)
    attestation = kv.tdx_attestation(plan["kubevirt"]["tdx_nodes"], {})
    devices = kv.gpu_devices([{"pci_vendor_selector": "10de:2330", "resource_name": "nvidia.com/GH100"}])
    return kv.desired(plan, attestation, devices, vsock=True)


def test_a_kubevirt_cr_rendered_for_gpus_disables_the_sev_gate_and_emits_no_empty_gate_list():
    want = _gpu_only_want([{"name": "snp-kata", "vendor": "amd", "consumers": ["kata"]}])
    spec, _ = kv.kubevirt_spec(want, {})
    developer = spec["configuration"]["developerConfiguration"]
    assert "featureGates" not in developer  # never featureGates: [] (server-side apply would claim the list)
    assert developer["disabledFeatureGates"] == ["WorkloadEncryptionSEV"]
    assert spec["configuration"]["permittedHostDevices"]["pciHostDevices"][0]["pciVendorSelector"] == "10DE:2330"


def test_a_user_enabled_sev_gate_keeps_virt_handler_off_the_nfd_counted_snp_nodes():
    want = _gpu_only_want(
        [
            {"name": "snp-kata", "vendor": "amd", "consumers": ["kata"]},
            {"name": "tdx-1", "vendor": "intel", "consumers": ["kata"]},
        ]
    )
    base = {"configuration": {"developerConfiguration": {"featureGates": ["WorkloadEncryptionSEV"]}}}
    spec, _ = kv.kubevirt_spec(want, base)
    assert "disabledFeatureGates" not in spec["configuration"]["developerConfiguration"]
    terms = spec["workloads"]["nodePlacement"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["snp-kata"]  # not tdx-1: no SEV there
    assert want["excluded_nodes"] == ["snp-kata"]


def test_nothing_to_set_emits_no_developer_configuration():
    want = {"feature_gates": [], "excluded_nodes": [], "devices": [], "disabled_gates": [], "sev_nfd_nodes": []}
    spec, _ = kv.kubevirt_spec(want, {})
    assert spec == {"configuration": {}}


@pytest.mark.parametrize("version", ["v1.8.2", "1.8.0", "v1.7.0-rc.1"])
def test_a_tdx_pool_on_kubevirt_older_than_1_9_is_refused(version):
    with pytest.raises(kv.KubeVirtConfigError, match=r"has no TDX device plugin .* v1\.9\.0"):
        kv.tdx_version(["tdx-1"], version)


def test_the_kubevirt_version_for_tdx():
    assert kv.tdx_version(["tdx-1"], "v1.9.0") == [] and kv.tdx_version(["tdx-1"], "v1.10.1") == []
    assert kv.tdx_version([], "v1.8.0") == []  # no TDX pool on KubeVirt: any version will do
    assert "KubeVirt's version is unknown" in kv.tdx_version(["tdx-1"], None)[0]
    with pytest.raises(kv.KubeVirtConfigError, match="kubevirt_cc_version must be a version"):
        kv.tdx_version(["tdx-1"], "latest")


def test_at_scale_the_warning_counts_nodes_and_the_error_names_every_one():
    nodes = [f"tdx-{i:04d}" for i in range(3000)]
    warned = kv.tdx_attestation(nodes, {}, "auto")
    assert not warned["enforced"] and warned["missing"] + warned["unknown"] == nodes
    assert "and 2,990 more" in warned["warnings"][0] and "tdx-2999" not in warned["warnings"][0]
    # One entry per reason, not one per node.
    assert warned["warnings"][0].count("no tee_host_info qgs fact") == 1
    with pytest.raises(kv.KubeVirtConfigError) as refused:
        kv.tdx_attestation(nodes, {}, "enforced")
    assert all(node in str(refused.value) for node in nodes)
