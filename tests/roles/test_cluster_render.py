"""playbooks/cluster.yml through the real ansible-playbook, rendering manifests for TDX, SNP, GPU and OpenShift
inventories of simulated nodes (teesim node trees, a real QGS Unix socket where the variant has one), every
object validated against real schemas (tests/roles/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "cluster.yml"
QGS = "var/run/tdx-qgs/qgs.socket"  # where tests/roles/conftest.py binds it


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]


def valid(files: dict, object_problems) -> None:
    for name, obj in files.items():
        assert object_problems(obj) == [], name


@pytest.mark.slow
def test_tdx_kata_and_kubevirt_share_kubevirts_pool(render, object_problems):
    proc, files = render(
        {
            "tdx-1": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kata", "kubevirt"]},
            "tdx-2": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kata"], "tee_key_pool_mode": "kubevirt"},
        }
    )
    ok(proc)
    assert set(files) == {
        "20-nodefeaturerule-confidential-tee-keys.yaml",
        "30-runtimeclass-kata-qemu-tdx.yaml",
        "40-kubevirt-kubevirt-kubevirt.yaml",
    }
    valid(files, object_problems)
    rule = files["20-nodefeaturerule-confidential-tee-keys.yaml"]
    assert [r["name"] for r in rule["spec"]["rules"]] == ["intel.tdx"]  # labels only: KubeVirt holds the pool
    overhead = files["30-runtimeclass-kata-qemu-tdx.yaml"]["overhead"]["podFixed"]
    assert overhead["devices.kubevirt.io/tdx"] == "1" and "tdx.intel.com/keys" not in overhead
    config = files["40-kubevirt-kubevirt-kubevirt.yaml"]["spec"]["configuration"]
    assert config["developerConfiguration"]["featureGates"] == ["WorkloadEncryptionTDX", "VSOCK"]
    # Both nodes reported the QGS socket through tee_host_info: attestation is enforced.
    assert config["confidentialCompute"]["tdx"]["attestation"] == {"enforced": True, "qgsSocketPath": "/" + QGS}
    assert "one pool devices.kubevirt.io/tdx" in proc.flat


@pytest.mark.slow
def test_tdx_attestation_stays_off_when_a_node_lacks_the_qgs(render):
    proc, files = render(
        {
            "tdx-1": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kubevirt"]},
            "tdx-2": {"vendor": "intel", "tee_node_consumers": ["kubevirt"]},
        }
    )
    ok(proc)
    attestation = files["40-kubevirt-kubevirt-kubevirt.yaml"]["spec"]["configuration"]["confidentialCompute"]["tdx"]
    assert attestation["attestation"]["enforced"] is False
    assert "QGS socket is not confirmed on tdx-2" in proc.flat


@pytest.mark.slow
def test_snp_split_nodes(render, object_problems):
    proc, files = render(
        {
            "snp-kata": {"vendor": "amd", "tee_node_consumers": ["kata"]},
            "snp-vm": {"vendor": "amd", "tee_node_consumers": ["kubevirt"]},
        }
    )
    ok(proc)
    valid(files, object_problems)
    rules = {r["name"]: r for r in files["20-nodefeaturerule-confidential-tee-keys.yaml"]["spec"]["rules"]}
    assert rules["amd.sev-snp.keys"]["extendedResources"] == {
        "sev-snp.amd.com/esids": "@cpu.security.sev.encrypted_state_ids"
    }
    assert rules["amd.sev-snp.keys"]["matchFeatures"][1]["matchExpressions"]["nodename"]["value"] == ["snp-kata"]
    assert files["30-runtimeclass-kata-qemu-snp.yaml"]["overhead"]["podFixed"]["sev-snp.amd.com/esids"] == "1"
    kubevirt = files["40-kubevirt-kubevirt-kubevirt.yaml"]["spec"]
    assert kubevirt["configuration"]["developerConfiguration"]["featureGates"] == ["WorkloadEncryptionSEV", "VSOCK"]
    assert "confidentialCompute" not in kubevirt["configuration"]
    terms = kubevirt["workloads"]["nodePlacement"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["snp-kata"]}]}
    ]
    assert "virtualMachineInstancesPerNode" in proc.flat  # KubeVirt's SEV plugin counts max-devices, not keys


@pytest.mark.slow
def test_snp_ciphertext_hiding_nodes_advertise_the_snp_range(render, object_problems):
    # tee_host_info reads kvm_amd.ciphertext_hiding_asids on each node; NFD's esids feature would copy sev_es 99.
    proc, files = render(
        {
            "snp-plain": {"vendor": "amd", "tee_node_consumers": ["kata"]},
            "snp-hidden": {"vendor": "amd", "tee_node_consumers": ["kata"], "ciphertext_hiding_asids": 16},
        }
    )
    ok(proc)
    valid(files, object_problems)
    rules = {r["name"]: r for r in files["20-nodefeaturerule-confidential-tee-keys.yaml"]["spec"]["rules"]}
    assert rules["amd.sev-snp.keys"]["matchFeatures"][1]["matchExpressions"]["nodename"]["value"] == ["snp-plain"]
    hidden = rules["amd.sev-snp.keys.snp-asids-16"]
    assert hidden["extendedResources"] == {"sev-snp.amd.com/esids": "16"}
    assert hidden["matchFeatures"][1]["matchExpressions"]["nodename"]["value"] == ["snp-hidden"]
    assert "fixed at 16: the SNP range of ciphertext hiding" in proc.flat


@pytest.mark.slow
def test_gpu_node(render, object_problems, tmp_path):
    gpu = [{"pci_vendor_selector": "10DE:2330", "resource_name": "nvidia.com/GH100_H100_SXM5_80GB"}]
    proc, files = render(
        {
            "gpu-1": {
                "vendor": "intel",
                "qgs": True,
                "tee_node_consumers": ["kata", "kubevirt"],
                "tee_node_gpu": True,
                "tee_kubernetes_version": "v1.33.4",
            }
        },
        kubevirt_cc_gpu_devices=gpu,
    )
    ok(proc)
    valid(files, object_problems)
    assert {"30-runtimeclass-kata-qemu-nvidia-gpu-tdx.yaml", "50-node-gpu-1.yaml"} <= set(files)
    gpu_class = files["30-runtimeclass-kata-qemu-nvidia-gpu-tdx.yaml"]
    assert gpu_class["overhead"]["podFixed"] == {"cpu": "1", "memory": "10240Mi", "devices.kubevirt.io/tdx": "1"}
    devices = files["40-kubevirt-kubevirt-kubevirt.yaml"]["spec"]["configuration"]["permittedHostDevices"]
    assert devices["pciHostDevices"] == [
        {
            "pciVendorSelector": "10DE:2330",
            "resourceName": "nvidia.com/GH100_H100_SXM5_80GB",
            "externalResourceProvider": True,
        }
    ]
    # The CC mode is left out of GitOps output: nothing could check for running GPU workloads there.
    assert files["50-node-gpu-1.yaml"]["metadata"]["labels"] == {"nvidia.com/gpu.workload.config": "vm-passthrough"}
    node_dir = tmp_path / "manifests" / "nodes" / "gpu-1"
    kubelet = yaml.safe_load((node_dir / "etc/kubernetes/kubelet.conf.d/90-confidential-tee-gpu-cc.conf").read_text())
    assert kubelet["featureGates"] == {"KubeletPodResourcesGet": True, "RuntimeClassInImageCriApi": True}
    assert kubelet["runtimeRequestTimeout"] == "20m"
    assert object_problems is not None
    containerd = (node_dir / "etc/containerd/conf.d/90-confidential-tee-gpu-cc.toml").read_text()
    assert "version = 3" in containerd


@pytest.mark.slow
def test_openshift(render, object_problems):
    proc, files = render(
        {
            "tdx-1": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kata", "kubevirt"]},
            "tdx-2": {"vendor": "intel", "qgs": True, "tee_node_consumers": ["kata"], "tee_key_pool_mode": "kubevirt"},
        },
        tee_cluster_flavor="openshift",
    )
    ok(proc)
    assert set(files) == {
        "10-configmap-openshift-sandboxed-containers-operator-osc-feature-gates.yaml",
        "20-nodefeaturerule-openshift-nfd-confidential-tee-keys.yaml",
        "30-runtimeclass-kata-cc.yaml",
        "40-hyperconverged-openshift-cnv-kubevirt-hyperconverged.yaml",
        "60-kataconfig-cluster-kataconfig.yaml",
    }
    rule = files["20-nodefeaturerule-openshift-nfd-confidential-tee-keys.yaml"]
    assert rule["apiVersion"] == "nfd.openshift.io/v1alpha1" and rule["metadata"]["namespace"] == "openshift-nfd"
    # ../shared/reference holds the upstream NodeFeatureRule CRD; OpenShift's has the same v1alpha1 rule schema.
    upstream = dict(rule, apiVersion="nfd.k8s-sigs.io/v1alpha1", metadata={"name": rule["metadata"]["name"]})
    others = [o for n, o in files.items() if "hyperconverged" not in n and "nodefeaturerule" not in n]
    valid({o["kind"]: o for o in [*others, upstream]}, object_problems)
    assert files["30-runtimeclass-kata-cc.yaml"]["overhead"] == {"podFixed": {"devices.kubevirt.io/tdx": "1"}}
    assert files["10-configmap-openshift-sandboxed-containers-operator-osc-feature-gates.yaml"]["data"] == {
        "confidential": "true"
    }
    assert files["60-kataconfig-cluster-kataconfig.yaml"]["spec"] == {"checkNodeEligibility": True}
    hco = files["40-hyperconverged-openshift-cnv-kubevirt-hyperconverged.yaml"]
    assert hco["apiVersion"] == "hco.kubevirt.io/v1beta1"
    ops = json.loads(hco["metadata"]["annotations"]["kubevirt.kubevirt.io/jsonpatch"])
    _kubevirt_after_hco_patch_is_valid(ops, object_problems)


def _kubevirt_after_hco_patch_is_valid(ops, object_problems):
    """HCO applies the annotation to the KubeVirt CR it generates: the result must be a valid KubeVirt."""
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt-kubevirt-hyperconverged", "namespace": "openshift-cnv"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": ["CPUManager"]}}},
    }
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = op["path"].lstrip("/").split("/")
        target = kubevirt
        for part in parents:
            target = target[part]
        if last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    assert object_problems(kubevirt) == []
    config = kubevirt["spec"]["configuration"]
    assert config["developerConfiguration"]["featureGates"] == ["CPUManager", "WorkloadEncryptionTDX", "VSOCK"]
    assert config["confidentialCompute"]["tdx"]["attestation"]["enforced"] is True


@pytest.mark.slow
def test_double_pool_is_refused(render):
    proc, files = render(
        {"tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"], "tee_key_pool_mode": "nfd"}}
    )
    assert proc.returncode != 0
    assert "two pools for the same TDX keys" in proc.flat
    assert "NodeFeatureRule confidential-tee-keys (rule intel.tdx) advertises tdx.intel.com/keys" in proc.flat
    assert "advertises devices.kubevirt.io/tdx" in proc.flat
    assert files == {}  # nothing is written before the plan is accepted


@pytest.mark.slow
def test_second_run_changes_nothing_and_check_mode_writes_nothing(render, tmp_path):
    hosts = {"snp-kata": {"vendor": "amd", "tee_node_consumers": ["kata"]}}
    proc, _ = render(hosts, "--check")
    ok(proc)
    assert not (tmp_path / "manifests").exists()
    ok(render(hosts)[0])
    again, files = render(hosts)
    ok(again)
    assert "changed=0" in again.flat.split("PLAY RECAP", 1)[1]
    assert set(files) == {"20-nodefeaturerule-confidential-tee-keys.yaml", "30-runtimeclass-kata-qemu-snp.yaml"}


@pytest.mark.slow
def test_stale_manifests_of_an_owner_are_pruned(render, tmp_path):
    ok(render({"tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"]}})[0])
    stranger = tmp_path / "manifests" / "99-mine.yaml"
    stranger.write_text("kind: Mine\n")
    proc, files = render({"tdx-1": {"vendor": "intel", "tee_node_consumers": ["kubevirt"]}})
    ok(proc)
    assert "30-runtimeclass-kata-qemu-tdx.yaml" not in files  # no Kata node any more
    assert stranger.exists()  # files this collection did not write are never touched


@pytest.mark.parametrize(
    ("cluster_vars", "named"),
    [
        ({"tee_output": "maybe"}, "tee_output must be one of apply, manifests, machineconfig, got 'maybe'"),
        ({"tee_output": "Apply"}, "tee_output must be one of apply, manifests, machineconfig, got 'Apply'"),
        ({"tee_output": ["apply"]}, "tee_output must be a string (one of apply, manifests, machineconfig), got a list"),
        ({"tee_cluster_flavor": "k3s"}, "tee_cluster_flavor must be one of kubernetes, openshift, got 'k3s'"),
        ({"tee_manifest_dir": ""}, "tee_manifest_dir must be a non-empty path string, got ''"),
        ({"tee_manifest_dir": ["a", "b"]}, "tee_manifest_dir must be a non-empty path string, got ['a', 'b']"),
        ({"tee_manifest_dir": {"a": 1}}, "tee_manifest_dir must be a non-empty path string, got {'a': 1}"),
        ({"tee_cluster_gather_host_facts": "maybe"}, "tee_cluster_gather_host_facts must be true or false"),
    ],
    ids=["unknown-output", "case-output", "list-output", "flavor", "empty-dir", "list-dir", "map-dir", "maybe-facts"],
)
def test_cluster_wide_inputs_are_refused_before_anything_happens(render, cluster_vars, named):
    proc, files = render({"tdx-1": {"vendor": "intel"}}, **cluster_vars)
    assert proc.returncode != 0 and named in proc.flat, proc.flat[-3000:]
    assert files == {}


def test_an_empty_node_group_is_refused_instead_of_pruning_every_manifest(render):
    proc, _files = render({})
    assert proc.returncode != 0 and "must list at least one node" in proc.flat, proc.flat[-3000:]


@pytest.mark.slow
def test_kernel_mode_renders_the_key_agent_and_the_admission_policy(render):
    proc, files = render(
        {
            "tdx-1": {"vendor": "intel", "tee_node_consumers": ["kata", "kubevirt"], "tee_key_pool_mode": "kernel"},
            "snp-1": {"vendor": "amd", "tee_node_consumers": ["kata"], "tee_key_pool_mode": "kernel"},
        },
        kernel_key_pool_reserve={"tdx": 1},
    )
    ok(proc)
    agent = {
        name: obj for name, obj in files.items() if obj["kind"] not in ("NodeFeatureRule", "RuntimeClass", "KubeVirt")
    }
    assert sorted(agent) == [
        "00-namespace-confidential-tee.yaml",
        "01-serviceaccount-confidential-tee-tee-key-agent.yaml",
        "02-clusterrole-tee-key-agent.yaml",
        "02-role-default-tee-key-agent.yaml",
        "03-clusterrolebinding-tee-key-agent.yaml",
        "03-rolebinding-default-tee-key-agent.yaml",
        "82-validatingadmissionpolicy-confidential-tee-key-agent-own-node.yaml",
        "83-validatingadmissionpolicybinding-confidential-tee-key-agent-own-node.yaml",
        "85-daemonset-confidential-tee-tee-key-agent.yaml",
        "86-mutatingadmissionpolicy-confidential-tee-key-pool-tdx.yaml",
        "87-mutatingadmissionpolicybinding-confidential-tee-key-pool-tdx.yaml",
    ]
    pod = files["85-daemonset-confidential-tee-tee-key-agent.yaml"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [term["matchFields"][0]["values"] for term in terms] == [["snp-1"], ["tdx-1"]]
    assert "--reserve=tdx=1" in pod["containers"][0]["args"]
    # The image the collection's make image builds, tagged with the collection's version.
    assert (
        pod["containers"][0]["image"]
        == "localhost/confidential-tee/key-agent:" + yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    )
    # Kata's classes charge the same pool as the agent keeps (NFD's resource name, no NFD extended resource).
    assert files["30-runtimeclass-kata-qemu-tdx.yaml"]["overhead"]["podFixed"]["tdx.intel.com/keys"] == "1"
    rule = files["20-nodefeaturerule-confidential-tee-keys.yaml"]
    assert not any(r.get("extendedResources") for r in rule["spec"]["rules"])
    assert "Key agent (localhost/confidential-tee/key-agent:" in proc.flat and "snp-1, tdx-1" in proc.flat
