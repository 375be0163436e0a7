"""Plugin processes against a real-socket kubelet on a real node directory (short /tmp root)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from teesim.grpc_run import GrpcNode, PluginProcess

RES = "devices.kubevirt.io/tdx"
WAIT = 60.0  # a bound, not a timing: wait_for returns as soon as the condition holds, and a busy CI machine can be slow
POLL = 0.05


@pytest.fixture
def node() -> Iterator[GrpcNode]:
    with GrpcNode.create(capacity=8) as n:
        yield n


@pytest.fixture
def processes() -> Iterator[list[PluginProcess]]:
    """Every plugin process a test starts; all are stopped (SIGTERM, then SIGKILL) afterwards."""
    started: list[PluginProcess] = []
    yield started
    for proc in started:
        proc.stop()


@pytest.fixture
def start_plugin(processes: list[PluginProcess]) -> Callable[..., PluginProcess]:
    """Start a plugin on a node and wait until the kubelet lists its 8 devices."""

    def start(node: GrpcNode, kind: str, **kwargs) -> PluginProcess:
        proc = node.plugin(kind, poll_interval=POLL, **kwargs)
        processes.append(proc)
        ok = node.kubelet.wait_for(lambda k: k.device_manager.capacity().get(RES, 0) == 8, WAIT)
        assert ok, f"{kind} plugin did not register:\n{proc.stop()}"
        return proc

    return start
