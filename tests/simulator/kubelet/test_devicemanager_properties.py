"""Invariants of the device-manager model under arbitrary sequences of kubelet events."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from teesim.kubelet.devicemanager import HEALTHY, UNHEALTHY, AllocationError, Device, DeviceManager, PodRef

RES = "devices.kubevirt.io/tdx"
IDS = [f"tdx-{i}" for i in range(6)]

events = st.one_of(
    st.tuples(st.just("list"), st.lists(st.tuples(st.sampled_from(IDS), st.booleans()), max_size=6)),
    st.tuples(st.just("allocate"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("finish"), st.integers(0, 5)),
    st.tuples(st.just("break"), st.none()),
    st.tuples(st.just("register"), st.none()),
    st.tuples(st.just("restart"), st.none()),
    st.tuples(st.just("add"), st.integers(0, 5)),
    st.tuples(st.just("release"), st.none()),
)


def _pod_view(dm: DeviceManager) -> tuple:
    """Everything pod-resources List would answer, plus the checkpointed devices."""
    return (
        tuple(p.key for p in dm.active_pods()),
        tuple(sorted(dm.active_device_ids(RES))),
        tuple(sorted(dm.allocated_ids(RES))),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=30))
# A finished pod still holding its device: List must not report it (random sequences rarely get here).
@example([("list", [("tdx-0", True)]), ("allocate", 0, 1), ("finish", 0)])
def test_books_balance(sequence):
    dm = DeviceManager()
    dm.register(RES)
    finished: set[str] = set()
    # What an in-process reader caches on pod_generation (issue 7): it must never go stale.
    cache = (dm.pod_generation, _pod_view(dm))
    listed_both_ways: set[str] = set()
    for event in sequence:
        kind = event[0]
        if kind == "list":
            listed_both_ways = {i for i, ok in event[1] if (i, not ok) in event[1]}
            dm.update_devices(RES, [Device(i, HEALTHY if ok else UNHEALTHY) for i, ok in event[1]])
        elif kind == "allocate":
            pod = PodRef("default", f"p{event[1]}")
            try:
                got = dm.allocate(pod, "c", RES, event[2])
            except AllocationError:
                got = None
            if got is not None:
                assert len(got) == event[2]
                finished.discard(pod.key)
        elif kind == "finish":
            dm.finish_pod(f"default/p{event[1]}")
            finished.add(f"default/p{event[1]}")
        elif kind == "break":
            dm.stream_broken(RES)
        elif kind == "register":
            dm.register(RES)
        elif kind == "add":
            dm.add_pod(PodRef("default", f"p{event[1]}"))
            finished.discard(f"default/p{event[1]}")
        elif kind == "release":
            dm.release_finished_pods()
        else:
            dm.restart()

        if cache[0] == dm.pod_generation:
            assert cache[1] == _pod_view(dm), f"pod state changed after {event} without a new pod_generation"
        cache = (dm.pod_generation, _pod_view(dm))

        healthy, unhealthy = set(dm.healthy_ids(RES)), set(dm.unhealthy_ids(RES))
        # Only an ID the last list named both Healthy and not is in both sets (genericDeviceUpdateCallback).
        assert healthy & unhealthy <= listed_both_ways, event
        # allocated_ids is kept up to date with the checkpoint, not recounted: it must equal a recount.
        recount = {d for key in list(dm._pod_devices) for c in dm._pod_devices[key].values() for d in c.get(RES, ())}
        assert dm.allocated_ids(RES) == recount, event
        # The free list kept between allocations is what sorting the free devices afresh gives.
        if RES in dm.resources():
            assert dm.free_sorted(RES) == sorted(healthy - dm.allocated_ids(RES)), event
        if RES in dm.capacity():
            assert dm.capacity()[RES] == len(healthy) + len(unhealthy)
            assert dm.allocatable()[RES] == len(healthy)
        # No device is held by two containers of pods that are still running.
        held = [d for pod in dm.active_pods() for per_res in dm.pod_devices(pod).values() for d in per_res.get(RES, [])]
        assert len(held) == len(set(held))
        # active_device_ids is derived from the holder counts minus finished pods: it must equal
        # the devices of the active pods, recounted.
        assert dm.active_device_ids(RES) == set(held), event
        assert {p.key for p in dm.active_pods()}.isdisjoint(finished)
        if dm.endpoint(RES) is not None and dm.endpoint(RES).stopped:
            assert dm.allocatable().get(RES, 0) == 0
