"""``python -m teesim.plugins.static`` as a real process against the real-socket kubelet."""

from __future__ import annotations

import pytest
from teesim.grpc_run import GrpcNode, healthy_count, unhealthy_count

RES = "devices.kubevirt.io/tdx"
WAIT = 60.0  # a bound, not a timing: wait_for returns as soon as the condition holds, and a busy CI machine can be slow
POLL = 0.05

pytestmark = pytest.mark.slow


def test_static_plugin_never_sees_external_vms(node, start_plugin):
    start_plugin(node, "static")
    assert healthy_count(node.kubelet, RES) == 8
    for _ in range(3):
        node.start_guest()
    # Give the static plugin ample time to (not) react: it has no poll loop at all.
    assert not node.kubelet.wait_for(lambda k: unhealthy_count(k, RES) > 0, 0.5)
    assert node.kubelet.device_manager.allocatable() == {RES: 8}, "the flaw kubevirt-static has"


def test_static_plugin_refuses_a_host_without_misc(processes):
    with GrpcNode.create(capacity=8, profile="no-misc") as node:
        proc = node.plugin("static")
        processes.append(proc)
        assert proc.process.wait(timeout=WAIT) == 2
        assert "misc cgroup controller is not available" in proc.stop()
