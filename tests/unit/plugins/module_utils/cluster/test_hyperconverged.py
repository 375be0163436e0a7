"""hyperconverged: HCO fields, the jsonpatch annotation, and HCO's disabled beta gates."""

from __future__ import annotations

import json

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import hyperconverged as hco
from ansible_collections.confidential.tee.plugins.module_utils.cluster import kubevirt_cc as kv

WANT = {
    "feature_gates": ["WorkloadEncryptionSEV", "VSOCK"],
    "excluded_nodes": ["kata-1"],
    "devices": [
        {"pciVendorSelector": "10DE:2330", "resourceName": "nvidia.com/GH100", "externalResourceProvider": True}
    ],
}
HCO_DISABLED = ["DeclarativeHotplugVolumes", "VmiMemoryOverheadReport", "WorkloadEncryptionSEV"]


def apply_patch(document, ops):
    """A small RFC 6902 interpreter (add/remove/test on lists and objects), enough for these paths."""
    doc = json.loads(json.dumps(document))
    for op in ops:
        *parents, last = op["path"].lstrip("/").split("/")
        target = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        if op["op"] == "test":
            assert target[int(last)] == op["value"], op
        elif op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        elif isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), op["value"])
        else:
            target[last] = op["value"]
    return doc


def hco_generated_kubevirt():
    return {
        "spec": {
            "configuration": {
                "developerConfiguration": {"featureGates": ["CPUManager"], "disabledFeatureGates": list(HCO_DISABLED)}
            }
        }
    }


def test_patch_enables_beta_gate_without_leaving_it_disabled():
    ops = hco.jsonpatch_ops(WANT, HCO_DISABLED)
    result = apply_patch(hco_generated_kubevirt(), ops)["spec"]["configuration"]["developerConfiguration"]
    assert result["featureGates"] == ["CPUManager", "WorkloadEncryptionSEV", "VSOCK"]
    assert result["disabledFeatureGates"] == ["DeclarativeHotplugVolumes", "VmiMemoryOverheadReport"]
    assert {"op": "test", "path": kv.DISABLED_PATH + "/2", "value": "WorkloadEncryptionSEV"} in ops


def test_confidential_compute_goes_through_the_annotation():
    want = dict(
        WANT,
        feature_gates=["WorkloadEncryptionTDX"],
        confidential_compute={"tdx": {"attestation": {"enforced": False}}},
    )
    ops = hco.jsonpatch_ops(want, HCO_DISABLED)
    assert ops[-1] == {"op": "add", "path": kv.CC_PATH, "value": want["confidential_compute"]}
    assert not any(op["op"] == "remove" for op in ops)  # alpha gates are not in HCO's disabled list


def test_manifests_need_hcos_disabled_list_for_beta_gates():
    with pytest.raises(kv.KubeVirtConfigError, match="kubevirt_cc_hco_disabled_feature_gates"):
        hco.jsonpatch_ops(WANT, None)


def test_hcos_own_list_is_recovered_after_our_patch_was_applied():
    previous = hco.jsonpatch_ops(WANT, HCO_DISABLED)
    live = apply_patch(hco_generated_kubevirt(), previous)["spec"]["configuration"]["developerConfiguration"][
        "disabledFeatureGates"
    ]
    assert hco.hco_generated_disabled(live, previous) == HCO_DISABLED
    # Patch not applied (HCO upgraded, test failed): the live list is HCO's own.
    assert hco.hco_generated_disabled(HCO_DISABLED, previous) == HCO_DISABLED
    assert hco.hco_generated_disabled(None, previous) is None


def test_users_own_operations_survive_and_ours_are_rewritten():
    user = [{"op": "add", "path": "/spec/configuration/migrations", "value": {"allowPostCopy": True}}]
    first = hco.merged_annotation(json.dumps(user), hco.jsonpatch_ops(WANT, HCO_DISABLED))
    second = hco.merged_annotation(first, hco.jsonpatch_ops(WANT, HCO_DISABLED))
    assert second == first  # idempotent
    ops = json.loads(second)
    assert ops[0] == user[0] and len(ops) == 1 + len(hco.jsonpatch_ops(WANT, HCO_DISABLED))
    shrunk = json.loads(hco.merged_annotation(second, []))
    assert shrunk == user


@pytest.mark.parametrize("text, message", [("{not json", "not valid JSON"), ('{"op": "add"}', "JSON array")])
def test_broken_annotations_are_reported(text, message):
    with pytest.raises(kv.KubeVirtConfigError, match=message):
        hco.merged_annotation(text, [])


def test_hco_fields_per_api_version():
    base = {
        "permittedHostDevices": {
            "pciHostDevices": [{"pciDeviceSelector": "8086:0001", "resourceName": "intel.com/qat"}]
        }
    }
    spec = hco.hco_spec(WANT, base, "v1beta1")
    assert spec["permittedHostDevices"]["pciHostDevices"] == [
        base["permittedHostDevices"]["pciHostDevices"][0],
        {"pciDeviceSelector": "10DE:2330", "resourceName": "nvidia.com/GH100", "externalResourceProvider": True},
    ]
    assert "matchFields" in json.dumps(spec["workloads"]["nodePlacement"])
    v1 = hco.hco_spec(WANT, {}, "v1")
    assert set(v1) == {"virtualization", "deployment"} and "workload" in v1["deployment"]["nodePlacements"]
    with pytest.raises(kv.KubeVirtConfigError, match="v1beta1 or v1"):
        hco.hco_spec(WANT, {}, "v2")


def test_alpha_gates_need_no_disabled_list():
    ops = hco.jsonpatch_ops(dict(WANT, feature_gates=["WorkloadEncryptionTDX", "VSOCK"]), None)
    assert [op["value"] for op in ops] == ["WorkloadEncryptionTDX", "VSOCK"]
