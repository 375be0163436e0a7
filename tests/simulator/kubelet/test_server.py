"""The kubelet over real Unix sockets, driven by in-process plugins speaking real gRPC."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, AllocationError, Device, PodRef
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.kubelet.ratelimit import TokenBucket
from teesim.kubelet.server import Kubelet
from teesim.plugins.base import DevicePluginService, PluginServer

RES = "devices.kubevirt.io/tdx"
WAIT = 60.0  # a bound for gRPC messages to arrive on a busy machine, not a timing


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
        ({"version": "v1alpha"}, 'requested API version "v1alpha" is not supported by kubelet'),
        ({"resource_name": "tdx"}, 'the ResourceName "tdx" is invalid'),
        ({"resource_name": "kubernetes.io/tdx"}, 'the ResourceName "kubernetes.io/tdx" is invalid'),
        # client.go's dial (k8s.io/kubernetes v1.37.2): the 10 s dial context's error, nothing else.
        ({"endpoint": "nobody-listens.sock"}, "failed to dial device plugin: context deadline exceeded"),
    ],
)
def test_register_rejections_reach_the_plugin(kubelet, fields, message):
    kubelet.dial_timeout = 0.5  # nobody listens on the endpoint: fail fast instead of in 10 s
    with pytest.raises(grpc.RpcError) as err:
        _register(kubelet, **fields)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert err.value.details().startswith(message)  # the dial's is the whole message: nothing after it
    assert "dial" not in message or err.value.details() == message
    assert kubelet.device_manager.resources() == []


class _NoOptions(DevicePluginService):
    def GetDevicePluginOptions(self, request, context):
        context.abort(grpc.StatusCode.INTERNAL, "options unavailable")


def test_a_plugin_whose_options_fail_is_refused_with_the_kubelets_words(kubelet):
    """``PluginConnected`` (manager.go, k8s.io/kubernetes v1.37.2): ``failed to get device plugin options: %v``."""
    server = PluginServer(_NoOptions(RES), kubelet.dir, "tdx.sock")
    server.serve()
    try:
        with pytest.raises(grpc.RpcError) as err:
            _register(kubelet)
    finally:
        server.shutdown()
    assert err.value.details() == (
        "failed to get device plugin options: rpc error: code = Internal desc = options unavailable"
    )
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
    (first,) = plugin.service.allocations
    assert response.envs == {"TEESIM_TDX_DEVICES": ",".join(first)}
    kubelet.allocate(vm, "compute", RES, 2)  # already holds them: no second Allocate
    kubelet.allocate(vm, "sidecar", RES, 1)
    kata = PodRef("default", "kata-b", uid="uid-b")
    kubelet.add_pod(kata, ["app"])  # its key is charged through RuntimeClass overhead, not a device
    assert len(plugin.service.allocations) == 2
    side = plugin.service.allocations[1]

    stub = pod_resources
    listed = _listed(stub.List(pr.ListPodResourcesRequest(), timeout=WAIT))
    assert listed == {
        "default/virt-launcher-a": {"compute": sorted(first), "sidecar": side},
        "default/kata-b": {"app": []},
    }
    got = stub.Get(pr.GetPodResourcesRequest(pod_name="virt-launcher-a", pod_namespace="default"), timeout=WAIT)
    assert {d.resource_name for c in got.pod_resources.containers for d in c.devices} == {RES}
    with pytest.raises(grpc.RpcError) as err:
        stub.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="default"), timeout=WAIT)
    # A plain fmt.Errorf in server_v1.go: status Unknown, upstream's sentence.
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert err.value.details() == "pod nope in namespace default not found"

    with pytest.raises(AllocationError, match="Requested: 2, Available: 1"):
        kubelet.allocate(PodRef("default", "c"), "compute", RES, 2)


def test_get_allocatable_resources_lists_healthy_devices_only(kubelet, plugin, pod_resources):
    plugin.service.set_devices(_devices(4, unhealthy=frozenset({1, 3})))
    assert kubelet.wait_for(lambda k: _allocatable(k) == 2, WAIT)
    answer = pod_resources.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=WAIT)
    assert sorted(i for d in answer.devices for i in d.device_ids) == ["tdx-0", "tdx-2"]


def test_pod_resources_share_one_rate_limit(kubelet, plugin, pod_resources):
    kubelet.pod_resources_limiter = TokenBucket(qps=0.001, burst=3)
    calls = [
        lambda: pod_resources.List(pr.ListPodResourcesRequest(), timeout=WAIT),
        lambda: pod_resources.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=WAIT),
        lambda: pod_resources.List(pr.ListPodResourcesRequest(), timeout=WAIT),
    ]
    for call in calls:
        call()
    with pytest.raises(grpc.RpcError) as err:
        pod_resources.List(pr.ListPodResourcesRequest(), timeout=WAIT)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.value.details() == "rejected by rate limit"


def test_pod_list_carries_overhead_for_informer_like_readers(kubelet, plugin):
    vm = PodRef("default", "virt-launcher-a", uid="uid-a")
    kubelet.allocate(vm, "compute", RES, 1)
    kata = PodRef("default", "kata-b", uid="uid-b")
    kubelet.add_pod(kata, ["app"], overhead={"tdx.intel.com/keys": 1}, runtime_class="kata-qemu-tdx")
    kubelet.finish_pod(vm)
    with urllib.request.urlopen(kubelet.pods_url, timeout=WAIT) as answer:
        document = json.load(answer)
    assert document["kind"] == "PodList"
    by_name = {p["metadata"]["name"]: p for p in document["items"]}
    assert by_name["kata-b"]["spec"]["overhead"] == {"tdx.intel.com/keys": "1"}
    assert by_name["kata-b"]["spec"]["runtimeClassName"] == "kata-qemu-tdx"
    assert by_name["kata-b"]["status"]["phase"] == "Running"
    assert by_name["virt-launcher-a"]["status"]["phase"] == "Succeeded"
    assert by_name["virt-launcher-a"]["spec"]["containers"][0]["resources"]["requests"] == {RES: "1"}


@contextlib.contextmanager
def _registered(kubelet: Kubelet, service: DevicePluginService, socket: str, devices: int) -> Iterator[None]:
    """Serve ``service`` with ``devices`` devices, register it and wait until the kubelet has them."""
    service.set_devices(_devices(devices))
    server = PluginServer(service, kubelet.dir, socket)
    server.serve()
    try:
        server.register()
        assert kubelet.wait_for(lambda k: _allocatable(k) == devices, WAIT)
        yield
    finally:
        server.shutdown()


def test_pre_start_container_is_called_when_the_plugin_asks(kubelet, node_root):
    service = DevicePluginService(RES, dp.DevicePluginOptions(pre_start_required=True))
    with _registered(kubelet, service, "pre.sock", 2):
        vm = PodRef("default", "a")
        kubelet.allocate(vm, "compute", RES, 1)
        assert kubelet.start_container(vm, "compute") == 1
        assert service.pre_starts == service.allocations


def test_pre_start_container_is_skipped_otherwise(kubelet, plugin):
    vm = PodRef("default", "a")
    kubelet.allocate(vm, "compute", RES, 1)
    assert kubelet.start_container(vm, "compute") == 0
    assert plugin.service.pre_starts == []


def test_reregistering_while_the_old_stream_is_open_loses_the_new_registration(kubelet, plugin):
    """The old stream's end disconnects whichever client holds the resource name now (runClient)."""
    old_service = plugin.service
    new_service = DevicePluginService(RES)
    new_service.set_devices(_devices(3))
    new_server = PluginServer(new_service, kubelet.dir, "tdx-new.sock")
    new_server.serve()
    try:
        new_server.register()
        assert kubelet.wait_for(lambda k: _allocatable(k) == 3, WAIT)
        old_service.close()  # the old plugin goes away only now
        assert kubelet.wait_for(lambda k: _allocatable(k) == 0 and not k.connected(RES), WAIT)
        assert kubelet.device_manager.endpoint(RES).stopped
        assert kubelet.device_manager.capacity() == {RES: 3}, "kept (unhealthy) until the grace period ends"
        # A plugin that watches for its stream being dropped registers again on the same socket.
        assert new_server.stream_dropped() or new_service.stream_lost.wait(WAIT)
        new_service.stream_lost.clear()
        new_server.register()
        assert kubelet.wait_for(lambda k: _allocatable(k) == 3, WAIT)
    finally:
        new_server.shutdown()


def test_finished_pods_are_freed_lazily_and_by_list(kubelet, plugin, pod_resources):
    a = PodRef("default", "a")
    kubelet.allocate(a, "compute", RES, 4)
    kubelet.finish_pod(a)
    assert len(kubelet.device_manager.allocated_ids(RES)) == 4, "the plugin is never told; held until..."
    stub = pod_resources
    assert _listed(stub.List(pr.ListPodResourcesRequest(), timeout=WAIT)) == {}
    # ... pod-resources List, which calls UpdateAllocatedDevices before answering (or the next admission).
    assert kubelet.device_manager.allocated_ids(RES) == set()
    kubelet.allocate(PodRef("default", "b"), "compute", RES, 4)
    assert sorted(plugin.service.allocations[-1]) == [f"tdx-{i}" for i in range(4)]


def test_preferred_allocation_is_asked_for_and_used(kubelet, node_root):
    class Backwards(DevicePluginService):
        def GetPreferredAllocation(self, request, context):
            req = request.container_requests[0]
            # Always one device, the last available: short of a request for more.
            chosen = list(reversed(req.available_deviceIDs))[:1]
            return dp.PreferredAllocationResponse(
                container_responses=[dp.ContainerPreferredAllocationResponse(deviceIDs=chosen)]
            )

    service = Backwards(RES, dp.DevicePluginOptions(get_preferred_allocation_available=True))
    with _registered(kubelet, service, "pref.sock", 4):
        kubelet.allocate(PodRef("default", "a"), "compute", RES, 1)
        assert service.allocations == [["tdx-3"]]
        # A preference naming fewer devices than asked for is topped up by the kubelet.
        kubelet.allocate(PodRef("default", "b"), "compute", RES, 2)
        assert service.allocations[-1][0] == "tdx-2" and len(set(service.allocations[-1])) == 2


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
    (held,) = plugin.service.allocations[-1]
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
    assert kubelet.device_manager.pod_devices(vm) == {"compute": {RES: [held]}}, "checkpoint survives"
    kubelet.allocate(PodRef("default", "b"), "compute", RES, 3)
    assert held not in plugin.service.allocations[-1]


class _RemembersSet(threading.Event):
    """An Event that also remembers it was set once (``was_set``), after it is cleared again."""

    def __init__(self) -> None:
        super().__init__()
        self.was_set = threading.Event()

    def set(self) -> None:
        self.was_set.set()
        super().set()


def test_a_plugin_reregistering_its_dropped_stream_survives_the_new_kubelet_removing_its_socket(kubelet, plugin):
    """Found on the real kubelet v1.37.2 (tests/node): the kubelet exits on SIGTERM leaving its kubelet.sock behind,
    the plugin's stream ends and it registers again on the same socket, waiting for the kubelet; the new kubelet
    removes every socket in device-plugins/ when it starts, the plugin's too, so it cannot dial the plugin and
    refuses the registration. The plugin serves its socket again and registers instead of exiting."""
    stop, failures = threading.Event(), []
    # The plugin clears stream_lost as soon as it starts registering again (its loop polls every 10 ms): wait for
    # "was set", which stays, not for the flag, which a busy machine can let this thread miss.
    plugin.service.stream_lost = _RemembersSet()

    def watch() -> None:
        try:
            plugin.keep_registered(stop, 0.01)
        except Exception as exc:  # the thread's end: what the plugin process would exit with
            failures.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        kubelet.stop()
        stale = socket.socket(socket.AF_UNIX)  # the exited kubelet's socket file: bound, nobody listening
        stale.bind(str(kubelet.registration_socket))
        stale.close()
        # The plugin noticed its stream end and is registering on its old socket, waiting for a kubelet.
        assert plugin.service.stream_lost.was_set.wait(WAIT)
        assert kubelet.wait_for(lambda k: not plugin.service.stream_lost.is_set(), WAIT)
        kubelet.start()
        assert kubelet.wait_for(lambda k: plugin.registrations == 2 and k.connected(RES), WAIT), failures
    finally:
        stop.set()
        watcher.join(WAIT)
    assert failures == []
    assert _allocatable(kubelet) == 4


def test_socket_paths_over_the_limit_are_refused(tmp_path):
    with pytest.raises(ValueError, match="107-byte limit"):
        Kubelet("/tmp/" + "x" * 100)
