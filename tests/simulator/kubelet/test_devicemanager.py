"""The pure kubelet device-manager model against the upstream kubelet's behaviour
(``pkg/kubelet/cm/devicemanager``: manager.go, endpoint.go, plugin/v1beta1)."""

from __future__ import annotations

import random

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
    [
        "devices.kubevirt.io/tdx",
        "tdx.intel.com/keys",
        "example.com/a.b_c-d",
        "a" * 244 + "/x",  # the domain may use 253 - len("requests.") characters
        "example.com/" + "x" * 63,
    ],
)
def test_extended_resource_names_accepted(name):
    assert extended_resource_name_problem(name) is None
    DeviceManager().register(name)


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
        ("a" * 245 + "/x", "at most 244"),
    ],
)
def test_register_rejects_non_extended_names_with_the_kubelets_words(name, why):
    with pytest.raises(RegistrationError) as err:
        DeviceManager().register(name)
    # errInvalidResourceName: `the ResourceName %q is invalid`; teesim adds which rule broke.
    assert str(err.value) == f'the ResourceName "{name}" is invalid'
    assert why in err.value.reason


def test_register_rejects_other_versions_with_the_kubelets_words():
    with pytest.raises(RegistrationError) as err:
        DeviceManager().register(RES, version="v1alpha")
    assert (
        str(err.value)
        == 'requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]'
    )


def test_a_registered_plugin_has_no_capacity_until_its_first_list():
    manager = DeviceManager()
    manager.register(RES)
    assert manager.capacity() == {}
    with pytest.raises(AllocationError, match=f"cannot allocate unregistered device {RES}"):
        manager.allocate(PodRef("d", "a"), "c", RES, 1)


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
    with pytest.raises(AllocationError, match=f"no healthy devices present; cannot allocate unhealthy devices {RES}"):
        dm.allocate(PodRef("default", "vm-b"), "compute", RES, 1, now=100.0)
    assert dm.capacity(now=100.0 + ENDPOINT_STOP_GRACE_PERIOD + 1) == {}
    with pytest.raises(AllocationError, match="cannot allocate unregistered device"):
        dm.allocate(PodRef("default", "vm-c"), "compute", RES, 1, now=100.0 + ENDPOINT_STOP_GRACE_PERIOD + 1)


def test_old_stream_end_disconnects_the_newer_registration(dm):
    """Upstream's runClient looks the client up by resource name when a stream ends: a plugin that
    registered again while its old stream was open loses the new registration too."""
    old = dm.endpoint(RES).generation
    new = dm.register(RES).generation
    assert dm.allocatable() == {RES: 4}, "re-registration keeps the list until a stream sends one"
    assert dm.update_devices(RES, _devices(2), generation=new)
    # The old stream is still connected: its responses still land (keyed by resource name only).
    assert dm.update_devices(RES, _devices(3), generation=old)
    assert dm.allocatable() == {RES: 3}
    assert dm.stream_broken(RES, generation=old, now=50.0)
    assert dm.endpoint(RES).generation == new and dm.endpoint(RES).stopped
    assert dm.allocatable(now=50.0) == {RES: 0}
    assert not dm.update_devices(RES, _devices(4), generation=new), "the new connection was cut"
    assert not dm.stream_broken(RES, generation=new, now=60.0), "nobody left to disconnect"
    assert dm.capacity(now=50.0 + ENDPOINT_STOP_GRACE_PERIOD + 1) == {}, "dropped after the grace period"
    fresh = dm.register(RES).generation
    assert dm.update_devices(RES, _devices(4), generation=fresh)
    assert dm.allocatable(now=50.0 + ENDPOINT_STOP_GRACE_PERIOD + 1) == {RES: 4}


def test_free_devices_come_in_no_particular_order():
    firsts = set()
    for seed in range(20):
        manager = DeviceManager(random.Random(seed))
        manager.register(RES)
        manager.update_devices(RES, _devices(8))
        firsts.add(manager.allocate(PodRef("d", "a"), "c", RES, 1)[0])
    assert len(firsts) > 3, "a plugin must not assume the kubelet hands out tdx-0 first"


def test_allocation_is_per_container_and_sticks(dm):
    pod = PodRef("default", "vm-a")
    first = dm.allocate(pod, "compute", RES, 2)
    assert len(first) == 2
    # The same container asking again gets the same devices (no second Allocate in the kubelet).
    assert dm.allocate(pod, "compute", RES, 2) == first
    side = dm.allocate(pod, "sidecar", RES, 1)
    assert dm.allocated_ids(RES) == set(first) | set(side)
    assert dm.pod_devices(pod) == {"compute": {RES: first}, "sidecar": {RES: side}}
    # devicesToAllocate quotes with Go's %q (manager.go, v1.34): double quotes, not Python's repr.
    with pytest.raises(AllocationError, match=r'pod "default/vm-a" container "compute" changed request .* from 2 to 3'):
        dm.allocate(pod, "compute", RES, 3)


def test_allocation_fails_with_kubelet_wording(dm):
    dm.allocate(PodRef("default", "a"), "c", RES, 3)
    with pytest.raises(
        AllocationError, match=rf"requested number of devices unavailable for {RES}\. Requested: 2, Available: 1"
    ):
        dm.allocate(PodRef("default", "b"), "c", RES, 2)
    with pytest.raises(AllocationError, match=r"cannot allocate unregistered device example\.com/gpu"):
        dm.allocate(PodRef("default", "b"), "c", "example.com/gpu", 1)


def test_unhealthy_devices_are_never_allocated(dm):
    dm.update_devices(RES, _devices(4, unhealthy={0, 1}))
    assert sorted(dm.allocate(PodRef("default", "a"), "c", RES, 2)) == ["tdx-2", "tdx-3"]
    with pytest.raises(AllocationError):
        dm.allocate(PodRef("default", "b"), "c", RES, 1)


def test_readmission_fails_when_held_devices_turned_unhealthy(dm):
    pod = PodRef("default", "vm-a")
    (held,) = dm.allocate(pod, "compute", RES, 1)
    other = next(d for d in dm.healthy_ids(RES) if d != held)
    dm.update_devices(RES, [Device(held, UNHEALTHY), Device(other)])
    with pytest.raises(AllocationError, match="previously allocated devices are no longer healthy"):
        dm.allocate(pod, "compute", RES, 1)
    # A container the runtime still reports running after a kubelet restart is left alone.
    assert dm.devices_to_allocate(pod, "compute", RES, 1, already_running=True) == [held]


def test_preferred_allocation_is_intersected_and_topped_up(dm):
    dm.allocate(PodRef("d", "x"), "c", RES, 1, preferred=["tdx-0"])
    # Preferred: one taken device, one free one, one unknown: only the free one survives ...
    got = dm.allocate(PodRef("d", "a"), "c", RES, 3, preferred=["tdx-0", "tdx-3", "gpu-9"])
    assert got[0] == "tdx-3"
    # ... and the rest is topped up from the available devices.
    assert sorted(got) == ["tdx-1", "tdx-2", "tdx-3"]


def test_finished_pods_are_freed_lazily(dm):
    a = PodRef("default", "a")
    dm.allocate(a, "c", RES, 4)
    dm.finish_pod(a)
    assert dm.allocated_ids(RES) == {f"tdx-{i}" for i in range(4)}, "still held until the next allocation"
    assert a not in dm.active_pods()
    assert dm.active_device_ids(RES) == frozenset(), "pod-resources List frees finished pods first"
    assert sorted(dm.allocate(PodRef("default", "b"), "c", RES, 4)) == [f"tdx-{i}" for i in range(4)]
    assert dm.pod_devices(a) == {}


def test_restart_brings_every_registered_resource_back_at_capacity_zero(dm):
    other = "example.com/idle"
    dm.register(other)
    dm.update_devices(other, [Device("x")])
    pod = PodRef("default", "a")
    (held,) = dm.allocate(pod, "c", RES, 1)
    dm.restart(now=10.0)
    # Not only resources pods hold: every resource in the checkpoint's registered devices.
    assert dm.capacity(now=10.0) == {other: 0, RES: 0}
    assert dm.endpoint(RES).stopped and dm.endpoint(other).stopped
    assert dm.pod_devices(pod) == {"c": {RES: [held]}}
    with pytest.raises(AllocationError, match="no healthy devices present"):
        dm.allocate(PodRef("default", "b"), "c", RES, 1)
    assert dm.capacity(now=10.0 + ENDPOINT_STOP_GRACE_PERIOD + 1) == {}, "unless they re-register in time"
    gen = dm.register(RES).generation
    dm.update_devices(RES, _devices(4), generation=gen)
    assert held not in dm.allocate(PodRef("default", "b"), "c", RES, 3), "checkpointed device stays taken"


def test_old_streams_are_ignored_after_a_restart(dm):
    gen = dm.endpoint(RES).generation
    dm.restart(now=5.0)
    assert not dm.update_devices(RES, _devices(4), generation=gen)
    assert not dm.stream_broken(RES, generation=gen, now=6.0)


def test_allocatable_devices_are_the_healthy_ones_only(dm):
    """GetAllocatableResources filters allDevices by healthyDevices (upstream since 2021)."""
    dm.update_devices(RES, _devices(3, unhealthy={1}))
    assert dm.allocatable_devices(RES) == [Device("tdx-0", HEALTHY), Device("tdx-2", HEALTHY)]


def test_a_list_that_turns_held_devices_unhealthy_is_counted(dm):
    (held,) = dm.allocate(PodRef("d", "a"), "c", RES, 1)
    dm.update_devices(RES, [Device(i, UNHEALTHY if i == held else HEALTHY) for i in dm.healthy_ids(RES)])
    assert dm.allocated_marked_unhealthy == 1


def test_pod_generation_changes_with_every_pod_change(dm):
    seen = [dm.pod_generation]

    def changed() -> bool:
        seen.append(dm.pod_generation)
        return seen[-1] != seen[-2]

    a = PodRef("d", "a")
    dm.allocate(a, "c", RES, 1)
    assert changed()
    dm.add_pod(PodRef("d", "kata"))
    assert changed()
    dm.finish_pod(a)
    assert changed()
    assert dm.release_finished_pods() == ["d/a"]
    assert changed()
    assert dm.release_finished_pods() == []
    assert not changed(), "nothing to release: the pods a List would show are the same"
    dm.restart(now=1.0)
    assert changed()


def test_find_pod_and_natural_key(dm):
    pod = PodRef("ns", "p", uid="1234")
    dm.add_pod(pod)
    assert dm.find_pod("ns", "p") == pod
    assert dm.find_pod("ns", "q") is None
    assert sorted(["tdx-10", "tdx-9", "tdx-100"], key=natural_key) == ["tdx-9", "tdx-10", "tdx-100"]
