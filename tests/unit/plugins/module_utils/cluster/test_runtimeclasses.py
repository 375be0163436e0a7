"""runtimeclasses: Kata RuntimeClasses charging the planned key resource."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import key_pools as kp
from ansible_collections.confidential.tee.plugins.module_utils.cluster import runtimeclasses as rc

SPLIT = [
    {"name": "kata-1", "vendor": "intel", "consumers": ["kata"]},
    {"name": "vm-1", "vendor": "intel", "consumers": ["kubevirt"]},
    {"name": "snp-1", "vendor": "amd", "consumers": ["kata"]},
]


def test_runtimeclasses_charge_the_planned_resource():
    classes = rc.kata_classes(kp.plan(SPLIT), gpu=True, overheads={"kata-qemu-tdx": {"memory": "4Gi", "cpu": "2"}})
    by_name = {c["metadata"]["name"]: c for c in classes}
    assert set(by_name) == {"kata-qemu-tdx", "kata-qemu-nvidia-gpu-tdx", "kata-qemu-snp", "kata-qemu-nvidia-gpu-snp"}
    assert by_name["kata-qemu-tdx"]["overhead"]["podFixed"] == {"cpu": "2", "memory": "4Gi", "tdx.intel.com/keys": "1"}
    assert by_name["kata-qemu-nvidia-gpu-snp"]["overhead"]["podFixed"] == {
        "cpu": "1",
        "memory": "10240Mi",
        "sev-snp.amd.com/esids": "1",
    }
    assert by_name["kata-qemu-snp"]["scheduling"]["nodeSelector"] == {
        "amd.feature.node.kubernetes.io/snp": "true",
        "katacontainers.io/kata-runtime": "true",
    }
    with pytest.raises(kp.KeyPoolError, match="quantity"):
        rc.kata_classes(kp.plan(SPLIT), overheads={"kata-qemu-tdx": {"memory": "lots"}})


def test_openshift_kata_cc_is_a_partial_object_with_the_key_only():
    (obj,) = rc.openshift_kata_cc(kp.plan(SPLIT[:1]))
    assert obj["handler"] == "kata-cc" and obj["overhead"] == {"podFixed": {"tdx.intel.com/keys": "1"}}
    assert "scheduling" not in obj
    assert rc.openshift_kata_cc(kp.plan([SPLIT[1]])) == []
