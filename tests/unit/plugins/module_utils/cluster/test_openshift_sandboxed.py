"""openshift_sandboxed: osc-feature-gates and KataConfig."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster import openshift_sandboxed as osc


def test_osc_feature_gates_are_exact_strings():
    configmap, warnings = osc.feature_gates({"confidential": True, "layeredImageDeployment": "false"})
    assert configmap["data"] == {"confidential": "true", "layeredImageDeployment": "false"}
    assert configmap["metadata"] == {
        "name": "osc-feature-gates",
        "namespace": "openshift-sandboxed-containers-operator",
    }
    assert warnings == []
    warnings = osc.feature_gates({"confidentail": True})[1]
    assert "confidentail" in warnings[0]
    with pytest.raises(osc.OpenShiftConfigError, match="exact string"):
        osc.feature_gates({"confidential": "True"})


def test_kataconfig():
    kata = osc.kata_config("k", True, {"node-role.kubernetes.io/worker": ""}, "debug")
    assert kata["spec"] == {
        "checkNodeEligibility": True,
        "kataConfigPoolSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
        "logLevel": "debug",
    }
    with pytest.raises(osc.OpenShiftConfigError):
        osc.kata_config("k", "yes")
    with pytest.raises(osc.OpenShiftConfigError, match="label key"):
        osc.kata_config("k", True, {"bad key!": "x"})
