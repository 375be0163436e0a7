"""The kubelet details of issue 19, each against the upstream line it reproduces.

Upstream: kubernetes/kubernetes v1.34, ``pkg/kubelet/cm/devicemanager/{manager,endpoint,types}.go``,
``pkg/kubelet/apis/podresources/server_v1.go``, ``k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/constants.go``
and ``k8s.io/apimachinery/pkg/util/validation/validation.go``. Time is the kubelet's injected clock;
nothing here waits on the wall clock except for gRPC messages to arrive (bounded by ``WAIT``).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from teesim.kubelet import server as kubelet_server
from teesim.kubelet import sockets
from teesim.kubelet.devicemanager import (
    ENDPOINT_STOP_GRACE_PERIOD,
    HEALTHY,
    UNHEALTHY,
    AllocationError,
    Device,
    DeviceManager,
    PodRef,
    RegistrationError,
    check_registration,
    extended_resource_name_problem,
)
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.kubelet.generated.podresources.v1 import api_pb2 as pr
from teesim.kubelet.generated.podresources.v1 import api_pb2_grpc as pr_grpc
from teesim.kubelet.server import Kubelet
from teesim.plugins.base import DevicePluginService, PluginServer

RES = "devices.kubevirt.io/tdx"
WAIT = 60.0  # a bound for gRPC messages to arrive on a busy machine, not a timing
PRE_START = dp.DevicePluginOptions(pre_start_required=True)


class Clock:
    """The kubelet's clock, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kubelet(clock: Clock) -> Iterator[Kubelet]:
    root = Path(tempfile.mkdtemp(prefix="tsf-", dir="/tmp"))
    k = Kubelet(root, clock=clock, serve_pods=False)
    k.start()
    yield k
    k.stop()
    shutil.rmtree(root, ignore_errors=True)


def _allocatable(k: Kubelet) -> int:
    return k.device_manager.allocatable(now=k.clock()).get(RES, -1)


@contextlib.contextmanager
def _plugin(kubelet: Kubelet, service: DevicePluginService, devices: int = 4) -> Iterator[PluginServer]:
    service.set_devices([Device(f"tdx-{i}") for i in range(devices)])
    server = PluginServer(service, kubelet.dir, "tdx.sock")
    server.serve()
    try:
        server.register()
        assert kubelet.wait_for(lambda k: _allocatable(k) == devices, WAIT)
        yield server
    finally:
        server.shutdown()


# -- PreStartContainer on a stopped or restored endpoint ------------------------------------------------


def test_pre_start_on_a_stopped_endpoint_is_refused(kubelet):
    # endpoint.go preStartContainer: "if e.isStopped() { return nil, fmt.Errorf(errEndpointStopped, e) }",
    # wrapped by manager.go callPreStartContainerIfNeeded ("device plugin PreStartContainer rpc failed
    # with err: %v"). PluginDisconnected keeps the endpoint and its options for the grace period.
    service = DevicePluginService(RES, PRE_START)
    vm = PodRef("default", "vm", uid="uid-vm")
    with _plugin(kubelet, service):
        kubelet.allocate(vm, "compute", RES, 1)
    assert kubelet.wait_for(lambda k: k.device_manager.endpoint(RES).stopped, WAIT)
    with pytest.raises(AllocationError) as err:
        kubelet.start_container(vm, "compute")
    assert (
        str(err.value) == f"device plugin PreStartContainer rpc failed with err: endpoint &{{{RES}}} has been stopped"
    )
    assert service.pre_starts == []


def test_pre_start_on_an_endpoint_restored_after_a_restart_is_skipped(kubelet):
    # manager.go readCheckpoint: "m.endpoints[resource] = endpointInfo{e: newStoppedEndpointImpl(resource),
    # opts: nil}"; callPreStartContainerIfNeeded: "if eI.opts == nil || !eI.opts.PreStartRequired {
    # ... return nil }": the container starts without the plugin being asked.
    service = DevicePluginService(RES, PRE_START)
    vm = PodRef("default", "vm", uid="uid-vm")
    with _plugin(kubelet, service):
        kubelet.allocate(vm, "compute", RES, 1)
        kubelet.restart()
        endpoint = kubelet.device_manager.endpoint(RES)
        assert endpoint.stopped and not endpoint.options_known
        assert kubelet.start_container(vm, "compute") == 0
        assert service.pre_starts == []


def test_pre_start_past_the_grace_period_finds_no_endpoint(kubelet, clock):
    # GetCapacity deletes an endpoint whose stopGracePeriodExpired(); callPreStartContainerIfNeeded then
    # fails "endpoint not found in cache for a registered resource: %s" (the resource is still a
    # device-plugin resource through allocatedDevices, isDevicePluginResource).
    vm = PodRef("default", "vm", uid="uid-vm")
    with _plugin(kubelet, DevicePluginService(RES, PRE_START)):
        kubelet.allocate(vm, "compute", RES, 1)
    assert kubelet.wait_for(lambda k: k.device_manager.endpoint(RES).stopped, WAIT)
    clock.now += ENDPOINT_STOP_GRACE_PERIOD + 1
    with pytest.raises(AllocationError, match=f"^endpoint not found in cache for a registered resource: {RES}$"):
        kubelet.start_container(vm, "compute")


def test_pre_start_without_devices_in_the_checkpoint():
    # callPreStartContainerIfNeeded: "no devices found allocated in local cache for pod %s, container %s,
    # resource %s" (%s, unquoted).
    dm = DeviceManager()
    dm.register(RES, pre_start_required=True)
    dm.update_devices(RES, [Device("tdx-0")])
    with pytest.raises(AllocationError) as err:
        dm.pre_start_devices(PodRef("ns", "p", uid="uid-p"), "c", RES)
    assert str(err.value) == f"no devices found allocated in local cache for pod uid-p, container c, resource {RES}"


# -- RPC deadlines ---------------------------------------------------------------------------------------


class _RecordingStub:
    """Wraps the kubelet's stub for one plugin and records the deadline of every call."""

    def __init__(self, stub) -> None:
        self._stub = stub
        self.timeouts: dict[str, object] = {}

    def __getattr__(self, name):
        method = getattr(self._stub, name)

        def call(request, **kwargs):
            self.timeouts[name] = kwargs.get("timeout", "none given")
            return method(request, **kwargs)

        return call


def test_pre_start_has_a_30_s_deadline_and_allocate_none(kubelet):
    # endpoint.go preStartContainer: context.WithTimeout(..., KubeletPreStartContainerRPCTimeoutInSecs *
    # time.Second), and constants.go: KubeletPreStartContainerRPCTimeoutInSecs = 30. endpoint.go allocate and
    # getPreferredAllocation use the caller's context, context.TODO() from ManagerImpl.Allocate: no deadline.
    options = dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)
    with _plugin(kubelet, DevicePluginService(RES, options)):
        recorder = _RecordingStub(kubelet._clients[RES].stub)
        kubelet._clients[RES].stub = recorder
        vm = PodRef("default", "vm")
        kubelet.allocate(vm, "compute", RES, 1)
        assert kubelet.start_container(vm, "compute") == 1
    assert recorder.timeouts == {"GetPreferredAllocation": None, "Allocate": None, "PreStartContainer": 30.0}
    assert kubelet_server.PRE_START_CONTAINER_TIMEOUT == 30.0


# -- the three error messages ----------------------------------------------------------------------------


class _Refusing(DevicePluginService):
    """A plugin whose calls fail with a gRPC status of its choosing."""

    fail: dict[str, tuple[grpc.StatusCode, str]] = {}

    def GetPreferredAllocation(self, request, context):
        if "GetPreferredAllocation" in self.fail:
            context.abort(*self.fail["GetPreferredAllocation"])
        return super().GetPreferredAllocation(request, context)

    def Allocate(self, request, context):
        if "Allocate" in self.fail:
            context.abort(*self.fail["Allocate"])
        return super().Allocate(request, context)

    def PreStartContainer(self, request, context):
        if "PreStartContainer" in self.fail:
            context.abort(*self.fail["PreStartContainer"])
        return super().PreStartContainer(request, context)


@pytest.mark.parametrize(
    ("method", "message"),
    [
        # manager.go allocateContainerResources: "resp, err := eI.e.allocate(devs) ... return err" (bare).
        ("Allocate", "rpc error: code = Internal desc = no key left"),
        # manager.go callGetPreferredAllocationIfAvailable:
        # "device plugin GetPreferredAllocation rpc failed with err: %v".
        (
            "GetPreferredAllocation",
            "device plugin GetPreferredAllocation rpc failed with err: rpc error: code = Internal desc = no key left",
        ),
        # manager.go callPreStartContainerIfNeeded: "device plugin PreStartContainer rpc failed with err: %v".
        (
            "PreStartContainer",
            "device plugin PreStartContainer rpc failed with err: rpc error: code = Internal desc = no key left",
        ),
    ],
)
def test_plugin_errors_are_worded_as_the_kubelet_words_them(kubelet, method, message):
    options = dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)
    service = _Refusing(RES, options)
    service.fail = {method: (grpc.StatusCode.INTERNAL, "no key left")}
    vm = PodRef("default", "vm")
    with _plugin(kubelet, service), pytest.raises(AllocationError) as err:
        kubelet.allocate(vm, "compute", RES, 1)
        kubelet.start_container(vm, "compute")
    assert str(err.value) == message


def test_changed_request_is_quoted_with_go_q():
    # manager.go devicesToAllocate: "pod %q container %q changed request for resource %q from %d to %d".
    dm = DeviceManager()
    dm.register(RES)
    dm.update_devices(RES, [Device("tdx-0"), Device("tdx-1")])
    pod = PodRef("default", "vm", uid="uid\tvm")
    dm.allocate(pod, "compute", RES, 1)
    with pytest.raises(AllocationError) as err:
        dm.allocate(pod, "compute", RES, 2)
    assert str(err.value) == f'pod "uid\\tvm" container "compute" changed request for resource "{RES}" from 1 to 2'


# -- resource names with a trailing newline --------------------------------------------------------------


@pytest.mark.parametrize("name", [RES + "\n", "devices.kubevirt.io\n/tdx", RES + "\r\n", "\n" + RES])
def test_names_with_a_line_break_are_refused_as_upstream_refuses_them(name):
    # validation.go: qualifiedNameRegexp = regexp.MustCompile("^" + qualifiedNameFmt + "$") and
    # dns1123SubdomainRegexp alike; Go's $ matches only at the end of the text, never before a final "\n".
    assert extended_resource_name_problem(name) is not None
    with pytest.raises(RegistrationError) as err:
        check_registration(name, "v1beta1")
    # plugin/v1beta1/server.go Register: fmt.Errorf(errInvalidResourceName, r.ResourceName);
    # types.go: errInvalidResourceName = "the ResourceName %q is invalid".
    quoted = name.replace("\r", "\\r").replace("\n", "\\n")
    assert str(err.value) == f'the ResourceName "{quoted}" is invalid'


def test_version_refusal_quotes_with_go_q():
    # types.go errUnsupportedVersion: "requested API version %q is not supported by kubelet. Supported version is %q"
    with pytest.raises(RegistrationError) as err:
        check_registration(RES, "v1beta1\n")
    assert str(err.value) == (
        'requested API version "v1beta1\\n" is not supported by kubelet. Supported version is ["v1beta1"]'
    )


# -- a device ID listed twice in one ListAndWatch update -------------------------------------------------


def test_an_id_listed_healthy_and_unhealthy_is_in_both_sets():
    # manager.go genericDeviceUpdateCallback inserts each entry into healthyDevices or unhealthyDevices with
    # no duplicate check; GetCapacity adds both sets' lengths, allocatable counts the healthy set.
    dm = DeviceManager()
    dm.register(RES)
    dm.update_devices(RES, [Device("tdx-0", HEALTHY), Device("tdx-0", UNHEALTHY), Device("tdx-1", HEALTHY)])
    assert dm.capacity() == {RES: 3}, "tdx-0 counts twice in capacity"
    assert dm.allocatable() == {RES: 2}
    assert dm.healthy_ids(RES) == ["tdx-0", "tdx-1"] and dm.unhealthy_ids(RES) == ["tdx-0"]
    # GetAllocatableDevices filters allDevices (one entry per ID) by healthyDevices: listed once.
    assert [d.id for d in dm.allocatable_devices(RES)] == ["tdx-0", "tdx-1"]
    # It is still allocatable: devicesToAllocate takes healthyDevices minus allocatedDevices.
    assert sorted(dm.allocate(PodRef("ns", "p"), "c", RES, 2)) == ["tdx-0", "tdx-1"]


def test_an_id_listed_twice_with_one_health_counts_once():
    dm = DeviceManager()
    dm.register(RES)
    dm.update_devices(RES, [Device("tdx-0"), Device("tdx-0"), Device("tdx-1", UNHEALTHY), Device("tdx-1", UNHEALTHY)])
    assert dm.capacity() == {RES: 2} and dm.allocatable() == {RES: 1}


def test_a_duplicate_over_the_wire_reaches_the_kubelet_as_is(kubelet):
    service = DevicePluginService(RES)
    with _plugin(kubelet, service, devices=2):
        service.set_devices([Device("tdx-0"), Device("tdx-1"), Device("tdx-1", UNHEALTHY)])
        assert kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES) == 3, WAIT)
        assert _allocatable(kubelet) == 2


# -- pod-resources Get on a terminated pod not yet deleted ------------------------------------------------


@pytest.fixture
def pod_resources(kubelet: Kubelet) -> Iterator[pr_grpc.PodResourcesListerStub]:
    channel = sockets.channel(kubelet.pod_resources_socket)
    yield pr_grpc.PodResourcesListerStub(channel)
    channel.close()


def _get(stub, name: str) -> dict[str, list[str]]:
    answer = stub.Get(pr.GetPodResourcesRequest(pod_name=name, pod_namespace="default"), timeout=WAIT)
    return {c.name: [i for d in c.devices for i in d.device_ids] for c in answer.pod_resources.containers}


def test_get_answers_a_terminated_pod_until_it_is_deleted(kubelet, pod_resources):
    # server_v1.go Get: "pod, exist := p.podsProvider.GetPodByName(...)" (the pod manager, which keeps a
    # terminated pod until the API server deletes it) and no UpdateAllocatedDevices, unlike List, which
    # uses GetActivePods and calls UpdateAllocatedDevices first.
    vm = PodRef("default", "vm", uid="uid-vm")
    with _plugin(kubelet, DevicePluginService(RES)):
        kubelet.allocate(vm, "compute", RES, 2)
        held = kubelet.device_manager.pod_devices(vm)["compute"][RES]
        kubelet.finish_pod(vm)
        assert sorted(_get(pod_resources, "vm")["compute"]) == sorted(held), "its devices are not freed yet"
        listed = pod_resources.List(pr.ListPodResourcesRequest(), timeout=WAIT)
        assert [p.name for p in listed.pod_resources] == [], "List shows active pods only, and frees"
        assert _get(pod_resources, "vm") == {"compute": []}, "still found, its devices released"
        kubelet.delete_pod(vm)
        with pytest.raises(grpc.RpcError) as err:
            _get(pod_resources, "vm")
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert err.value.details() == "pod vm in namespace default not found"
