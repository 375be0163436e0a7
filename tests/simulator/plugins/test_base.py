"""What every teesim plugin shares: the DevicePlugin service and registration with the kubelet."""

from __future__ import annotations

import grpc
import pytest
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, Device
from teesim.kubelet.generated.deviceplugin.v1beta1 import api_pb2 as dp
from teesim.plugins.base import DevicePluginService, PluginServer

RES = "devices.kubevirt.io/tdx"
WAIT = 60.0  # a bound, not a timing: wait_for returns as soon as the condition holds, and a busy CI machine can be slow


class _Aborted(Exception):
    pass


class _Context:
    """The two ServicerContext methods the unary handlers use."""

    def abort(self, code, details):
        raise _Aborted(code, details)

    def is_active(self):
        return True


def test_set_devices_publishes_only_changes():
    service = DevicePluginService(RES)
    assert service.set_devices([Device("tdx-0")])
    assert not service.set_devices([Device("tdx-0")])
    assert service.set_devices([Device("tdx-0", UNHEALTHY)])
    assert service.devices == (Device("tdx-0", UNHEALTHY),)


def test_allocate_answers_per_container_and_refuses_unknown_ids():
    service = DevicePluginService(RES)
    service.set_devices([Device(f"tdx-{i}", HEALTHY) for i in range(3)])
    request = dp.AllocateRequest(
        container_requests=[
            dp.ContainerAllocateRequest(devices_ids=["tdx-0"]),
            dp.ContainerAllocateRequest(devices_ids=["tdx-1", "tdx-2"]),
        ]
    )
    response = service.Allocate(request, _Context())
    assert [dict(r.envs) for r in response.container_responses] == [
        {"TEESIM_TDX_DEVICES": "tdx-0"},
        {"TEESIM_TDX_DEVICES": "tdx-1,tdx-2"},
    ]
    bad = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=["gpu-0"])])
    with pytest.raises(_Aborted) as err:
        service.Allocate(bad, _Context())
    assert err.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device IDs ['gpu-0']" in err.value.args[1]


def test_preferred_allocation_keeps_must_include_and_size():
    service = DevicePluginService(RES)
    request = dp.PreferredAllocationRequest(
        container_requests=[
            dp.ContainerPreferredAllocationRequest(
                available_deviceIDs=["a", "b", "c"], must_include_deviceIDs=["c"], allocation_size=2
            )
        ]
    )
    response = service.GetPreferredAllocation(request, _Context())
    assert list(response.container_responses[0].deviceIDs) == ["c", "a"]


def test_socket_name_must_be_a_file_name(tmp_path):
    with pytest.raises(ValueError, match="must be a plain file name"):
        PluginServer(DevicePluginService(RES), tmp_path, "../escape.sock")


@pytest.mark.slow
def test_plugin_exits_when_the_kubelet_rejects_it(node, processes):
    proc = node.plugin("reconciling", resource_name="kubernetes.io/tdx")
    processes.append(proc)
    assert proc.process.wait(timeout=WAIT) == 2
    assert 'rejected kubernetes.io/tdx: the ResourceName "kubernetes.io/tdx" is invalid' in proc.stop()
    assert node.kubelet.device_manager.resources() == []
