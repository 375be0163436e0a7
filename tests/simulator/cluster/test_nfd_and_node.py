"""NFD advertises capacity (never usage); SimNode reads render the kernel's text and honour faults."""

from __future__ import annotations

import errno

import pytest
from teesim.cluster.nfd import discover
from teesim.cluster.node import SimNode
from teesim.cluster.pods import Consumer, vmi_pod
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
    pod = vmi_pod("v", "tdx", "devices.kubevirt.io/tdx", 0.0, 1.0, 1.0)
    pod.phase = pod.phase.BOUND
    node.bind(pod)
    assert node.requested() == node.requested_recount() == {"devices.kubevirt.io/tdx": 1}
    assert node.claims["tdx"] == 1
    node.release(pod, was_running=False)
    assert node.requested() == {} and node.claims["tdx"] == 0
