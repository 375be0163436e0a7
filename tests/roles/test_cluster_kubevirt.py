"""The KubeVirt CR as KubeVirt reads it, through the real ansible-playbook: WorkloadEncryptionSEV is Beta (on by
default), so a CR rendered for GPUs only still keeps the SEV plugin off; no empty featureGates list; KubeVirt older
than v1.9.0 cannot hold a TDX pool."""

from __future__ import annotations

import pytest

GPU = [{"pci_vendor_selector": "10DE:2330", "resource_name": "nvidia.com/GH100_H100_SXM5_80GB"}]


@pytest.mark.slow
def test_a_kubevirt_cr_for_gpus_only_disables_the_sev_plugin(render, object_problems):
    proc, files = render({"snp-1": {"vendor": "amd", "tee_node_consumers": ["kata"]}}, kubevirt_cc_gpu_devices=GPU)
    assert proc.returncode == 0, proc.stdout[-4000:]
    kubevirt = files["40-kubevirt-kubevirt-kubevirt.yaml"]
    assert object_problems(kubevirt) == []
    developer = kubevirt["spec"]["configuration"]["developerConfiguration"]
    assert developer == {"disabledFeatureGates": ["WorkloadEncryptionSEV"]}  # and no featureGates: []
    assert "(disabled WorkloadEncryptionSEV)" in proc.flat


@pytest.mark.slow
@pytest.mark.parametrize(("version", "ok"), [("v1.8.3", False), ("v1.9.0", True)])
def test_a_tdx_pool_on_kubevirt_needs_1_9(render, version, ok):
    proc, files = render(
        {"tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"]}}, kubevirt_cc_version=version
    )
    if ok:
        assert proc.returncode == 0 and "40-kubevirt-kubevirt-kubevirt.yaml" in files, proc.stdout[-4000:]
        assert "KubeVirt's version is unknown" not in proc.flat
    else:
        assert proc.returncode != 0 and files == {}
        assert "KubeVirt v1.8.3 has no TDX device plugin (devices.kubevirt.io/tdx arrives in v1.9.0)" in proc.flat


def test_a_malformed_kubevirt_version_is_refused_before_anything_happens(render):
    proc, files = render({"tdx-1": {"vendor": "intel"}}, kubevirt_cc_version=["v1.9.0"])
    assert proc.returncode != 0 and "kubevirt_cc_version must be a version such as v1.9.0" in proc.flat
    assert files == {}


@pytest.mark.slow
def test_a_relative_qgs_socket_path_is_refused_naming_the_variable_and_the_node(render):
    proc, files = render(
        {"tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"]}},
        kubevirt_cc_qgs_socket_path="var/run/tdx-qgs/qgs.socket",
        kubevirt_cc_version="v1.9.0",
    )
    assert proc.returncode != 0 and files == {}
    assert "kubevirt_cc_qgs_socket_path" in proc.flat and "absolute" in proc.flat, proc.stdout[-3000:]
    assert "/var/run/tdx-qgs/qgs.socket" in proc.flat  # the fix: an example of a path that works


@pytest.mark.slow
def test_a_253_character_node_name_gets_its_manifests(render):
    name = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    proc, files = render({"gpu-1": {"vendor": "intel", "tee_k8s_node_name": name, "tee_node_gpu": True}})
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert all(len(file.encode()) <= 255 for file in files)
    assert any(obj.get("kind") == "Node" and obj["metadata"]["name"] == name for obj in files.values()), list(files)
