"""The kubelet over real Unix sockets, driven by in-process plugins speaking real gRPC."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import grpc
import pytest
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, AllocationError, Device, PodRef
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.kubelet.server import Kubelet
from teesim.plugins.base import DevicePluginService, PluginServer

RES = "devices.kubevirt.io/tdx"
WAIT = 5.0


def _devices(n: int, unhealthy: frozenset[int] = frozenset()) -> list[Device]:
    return [Device(f"tdx-{i}", UNHEALTHY if i in unhealthy else HEALTHY) for i in range(n)]


def _allocatable(k: Kubelet) -> int:
    return k.device_manager.allocatable().get(RES, -1)


@pytest.fixture
def plugin(kubelet: Kubelet) -> Iterator[PluginServer]:
    service = DevicePluginService(RES)
    service.set_devices(_devices(4))
    server = PluginServer(service, kubelet.dir, "tdx.sock")
    server.serve()
    server.register()
    assert kubelet.wait_for(lambda k: _allocatable(k) == 4, WAIT)
    yield server
    server.shutdown()


@pytest.fixture
def pod_resources(kubelet: Kubelet) -> Iterator[pr_grpc.PodResourcesListerStub]:
    channel = sockets.channel(kubelet.pod_resources_socket)
    yield pr_grpc.PodResourcesListerStub(channel)
    channel.close()


def _listed(response: pr.ListPodResourcesResponse) -> dict[str, dict[str, list[str]]]:
    return {
        f"{p.namespace}/{p.name}": {c.name: sorted(i for d in c.devices for i in d.device_ids) for c in p.containers}
        for p in response.pod_resources
    }


def _register(kubelet: Kubelet, **fields: str) -> None:
    request = dict(version="v1beta1", endpoint="tdx.sock", resource_name=RES) | fields
    channel = sockets.channel(kubelet.registration_socket)
    try:
        dp_grpc.RegistrationStub(channel).Register(dp.RegisterRequest(**request), timeout=WAIT)
    finally:
        channel.close()


def test_sockets_are_where_the_kubelet_puts_them(kubelet, node_root):
    assert sockets.is_socket(node_root / "var/lib/kubelet/device-plugins/kubelet.sock")
    assert sockets.is_socket(node_root / "var/lib/kubelet/pod-resources/kubelet.sock")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"version": "v1alpha"}, "invalid version of api"),
        ({"resource_name": "tdx"}, "invalid resource name"),
        ({"resource_name": "kubernetes.io/tdx"}, "invalid resource name"),
        ({"endpoint": "nobody-listens.sock"}, "failed to connect to the device plugin"),
    ],
)
def test_register_rejections_reach_the_plugin(kubelet, fields, message):
    kubelet.dial_timeout = 0.5  # nobody listens on the endpoint: fail fast instead of in 10 s
    with pytest.raises(grpc.RpcError) as err:
        _register(kubelet, **fields)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert message in err.value.details()
    assert kubelet.device_manager.resources() == []


def test_every_list_and_watch_response_replaces_the_list(kubelet, plugin):
    plugin.service.set_devices(_devices(3, unhealthy=frozenset({0})))
    assert kubelet.wait_for(
        lambda k: k.snapshot()[RES] == {"healthy": ["tdx-1", "tdx-2"], "unhealthy": ["tdx-0"]}, WAIT
    )
    assert kubelet.device_manager.capacity() == {RES: 3}
    assert kubelet.device_manager.allocatable() == {RES: 2}


def test_allocate_once_per_container_and_pod_resources_lists_it(kubelet, plugin, pod_resources):
    vm = PodRef("default", "virt-launcher-a", uid="uid-a")
    response = kubelet.allocate(vm, "compute", RES, 2)
    assert response.envs == {"TEESIM_TDX_DEVICES": "tdx-0,tdx-1"}
    kubelet.allocate(vm, "compute", RES, 2)  # already holds them: no second Allocate
    kubelet.allocate(vm, "sidecar", RES, 1)
    kata = PodRef("default", "kata-b", uid="uid-b")
    kubelet.add_pod(kata, ["app"])  # its key is charged through RuntimeClass overhead, not a device
    assert plugin.service.allocations == [["tdx-0", "tdx-1"], ["tdx-2"]]

    stub = pod_resources
    listed = _listed(stub.List(pr.ListPodResourcesRequest(), timeout=WAIT))
    assert listed == {
        "default/virt-launcher-a": {"compute": ["tdx-0", "tdx-1"], "sidecar": ["tdx-2"]},
        "default/kata-b": {"app": []},
    }
    got = stub.Get(pr.GetPodResourcesRequest(pod_name="virt-launcher-a", pod_namespace="default"), timeout=WAIT)
    assert {d.resource_name for c in got.pod_resources.containers for d in c.devices} == {RES}
    allocatable = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=WAIT)
    assert sorted(i for d in allocatable.devices for i in d.device_ids) == [f"tdx-{i}" for i in range(4)]
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="default"), timeout=WAIT)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "pod nope not found in default" in err.value.details()

    with pytest.raises(AllocationError, match="Requested: 2, Available: 1"):
        kubelet.allocate(PodRef("default", "c"), "compute", RES, 2)


def test_finished_pods_vanish_from_list_and_free_devices_lazily(kubelet, plugin, pod_resources):
    a = PodRef("default", "a")
    kubelet.allocate(a, "compute", RES, 4)
    kubelet.finish_pod(a)
    stub = pod_resources
    assert _listed(stub.List(pr.ListPodResourcesRequest(), timeout=WAIT)) == {}
    assert len(kubelet.device_manager.allocated_ids(RES)) == 4, "freed only at the next admission"
    kubelet.allocate(PodRef("default", "b"), "compute", RES, 4)
    assert plugin.service.allocations[-1] == [f"tdx-{i}" for i in range(4)]


def test_preferred_allocation_is_asked_for_and_used(kubelet, node_root):
    class Backwards(DevicePluginService):
        def GetPreferredAllocation(self, request, context):
            req = request.container_requests[0]
            chosen = list(reversed(req.available_deviceIDs))[: req.allocation_size]
            return dp.PreferredAllocationResponse(
                container_responses=[dp.ContainerPreferredAllocationResponse(deviceIDs=chosen)]
            )

    service = Backwards(RES, dp.DevicePluginOptions(get_preferred_allocation_available=True))
    service.set_devices(_devices(4))
    server = PluginServer(service, kubelet.dir, "pref.sock")
    server.serve()
    try:
        server.register()
        assert kubelet.wait_for(lambda k: _allocatable(k) == 4, WAIT)
        kubelet.allocate(PodRef("default", "a"), "compute", RES, 1)
        assert service.allocations == [["tdx-3"]]
    finally:
        server.shutdown()


def test_stream_break_makes_all_devices_unhealthy(kubelet, plugin):
    kubelet.allocate(PodRef("default", "a"), "compute", RES, 1)
    plugin.shutdown()
    assert kubelet.wait_for(lambda k: _allocatable(k) == 0, WAIT)
    assert kubelet.device_manager.capacity() == {RES: 4}
    assert not kubelet.connected(RES)
    with pytest.raises(AllocationError):
        kubelet.allocate(PodRef("default", "b"), "compute", RES, 1)


def test_restart_deletes_sockets_and_the_plugin_reregisters(kubelet, plugin):
    vm = PodRef("default", "a")
    kubelet.allocate(vm, "compute", RES, 1)
    old_kubelet_sock = sockets.socket_identity(kubelet.registration_socket)
    stray = kubelet.plugin_dir / "not-a-socket"
    stray.write_text("kept")

    kubelet.restart()
    assert not os.path.exists(plugin.socket), "the kubelet deletes every socket in device-plugins/"
    assert stray.exists(), "but only sockets"
    assert sockets.socket_identity(kubelet.registration_socket) != old_kubelet_sock
    assert kubelet.device_manager.capacity() == {RES: 0}
    assert plugin.needs_registration()

    stop = threading.Event()
    watcher = threading.Thread(target=plugin.keep_registered, args=(stop, 0.01))
    watcher.start()
    try:
        assert kubelet.wait_for(lambda k: _allocatable(k) == 4, WAIT)
    finally:
        stop.set()
        watcher.join(WAIT)
    assert plugin.registrations == 2
    assert kubelet.device_manager.pod_devices(vm) == {"compute": {RES: ["tdx-0"]}}, "checkpoint survives"
    kubelet.allocate(PodRef("default", "b"), "compute", RES, 1)
    assert plugin.service.allocations[-1] == ["tdx-1"]


def test_socket_paths_over_the_limit_are_refused(tmp_path):
    with pytest.raises(ValueError, match="107-byte limit"):
        Kubelet("/tmp/" + "x" * 100)
