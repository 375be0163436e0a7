"""``teesim node kernel``: real processes launch guests over a unix socket, charged through the kernel model."""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from teesim.kernel.node import Node, NodeSpec
from teesim.kernel.service import KernelService, cgroup_of

HYBRID = (
    "12:pids:/tee-node-x/kubepods/besteffort/pod1/c1\n"
    "8:memory:/tee-node-x/kubepods/besteffort/pod1/c1\n"
    "1:name=systemd:/\n"
    "0::/\n"
)


def test_cgroup_of_v1_hybrid_takes_memory_and_strips_the_prefix() -> None:
    assert cgroup_of(HYBRID, "/tee-node-x") == "kubepods/besteffort/pod1/c1"
    assert cgroup_of(HYBRID) == "tee-node-x/kubepods/besteffort/pod1/c1"


def test_cgroup_of_v2_takes_the_unified_line() -> None:
    text = "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-c1.scope\n"
    assert cgroup_of(text, "/elsewhere") == "kubepods.slice/kubepods-pod1.slice/cri-containerd-c1.scope"


def test_cgroup_of_without_a_usable_line_is_esrch() -> None:
    with pytest.raises(OSError) as caught:
        cgroup_of("3:cpu:/x\n0::/\n")
    assert caught.value.errno == errno.ESRCH


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[KernelService, Path, Path]]:
    node = Node(NodeSpec(vendor="intel", capacity={"tdx": 2}))
    service = KernelService(node, tmp_path / "root")
    sock = tmp_path / "kernel.sock"
    ready = threading.Event()
    thread = threading.Thread(target=service.serve, args=(sock,), kwargs={"ready": ready.set}, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield service, tmp_path / "root" / "sys/fs/cgroup", sock
    service.stop()
    thread.join(10)
    assert not thread.is_alive() and not sock.exists()


def launch(sock: Path, request: str) -> tuple[socket.socket, str]:
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(str(sock))
    conn.sendall(request.encode() + b"\n")
    return conn, conn.makefile().readline().strip()


def wait_for(check, what: str) -> None:
    for _ in range(500):
        if check():
            return
        threading.Event().wait(0.01)
    raise AssertionError(what)


def test_launches_charge_the_callers_cgroup_hold_and_release(served: tuple[KernelService, Path, Path]) -> None:
    service, tree, sock = served
    mine = cgroup_of(Path(f"/proc/{os.getpid()}/cgroup").read_text())
    first, answer = launch(sock, "launch tdx 1")
    assert answer == f"ok /{mine}"
    second, answer = launch(sock, "launch tdx 1")
    assert answer.startswith("ok ")
    assert (tree / "misc.current").read_text() == "tdx 2\n"
    assert (tree / mine / "misc.current").read_text() == "tdx 2\n"
    # Every KeyID in use: KVM_TDX_INIT_VM fails with ENOSPC before any charge, so no misc.events.
    third, answer = launch(sock, "launch tdx 1")
    assert answer.startswith("error ENOSPC tdx: cannot charge 1")
    assert third.recv(1) == b""  # a refused launch holds nothing: the service closes its end
    assert (tree / mine / "misc.events").read_text() == "tdx.max 0\n"
    first.close()  # the guest exits: its key is released
    wait_for(lambda: (tree / "misc.current").read_text() == "tdx 1\n", "the first guest's key was not released")
    second.close()
    wait_for(lambda: (tree / "misc.current").read_text() == "tdx 0\n", "the second guest's key was not released")
    # The cgroup the service made for the guest goes with it (its files are removed after misc.current is written).
    wait_for(lambda: not (tree / mine).exists(), "the guest's cgroup was not removed")
    assert (tree / "misc.peak").read_text() == "tdx 2\n"
    assert service.launches == {}


def test_a_cgroup_limit_is_ebusy_and_counted(served: tuple[KernelService, Path, Path]) -> None:
    service, _tree, sock = served
    mine = cgroup_of(Path(f"/proc/{os.getpid()}/cgroup").read_text())
    assert service.misc is not None
    service.misc.ensure_cgroup(mine)
    service.misc.set_max(mine, "tdx", 0)
    conn, answer = launch(sock, "launch tdx 1")
    assert answer == f"error EBUSY tdx: cannot charge 1 to /{mine}: misc.max reached at /{mine}"
    conn.close()
    assert service.misc.events("tdx", mine, local=True) == 1


@pytest.mark.parametrize(
    ("request_line", "expected"),
    [
        ("launch tdx", "error EINVAL bad request"),
        ("charge tdx 1", "error EINVAL bad request"),
        ("launch tdx x", "error EINVAL bad request"),
        ("launch sev 1", "error EINVAL sev: cannot charge 1"),  # an Intel host: no sev capacity
        ("launch nonsense 1", "error EINVAL unknown misc resource"),
    ],
)
def test_bad_requests_are_refused_with_einval(
    served: tuple[KernelService, Path, Path], request_line: str, expected: str
) -> None:
    _, _, sock = served
    conn, answer = launch(sock, request_line)
    conn.close()
    assert answer.startswith(expected), answer
