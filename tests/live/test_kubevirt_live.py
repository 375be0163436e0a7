"""confidential.tee.cluster with KubeVirt on the nodes, against a real kube-apiserver (tests/live/conftest.py)."""

from __future__ import annotations

import pytest
import yaml
from kube_control_plane import kubevirt_crds

pytestmark = pytest.mark.slow
# Kata and KubeVirt share the TDX node's one key pool; on the SNP node they would be two pools (refused), so Kata alone.
CONSUMERS = {"tdx-1": ["kata", "kubevirt"], "snp-1": ["kata"]}


def test_kubevirt_is_merge_patched_with_the_tdx_gate_and_converges(live, cluster_run, recap_changed):
    """KubeVirt (its CRD as KubeVirt's operator generates it) with a gate someone set."""
    live.require_private("installs KubeVirt's CRD and a KubeVirt CR")
    live.register_simulated_nodes()
    (crd,) = [yaml.safe_load(path.read_text()) for path in kubevirt_crds() if path.name == "kubevirts.kubevirt.io.yaml"]
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": ["Snapshot"]}}},
        "status": {"phase": "Deployed", "observedKubeVirtVersion": "v1.9.0"},
    }
    try:  # the CRD is removed again even when its install fails half-way: the next test needs a cluster without it
        live.install_crd(crd)
        live.plane.load_objects([kubevirt])
        first = cluster_run(live, consumers=CONSUMERS)
        assert first.returncode == 0, first.stdout[-4000:]
        spec = live.get("kubevirts.kubevirt.io", "kubevirt", namespace="kubevirt")["spec"]
        gates = spec["configuration"]["developerConfiguration"]["featureGates"]
        assert gates[0] == "Snapshot" and "WorkloadEncryptionTDX" in gates, gates
        again = cluster_run(live, consumers=CONSUMERS)
        assert again.returncode == 0, again.stdout[-4000:]
        assert recap_changed(again.stdout) == 0, again.stdout[-4000:]
    finally:
        live.kubectl(
            "delete", "kubevirts.kubevirt.io", "--all", "-n", "kubevirt", "--wait=true", "--timeout=60s", check=False
        )
        live.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=true", "--timeout=60s", check=False)


def test_kubevirt_not_installed_says_install_it_or_render_manifests(live, cluster_run):
    live.require_private("needs a cluster without KubeVirt")
    live.register_simulated_nodes()
    run = cluster_run(live, consumers=["kubevirt"])
    assert run.returncode != 0
    assert "The cluster does not serve kubevirt.io/v1 KubeVirt" in run.flat and "tee_output: manifests" in run.flat, (
        run.stdout[-4000:]
    )
    assert "Traceback" not in run.stdout + run.stderr
    assert live.collection_objects() == {}


def test_hco_manager_without_hyperconverged_says_install_it_or_change_manager(live, cluster_run):
    """kubevirt_cc_manager: hco on a cluster without HCO's CRD (the session's cluster has none; only
    test_hyperconverged_live.py installs it, for its own test) names the CRD, the variable and the ways out, and
    applies nothing."""
    live.require_private("needs a cluster without HCO")
    live.register_simulated_nodes()
    run = cluster_run(live, consumers=["kubevirt"], kubevirt_cc_manager="hco")
    assert run.returncode != 0
    for text in (
        "The cluster does not serve hco.kubevirt.io/v1beta1 HyperConverged",
        "hyperconvergeds.hco.kubevirt.io is not installed",
        "kubevirt_cc_manager: kubevirt",
        "tee_output: manifests",
    ):
        assert text in run.flat, run.stdout[-4000:]
    assert "Traceback" not in run.stdout + run.stderr
    assert live.collection_objects() == {}
