"""kubevirt_objects: the KubeVirt or HyperConverged object the role writes."""

from __future__ import annotations

import json

from ansible_collections.confidential.tee.plugins.module_utils.cluster import key_pools as kp
from ansible_collections.confidential.tee.plugins.module_utils.cluster import kubevirt_objects


def test_kubevirt_render_for_hco_reads_the_live_disabled_list():
    nodes = [{"name": "snp-vm", "vendor": "amd", "consumers": ["kubevirt"]}]
    rendered = kubevirt_objects.render(
        kp.plan(nodes),
        nodes,
        {
            "manager": "hco",
            "name": "kubevirt-hyperconverged",
            "namespace": "openshift-cnv",
            "live_kubevirt_disabled": ["WorkloadEncryptionSEV"],
        },
    )
    (obj,) = rendered["objects"]
    ops = json.loads(obj["metadata"]["annotations"]["kubevirt.kubevirt.io/jsonpatch"])
    assert {"op": "remove", "path": "/spec/configuration/developerConfiguration/disabledFeatureGates/0"} in ops
    assert rendered["feature_gates"] == ["WorkloadEncryptionSEV", "VSOCK"]
    assert any("max-devices" in w for w in rendered["warnings"])
