"""NFD advertises capacity (never usage); SimNode reads render the kernel's text and honour faults."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from teesim.cluster.nfd import discover
from teesim.cluster.node import BoundPods, SimNode
from teesim.cluster.pods import Consumer, Guest, kata_pod, vmi_pod
from teesim.kernel.misc import ChargeError
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import OLD


def test_nfd_advertises_capacity_not_usage_and_honours_reservation() -> None:
    node = SimNode(NodeSpec("n", vendor="intel", capacity={"tdx": 15}))
    node.charge(Consumer.EXTERNAL, "machine.slice/vm", "tdx")
    assert discover(node.read) == {"tdx.intel.com/keys": 15}
    assert discover(node.read, {"tdx": 4}) == {"tdx.intel.com/keys": 11}
    amd = SimNode(NodeSpec("a", vendor="amd"))
    assert discover(amd.read) == {"sev-snp.amd.com/esids": 99}
    node.unreadable.add("sys/fs/cgroup/misc.capacity")
    assert discover(node.read) == {}


@pytest.mark.parametrize("kvm_tdx", ["N", "absent"])
def test_nfd_publishes_no_tdx_keys_where_kvm_tdx_is_off(kvm_tdx) -> None:
    # NFD v0.19.0 fills tdx.total_keys only under tdx.enabled (kvm_intel tdx = "Y"), and Kata's rule matches on
    # it: a tdx misc line alone publishes nothing (found by scripts/upstream_nfd.py, profile tdx-kvm-off).
    node = SimNode(NodeSpec("n", vendor="intel", capacity={"tdx": 15}, kvm_tdx=kvm_tdx))
    assert "tdx 15" in node.read("sys/fs/cgroup/misc.capacity")
    assert discover(node.read) == {}


def test_nfd_publishes_no_snp_esids_where_kvm_amd_sev_snp_or_sev_es_is_off() -> None:
    node = SimNode(NodeSpec("a", vendor="amd"))
    files = {"sys/module/kvm_amd/parameters/sev_snp": "N\n"}
    assert discover(lambda rel: files[rel] if rel in files else node.read(rel)) == {}
    files = {"sys/module/kvm_amd/parameters/sev_es": "0\n"}
    assert discover(lambda rel: files[rel] if rel in files else node.read(rel)) == {}
    files = {"sys/module/kvm_amd/parameters/sev_snp": "1\n"}  # NFD takes a first byte of 1 or Y
    assert discover(lambda rel: files[rel] if rel in files else node.read(rel)) == {"sev-snp.amd.com/esids": 99}


def test_reads_render_kernel_text_and_faults_raise() -> None:
    node = SimNode(NodeSpec("n", profile=OLD, vendor="intel", capacity={"tdx": 3}))
    node.charge(Consumer.KATA, "kubepods.slice/pod-x", "tdx")
    assert node.read("sys/fs/cgroup/misc.capacity") == "tdx 3\n"
    assert node.read("sys/fs/cgroup/kubepods.slice/misc.current") == "tdx 1\n"
    assert node.read("proc/sys/kernel/osrelease") == "6.1.0-teesim\n"
    assert node.top_level_cgroups() == ["kubepods.slice"]
    with pytest.raises(FileNotFoundError):
        node.read("sys/fs/cgroup/misc.current")  # old kernel: no root misc.current
    node.unreadable.add("sys/fs/cgroup/misc.capacity")
    with pytest.raises(OSError) as caught:
        node.read("sys/fs/cgroup/misc.capacity")
    assert caught.value.errno == errno.EISDIR


def test_charge_failure_cleans_up_and_bookkeeping_matches_recount() -> None:
    node = SimNode(NodeSpec("n", vendor="intel", capacity={"tdx": 1}))
    node.charge(Consumer.EXTERNAL, "machine.slice", "tdx")
    with pytest.raises(ChargeError):
        node.charge(Consumer.KATA, "kubepods.slice/pod-y", "tdx")
    assert not node.kernel.misc.has_cgroup("kubepods.slice/pod-y")
    pod = vmi_pod("v", Guest.TDX, {"devices.kubevirt.io/tdx": 1}, 0.0, 1.0, 1.0)
    pod.phase = pod.phase.BOUND
    node.bound.bind(pod, pod.need())
    assert node.requested() == node.requested_recount() == {"cpu": 200, "memory": 4346, "devices.kubevirt.io/tdx": 1}
    assert node.claims["tdx"] == 1
    node.bound.release(pod, was_running=False)
    assert node.requested() == {} and node.claims["tdx"] == 0


KEYS = "tdx.intel.com/keys"
pod_changes = st.lists(st.tuples(st.sampled_from(["bind", "start", "release"]), st.integers(0, 5)), max_size=40)


@settings(max_examples=100, deadline=None)
@given(pod_changes)
def test_bound_pods_own_their_generation(changes) -> None:
    """Issue 7: what readers cache on ``generation`` (the informer's view) never goes stale, because
    every pod change goes through the store, which bumps it. Fails if any change forgets the bump."""
    store = BoundPods()
    pods = {i: kata_pod(f"k{i}", Guest.TDX, 0.0, 1.0, 1.0) for i in range(6)}
    seen = (store.generation, store.overhead_of(KEYS), dict(store.claims), store.requested())
    for kind, index in changes:
        pod = pods[index]
        if kind == "bind" and pod.uid not in store:
            store.bind(pod, pod.need())
        elif kind == "start" and pod.uid in store and pod.started_at is None:
            pod.started_at = 1.0
            store.started(pod)
        elif kind == "release":
            store.release(pod, was_running=pod.started_at is not None)
            pod.started_at = None
        now = (store.generation, store.overhead_of(KEYS), dict(store.claims), store.requested())
        if now[0] == seen[0]:
            assert now[1:] == seen[1:], f"{kind} {index} changed the pods without a new generation"
        assert store.overhead_of(KEYS) == sum(p.overhead.get(KEYS, 0) for p in pods.values() if p.uid in store)
        seen = now


def test_observed_revision_moves_with_what_a_snapshot_reads_and_only_then() -> None:
    """The report skips a changed node whose observed revision did not move: every input of a snapshot
    must move it, a pod's start reaching the informers must not, and a grace period disables it."""
    from teesim.kubelet.devicemanager import ENDPOINT_STOP_GRACE_PERIOD

    node = SimNode(NodeSpec("n", vendor="intel", capacity={"tdx": 4}))
    revisions = [node.observed_revision(0.0)]
    node.charge(Consumer.EXTERNAL, "machine.slice/vm", "tdx")
    revisions.append(node.observed_revision(0.0))
    pod = vmi_pod("v", Guest.TDX, {"devices.kubevirt.io/tdx": 1}, 0.0, 1.0, 1.0)
    node.bound.bind(pod, pod.need())
    revisions.append(node.observed_revision(0.0))
    node.devices.register("devices.kubevirt.io/tdx")
    revisions.append(node.observed_revision(0.0))
    node.nfd = {"tdx.intel.com/keys": 4}
    revisions.append(node.observed_revision(0.0))
    assert None not in revisions and len(set(revisions)) == len(revisions)
    pod.started_at = 1.0
    node.bound.started(pod)
    started = node.observed_revision(1.0)
    assert started != revisions[-1], "a start turns a claim into usage"
    node.bound.observe_started(pod)
    assert node.observed_revision(2.0) == started, "what informers show is in no snapshot"
    assert node.bound.seen_started_uids() == {pod.uid} and node.bound.seen_started(pod.uid)
    node.devices.stream_broken("devices.kubevirt.io/tdx", now=3.0)
    assert node.observed_revision(3.0) is None, "allocatable depends on the time inside the grace period"
    assert node.observed_revision(3.0 + ENDPOINT_STOP_GRACE_PERIOD + 1) is not None
