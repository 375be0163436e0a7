"""The committed gRPC stubs: fresh from the protos, and wire-compatible with upstream Kubernetes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr

REPO = Path(__file__).resolve().parents[3]
GENERATED = REPO / "simulator" / "teesim" / "kubelet" / "generated"

# Field numbers of upstream k8s.io/kubelet v0.37.2 pkg/apis/{deviceplugin/v1beta1,podresources/v1}/api.proto
# (carried whole in simulator/teesim/kubelet/protos; issue 27: PodResources.cpu_ids, memory and
# ClaimResource.share_id were missing).
DEVICEPLUGIN_FIELDS = {
    "DevicePluginOptions": {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    "RegisterRequest": {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    "Empty": {},
    "ListAndWatchResponse": {"devices": 1},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "Device": {"ID": 1, "health": 2, "topology": 3},
    "PreStartContainerRequest": {"devices_ids": 1},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": 1},
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    },
    "PreferredAllocationResponse": {"container_responses": 1},
    "ContainerPreferredAllocationResponse": {"deviceIDs": 1},
    "AllocateRequest": {"container_requests": 1},
    "ContainerAllocateRequest": {"devices_ids": 1},
    "CDIDevice": {"name": 1},
    "AllocateResponse": {"container_responses": 1},
    "ContainerAllocateResponse": {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5},
    "Mount": {"container_path": 1, "host_path": 2, "read_only": 3},
    "DeviceSpec": {"container_path": 1, "host_path": 2, "permissions": 3},
}
PODRESOURCES_FIELDS = {
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {"devices": 1, "cpu_ids": 2, "memory": 3},
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": 1},
    "PodResources": {"name": 1, "namespace": 2, "containers": 3, "cpu_ids": 4, "memory": 5},
    "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
    "ContainerMemory": {"memory_type": 1, "size": 2, "topology": 3},
    "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
    "ClaimResource": {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4, "share_id": 5},
    "CDIDevice": {"name": 1},
    "GetPodResourcesRequest": {"pod_name": 1, "pod_namespace": 2},
    "GetPodResourcesResponse": {"pod_resources": 1},
}
# service -> method -> (request, response, server streaming)
DEVICEPLUGIN_SERVICES = {
    "Registration": {"Register": ("RegisterRequest", "Empty", False)},
    "DevicePlugin": {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": ("PreferredAllocationRequest", "PreferredAllocationResponse", False),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    },
}
PODRESOURCES_SERVICES = {
    "PodResourcesLister": {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse", False),
        "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse", False),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse", False),
    }
}


@pytest.mark.parametrize(
    ("module", "package", "fields"),
    [(dp, "v1beta1", DEVICEPLUGIN_FIELDS), (pr, "v1", PODRESOURCES_FIELDS)],
    ids=["deviceplugin", "podresources"],
)
def test_messages_match_upstream(module, package, fields):
    descriptor = module.DESCRIPTOR
    assert descriptor.package == package
    assert set(descriptor.message_types_by_name) == set(fields)
    for message, expected in fields.items():
        got = {f.name: f.number for f in descriptor.message_types_by_name[message].fields}
        assert got == expected, message


@pytest.mark.parametrize(
    ("module", "services"),
    [(dp, DEVICEPLUGIN_SERVICES), (pr, PODRESOURCES_SERVICES)],
    ids=["deviceplugin", "podresources"],
)
def test_services_match_upstream(module, services):
    descriptor = module.DESCRIPTOR
    assert set(descriptor.services_by_name) == set(services)
    for name, methods in services.items():
        service = descriptor.services_by_name[name]
        got = {
            m.name: (m.input_type.name, m.output_type.name, m.server_streaming)
            for m in service.methods
            if not m.client_streaming
        }
        assert got == methods
        assert len(service.methods) == len(methods)
        assert service.full_name == f"{descriptor.package}.{name}"


def test_the_two_api_protos_do_not_collide():
    assert dp.DESCRIPTOR.name != pr.DESCRIPTOR.name
    assert dp.Device(ID="tdx-0", health="Healthy").SerializeToString() == b"\n\x05tdx-0\x12\x07Healthy"


def _normalise(text: str) -> str:
    # Only the generator's version stamps may differ between patch releases of grpcio-tools.
    text = re.sub(r"ValidateProtobufRuntimeVersion\(.*?\)", "Validate(...)", text, flags=re.S)
    text = re.sub(r"^# Protobuf Python Version: .*$", "", text, flags=re.M)
    return re.sub(r"^GRPC_GENERATED_VERSION = .*$", "", text, flags=re.M)


@pytest.mark.slow
def test_committed_stubs_equal_a_fresh_generation(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run scripts/gen_protos.sh")
    subprocess.run(
        ["bash", str(REPO / "scripts" / "gen_protos.sh"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=120,
    )
    fresh_root = tmp_path / "teesim" / "kubelet" / "generated"
    fresh = sorted(p.relative_to(fresh_root) for p in fresh_root.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(GENERATED) for p in GENERATED.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert fresh == committed
    stale = [
        str(rel)
        for rel in fresh
        if _normalise((fresh_root / rel).read_text()) != _normalise((GENERATED / rel).read_text())
    ]
    assert not stale, f"run scripts/gen_protos.sh and commit: stale stubs {stale}"


PROTOS = REPO / "simulator" / "teesim" / "kubelet" / "protos"
UPSTREAM = json.loads((PROTOS / "UPSTREAM.json").read_text(encoding="utf-8"))


def test_the_protos_are_upstreams_whole_at_the_named_version():
    """Each api.proto is byte for byte the file of the k8s.io/kubelet version UPSTREAM.json names."""
    assert UPSTREAM["module"] == "k8s.io/kubelet" and re.fullmatch(r"v0\.\d+\.\d+", UPSTREAM["version"])
    on_disk = sorted(p.relative_to(PROTOS).as_posix() for p in PROTOS.rglob("*.proto"))
    assert on_disk == sorted(UPSTREAM["files"])
    for name, entry in UPSTREAM["files"].items():
        assert hashlib.sha256((PROTOS / name).read_bytes()).hexdigest() == entry["sha256"], name
        assert (PROTOS / name).read_text(encoding="utf-8").count("option go_package") == 1  # not a rewrite


@pytest.mark.slow
def test_the_protos_equal_the_module_the_go_proxy_serves(tmp_path):
    """``go mod download`` of the named version (from the Go module cache, or the proxy) has the same files,
    and the module's go.sum hash is the one recorded."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed: the offline digests above still hold")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"}
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{UPSTREAM['module']}@{UPSTREAM['version']}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0 and "dial tcp" in done.stdout + done.stderr:
        pytest.skip(f"the Go module proxy cannot be reached: {(done.stdout + done.stderr)[-200:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    module = json.loads(done.stdout)
    assert module["Sum"] == UPSTREAM["go_sum"]
    for name, entry in UPSTREAM["files"].items():
        assert (Path(module["Dir"]) / entry["upstream"]).read_bytes() == (PROTOS / name).read_bytes(), name
