"""confidential.tee.cluster with KubeVirt on the nodes, against a real kube-apiserver (tests/live/conftest.py):
kubevirt_cc through HCO (``kubevirt_cc_manager: hco``), and the refusals when KubeVirt or HCO is not installed.
KubeVirt's own CR merge-patched (``kubevirt_cc_manager: kubevirt``) is tests/live/test_cluster_apply_live.py's,
applied there with the other roles' objects.

The HCO test's API server serves HCO's own CRD, the one hyperconverged-cluster-operator generates
(``deploy/crds/hco00.crd.yaml`` @03da3cf, in ``../shared/reference/crds/hco-hyperconvergeds.yaml``): it serves
v1beta1 and v1, stores v1 and declares no conversion, so the server converts by changing the apiVersion alone and
prunes what the stored version does not know (a v1beta1 ``spec.permittedHostDevices`` is dropped). The role writes
HCO's v1 fields here (``kubevirt_cc_hco_api_version: v1``), the layout the server stores.

No HCO runs: nobody carries the jsonpatch annotation on to the KubeVirt CR, so the role's wait for KubeVirt to show
the gates is off (``kubevirt_cc_verify: false``); the tests check what the server stores on the HyperConverged CR,
and that the KubeVirt CR is left alone (HCO would revert a direct edit).
"""

from __future__ import annotations

import json

import pytest
import yaml
from kube_control_plane import installed_kubevirt, kubevirt_crds

pytestmark = pytest.mark.slow
HCO_CRD = "hco-hyperconvergeds.yaml"
HCO = ("hyperconvergeds.hco.kubevirt.io", "kubevirt-hyperconverged", "kubevirt-hyperconverged")
JSONPATCH = "kubevirt.kubevirt.io/jsonpatch"
FEATURE_GATES = "/spec/configuration/developerConfiguration/featureGates"
# Kata and KubeVirt share the TDX node's one key pool; on the SNP node they would be two pools (refused), so Kata alone.
CONSUMERS = {"tdx-1": ["kata", "kubevirt"], "snp-1": ["kata"]}
# The role's entry for the GPU below (externalResourceProvider: the GPU operator's sandbox device plugin serves it).
H100 = {
    "pciDeviceSelector": "10DE:2330",
    "resourceName": "nvidia.com/GH100_H100_SXM5_80GB",
    "externalResourceProvider": True,
}
THEIR_T4 = {"pciDeviceSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4"}
THEIR_OP = {"op": "add", "path": f"{FEATURE_GATES}/-", "value": "Snapshot"}
HCO_VARS = {
    "kubevirt_cc_manager": "hco",
    "kubevirt_cc_hco_api_version": "v1",
    "kubevirt_cc_verify": False,
    "kubevirt_cc_gpu_devices": [
        {"pci_vendor_selector": H100["pciDeviceSelector"], "resource_name": H100["resourceName"]}
    ],
}


def _hyperconverged(devices: list, annotation: list | None = None) -> dict:
    metadata = {"name": HCO[1], "namespace": HCO[2]}
    if annotation is not None:
        metadata["annotations"] = {JSONPATCH: json.dumps(annotation)}
    return {
        "apiVersion": "hco.kubevirt.io/v1",
        "kind": "HyperConverged",
        "metadata": metadata,
        "spec": {"virtualization": {"permittedHostDevices": {"pciHostDevices": devices}}},
    }


def devices_of(hco: dict) -> list:
    return hco["spec"]["virtualization"]["permittedHostDevices"]["pciHostDevices"]


def _crds(reference) -> list[dict]:
    (kubevirt,) = [yaml.safe_load(p.read_text()) for p in kubevirt_crds() if p.name == "kubevirts.kubevirt.io.yaml"]
    return [kubevirt, yaml.safe_load((reference / "crds" / HCO_CRD).read_text())]


def test_hyperconverged_is_patched_checked_converges_and_never_forced(live, cluster_run, recap_changed, reference):
    """--check writes nothing; the first run merges the TDX gate, confidentialCompute and the GPU into the CR someone
    else made, keeping their annotation operation and device; the second changes nothing; a device entry of another
    field manager that clashes with ours is the server's refusal, reported, and stays as they wrote it."""
    live.require_private("installs HCO's and KubeVirt's CRDs and their CRs")
    live.register_simulated_nodes()
    crds = _crds(reference)
    try:  # the CRDs go again even when the test fails half-way: the next test needs a cluster without them
        for crd in crds:
            live.install_crd(crd)
        live.plane.load_objects([installed_kubevirt(), _hyperconverged([THEIR_T4], [THEIR_OP])])
        kubevirt_version = live.get("kubevirts.kubevirt.io", "kubevirt", namespace="kubevirt")["metadata"]
        before = live.get(*HCO)["metadata"]["resourceVersion"]

        dry = cluster_run(live, "--check", "--diff", consumers=CONSUMERS, **HCO_VARS)
        assert dry.returncode == 0, dry.stdout[-4000:]
        assert f"HyperConverged/{HCO[2]}/{HCO[1]}" in dry.flat, dry.stdout[-4000:]
        assert live.get(*HCO)["metadata"]["resourceVersion"] == before, "--check changed the HyperConverged CR"

        first = cluster_run(live, consumers=CONSUMERS, **HCO_VARS)
        assert first.returncode == 0, first.stdout[-4000:]
        hco = live.get(*HCO)
        ops = json.loads(hco["metadata"]["annotations"][JSONPATCH])
        assert ops[0] == THEIR_OP, ops
        assert {"op": "add", "path": f"{FEATURE_GATES}/-", "value": "WorkloadEncryptionTDX"} in ops, ops
        assert any(op["path"] == "/spec/configuration/confidentialCompute" for op in ops), ops
        assert devices_of(hco) == [THEIR_T4, H100], devices_of(hco)
        kubevirt = live.get("kubevirts.kubevirt.io", "kubevirt", namespace="kubevirt")["metadata"]
        assert kubevirt["resourceVersion"] == kubevirt_version["resourceVersion"], "the KubeVirt CR was edited"

        again = cluster_run(live, consumers=CONSUMERS, **HCO_VARS)
        assert again.returncode == 0, again.stdout[-4000:]
        assert recap_changed(again.stdout) == 0, again.stdout[-4000:]

        # Another field manager claims our PCI device for another resource name: HCO's list is keyed by
        # pciDeviceSelector, so the merged list would hold the selector twice; the server refuses the dry run.
        theirs = [THEIR_T4, {"pciDeviceSelector": H100["pciDeviceSelector"], "resourceName": "example.com/h100"}]
        live.apply([_hyperconverged(theirs)], manager="someone-else", force=True)
        claimed = live.get(*HCO)
        clash = cluster_run(live, consumers=CONSUMERS, **HCO_VARS)
        assert clash.returncode != 0
        assert f"refused HyperConverged/{HCO[2]}/{HCO[1]}" in clash.flat, clash.stdout[-4000:]
        assert "Duplicate value" in clash.flat and "Nothing was changed" in clash.flat, clash.stdout[-4000:]
        assert live.get(*HCO)["metadata"]["resourceVersion"] == claimed["metadata"]["resourceVersion"]
        assert [d["resourceName"] for d in devices_of(claimed)] == [d["resourceName"] for d in theirs]
        assert "Traceback" not in clash.stdout + clash.stderr
    finally:
        live.kubectl("delete", HCO[0], "--all", "-n", HCO[2], "--wait=true", "--timeout=60s", check=False)
        live.kubectl(
            "delete", "kubevirts.kubevirt.io", "--all", "-n", "kubevirt", "--wait=true", "--timeout=60s", check=False
        )
        for crd in crds:
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
    """kubevirt_cc_manager: hco on a cluster without HCO's CRD (the session's cluster has none; only the HCO test
    above installs it, for itself) names the CRD, the variable and the ways out, and applies nothing."""
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
