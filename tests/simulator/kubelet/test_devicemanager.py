"""The pure kubelet device-manager model against the real kubelet's documented behaviour."""

from __future__ import annotations

import pytest
from teesim.kubelet.devicemanager import (
    ENDPOINT_STOP_GRACE_PERIOD,
    HEALTHY,
    UNHEALTHY,
    AllocationError,
    Device,
    DeviceManager,
    PodRef,
    RegistrationError,
    extended_resource_name_problem,
    natural_key,
)

RES = "devices.kubevirt.io/tdx"


def _devices(n: int, unhealthy: set[int] = frozenset()) -> list[Device]:
    return [Device(f"tdx-{i}", UNHEALTHY if i in unhealthy else HEALTHY) for i in range(n)]


@pytest.fixture
def dm() -> DeviceManager:
    manager = DeviceManager()
    manager.register(RES)
    manager.update_devices(RES, _devices(4))
    return manager


@pytest.mark.parametrize(
    "name",
    ["devices.kubevirt.io/tdx", "tdx.intel.com/keys", "example.com/a.b_c-d"],
)
def test_extended_resource_names_accepted(name):
    assert extended_resource_name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("tdx", "no domain prefix"),
        ("kubernetes.io/tdx", "kubernetes.io"),
        ("foo.kubernetes.io/tdx", "kubernetes.io"),
        ("requests.example.com/x", "requests."),
        ("Example.com/x", "DNS-1123"),
        ("example.com/", "qualified name"),
        ("example.com/-x", "qualified name"),
        ("example.com/" + "x" * 64, "qualified name"),
        ("a/b/c", "more than one"),
    ],
)
def test_register_rejects_non_extended_names(name, why):
    with pytest.raises(RegistrationError, match="invalid resource name") as err:
        DeviceManager().register(name)
    assert why in str(err.value)


def test_register_rejects_other_versions():
    with pytest.raises(RegistrationError, match="invalid version of api: 'v1alpha'"):
        DeviceManager().register(RES, version="v1alpha")


def test_list_and_watch_replaces_device_list(dm):
    assert dm.capacity() == {RES: 4}
    dm.update_devices(RES, _devices(3, unhealthy={2}))
    assert dm.capacity() == {RES: 3}
    assert dm.allocatable() == {RES: 2}
    assert dm.unhealthy_ids(RES) == ["tdx-2"]
    # Any health string other than "Healthy" is unhealthy, like the kubelet.
    dm.update_devices(RES, [("tdx-0", "healthy"), ("tdx-1", HEALTHY)])
    assert dm.healthy_ids(RES) == ["tdx-1"]
    assert dm.capacity() == {RES: 2}


def test_stream_break_marks_everything_unhealthy_then_resource_expires(dm):
    dm.allocate(PodRef("default", "vm-a"), "compute", RES, 1)
    assert dm.stream_broken(RES, now=100.0)
    assert dm.capacity(now=100.0) == {RES: 4}
    assert dm.allocatable(now=100.0) == {RES: 0}
    with pytest.raises(AllocationError, match="stopped"):
        dm.allocate(PodRef("default", "vm-b"), "compute", RES, 1)
    assert dm.capacity(now=100.0 + ENDPOINT_STOP_GRACE_PERIOD + 1) == {}


def test_stale_stream_cannot_touch_a_newer_registration(dm):
    old = dm.endpoint(RES).generation
    new = dm.register(RES).generation
    assert new != old
    assert not dm.stream_broken(RES, generation=old)
    assert not dm.update_devices(RES, _devices(1), generation=old)
    assert dm.allocatable() == {RES: 4}, "re-registration keeps the list until the new stream sends one"
    assert dm.update_devices(RES, _devices(2), generation=new)
    assert dm.allocatable() == {RES: 2}


def test_allocation_is_per_container_in_natural_order(dm):
    dm.update_devices(RES, [Device(f"tdx-{i}") for i in (10, 2, 1)])
    pod = PodRef("default", "vm-a")
    assert dm.allocate(pod, "compute", RES, 2) == ["tdx-1", "tdx-2"]
    # The same container asking again gets the same devices (no second Allocate in the kubelet).
    assert dm.allocate(pod, "compute", RES, 2) == ["tdx-1", "tdx-2"]
    assert dm.allocate(pod, "sidecar", RES, 1) == ["tdx-10"]
    assert dm.allocated_ids(RES) == {"tdx-1", "tdx-2", "tdx-10"}
    assert dm.pod_devices(pod) == {"compute": {RES: ["tdx-1", "tdx-2"]}, "sidecar": {RES: ["tdx-10"]}}


def test_allocation_fails_with_kubelet_wording(dm):
    dm.allocate(PodRef("default", "a"), "c", RES, 3)
    with pytest.raises(AllocationError, match=r"Requested: 2, Available: 1"):
        dm.allocate(PodRef("default", "b"), "c", RES, 2)
    with pytest.raises(AllocationError, match=r"cannot allocate unregistered device example\.com/gpu"):
        dm.allocate(PodRef("default", "b"), "c", "example.com/gpu", 1)


def test_unhealthy_devices_are_never_allocated(dm):
    dm.update_devices(RES, _devices(4, unhealthy={0, 1}))
    assert dm.allocate(PodRef("default", "a"), "c", RES, 2) == ["tdx-2", "tdx-3"]
    with pytest.raises(AllocationError):
        dm.allocate(PodRef("default", "b"), "c", RES, 1)


def test_preferred_allocation_used_only_when_valid(dm):
    assert dm.allocate(PodRef("d", "a"), "c", RES, 1, preferred=["tdx-3"]) == ["tdx-3"]
    # An unavailable or wrongly sized preference falls back to the kubelet's own choice.
    assert dm.allocate(PodRef("d", "b"), "c", RES, 1, preferred=["tdx-3"]) == ["tdx-0"]
    assert dm.allocate(PodRef("d", "e"), "c", RES, 1, preferred=["tdx-1", "tdx-2"]) == ["tdx-1"]


def test_finished_pods_are_freed_lazily(dm):
    a = PodRef("default", "a")
    dm.allocate(a, "c", RES, 4)
    dm.finish_pod(a)
    assert dm.allocated_ids(RES) == {f"tdx-{i}" for i in range(4)}, "still held until the next allocation"
    assert a not in dm.active_pods()
    assert dm.allocate(PodRef("default", "b"), "c", RES, 4) == [f"tdx-{i}" for i in range(4)]
    assert dm.pod_devices(a) == {}


def test_restart_keeps_assignments_and_drops_endpoints(dm):
    pod = PodRef("default", "a")
    dm.allocate(pod, "c", RES, 1)
    dm.restart(now=10.0)
    assert dm.capacity(now=10.0) == {RES: 0}
    assert dm.endpoint(RES).stopped
    assert dm.pod_devices(pod) == {"c": {RES: ["tdx-0"]}}
    with pytest.raises(AllocationError):
        dm.allocate(PodRef("default", "b"), "c", RES, 1)
    gen = dm.register(RES).generation
    dm.update_devices(RES, _devices(4), generation=gen)
    assert dm.allocate(PodRef("default", "b"), "c", RES, 1) == ["tdx-1"], "checkpointed tdx-0 stays taken"


def test_all_devices_reports_unhealthy_too(dm):
    dm.update_devices(RES, _devices(2, unhealthy={1}))
    assert dm.all_devices(RES) == [Device("tdx-0", HEALTHY), Device("tdx-1", UNHEALTHY)]


def test_find_pod_and_natural_key(dm):
    pod = PodRef("ns", "p", uid="1234")
    dm.add_pod(pod)
    assert dm.find_pod("ns", "p") == pod
    assert dm.find_pod("ns", "q") is None
    assert sorted(["tdx-10", "tdx-9", "tdx-100"], key=natural_key) == ["tdx-9", "tdx-10", "tdx-100"]
