"""teesim fleet build: host trees plus Kubernetes objects that pass the real schemas (kubernetes-validate for core
objects, the NFD CRD for NodeFeatureRules), deterministic, with the H100 capture when the reference is there."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from teesim.cli import main
from teesim.cluster.fleet import build_fleet

KUBERNETES_VERSION = "1.34"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet")
    return out, build_fleet(out, reference=None)


def documents(out: Path) -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in sorted((out / "kubernetes").glob("*.json"))}


def test_writes_trees_objects_and_inventory(fleet):
    out, summary = fleet
    assert summary["nodes"] == ["snp-1", "tdx-1", "tdx-2", "tdx-nomisc", "tdx-old"]
    assert summary["notes"] == ["gpu-h100 left out: no H100 capture under ../shared/reference"]
    assert set(documents(out)) == {"nodefeaturerules.json", "nodes.json", "pods.json", "runtimeclasses.json"}
    hosts = yaml.safe_load((out / "inventory.yml").read_text())["tee_nodes"]["hosts"]
    assert set(hosts) == set(summary["nodes"])
    assert hosts["tdx-1"]["tee_host_root"] == str(out / "nodes" / "tdx-1")
    assert (out / "nodes/tdx-1/sys/fs/cgroup/misc.current").read_text() == "tdx 20\n"
    assert (out / "nodes/tdx-1/sys/fs/cgroup/machine.slice/misc.current").read_text() == "tdx 6\n"
    assert (out / "nodes/snp-1/sys/fs/cgroup/misc.capacity").read_text() == "sev_es 99\n"
    assert (out / "nodes/snp-1/sys/module/kvm_amd/parameters/sev").read_text() == "Y\n"
    assert (out / "nodes/tdx-old/sys/fs/cgroup/misc.capacity").read_text() == ""
    assert not (out / "nodes/tdx-nomisc/sys/module/kvm_intel/parameters/tdx").exists()


@pytest.mark.parametrize("filename", ["nodes.json", "pods.json", "runtimeclasses.json"])
def test_core_objects_pass_the_kubernetes_schema_strictly(fleet, filename):
    out, _ = fleet
    document = documents(out)[filename]
    assert document["kind"] == "List" and document["items"]
    for item in document["items"]:
        assert kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True) == KUBERNETES_VERSION


def test_a_schema_violation_would_be_caught():
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}, "specs": {}},
            KUBERNETES_VERSION,
            strict=True,
        )


def test_node_feature_rules_pass_the_nfd_crd(fleet, reference):
    crd_file = reference / "crds" / "nfd-api-crds.yaml"
    crds = [
        c for c in yaml.safe_load_all(crd_file.read_text()) if c and c["spec"]["names"]["kind"] == "NodeFeatureRule"
    ]
    version = next(v for v in crds[0]["spec"]["versions"] if v["served"])
    out, _ = fleet
    for rule in documents(out)["nodefeaturerules.json"]["items"]:
        assert rule["apiVersion"] == "nfd.k8s-sigs.io/" + version["name"]
        jsonschema.validate(rule, version["schema"]["openAPIV3Schema"])


def test_rebuild_is_byte_identical(fleet, tmp_path):
    out, _ = fleet
    build_fleet(tmp_path, reference=None)
    assert documents(tmp_path) == documents(out)


def test_cli_with_the_h100_capture(tmp_path, reference):
    assert main(["fleet", "build", "--out", str(tmp_path), "--reference", str(reference)]) == 0
    hosts = yaml.safe_load((tmp_path / "inventory.yml").read_text())["tee_nodes"]["hosts"]
    smi = Path(hosts["gpu-h100"]["tee_nvidia_smi_path"])
    assert smi == tmp_path / "nodes/gpu-h100/usr/bin/nvidia-smi" and smi.stat().st_mode & 0o111
    gpu_node = next(n for n in documents(tmp_path)["nodes.json"]["items"] if n["metadata"]["name"] == "gpu-h100")
    assert gpu_node["status"]["capacity"]["nvidia.com/gpu"] == "1"


def test_copies_for_benchmarks(tmp_path):
    summary = build_fleet(tmp_path, reference=None, copies=2)
    assert len(summary["nodes"]) == 10 and "tdx-1-1" in summary["nodes"]
    pods = documents(tmp_path)["pods.json"]["items"]
    assert {p["spec"]["nodeName"] for p in pods} == {"tdx-1-0", "tdx-1-1", "tdx-2-0", "tdx-2-1", "snp-1-0", "snp-1-1"}
