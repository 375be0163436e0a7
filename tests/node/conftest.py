"""The real node's fixtures: a control plane with the scheduler, and a node of ``make node`` joined to it.

These tests need root (cgroups, mount namespaces, runc), the builds of ``make k8s``, ``make node`` and
``make upstream`` (each built here when missing: minutes the first time), and Debian's runc. They are kept out of
the default pytest run (``norecursedirs`` in pyproject.toml); ``make node-test`` runs them, and ``make test`` runs
that target.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kube_control_plane import ControlPlane
from kube_node import RUNC, RealNode

REPO_ROOT = Path(__file__).resolve().parents[2]
collect_ignore: list[str] = []


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "the real node needs root (cgroups, mount namespaces, runc)"
    for tool in ("go", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"the real node needs {tool} on PATH"
    if not os.access(RUNC, os.X_OK):
        return f"the real node needs Debian's runc at {RUNC} (make sysdeps)"
    return None


@pytest.fixture(scope="session")
def plane() -> Iterator[ControlPlane]:
    why = _missing()
    if why:
        pytest.skip(why)
    with ControlPlane(scheduler=True) as started:
        yield started


def apply(plane: ControlPlane, *objects: dict) -> None:
    plane.kubectl(
        "apply", "--server-side", "--field-manager=tee-node-test", "-f", "-", input=yaml.safe_dump_all(objects)
    )


def get(plane: ControlPlane, *args: str) -> dict:
    return json.loads(plane.kubectl("get", *args, "-o", "json").stdout)


def wait_until(check, what: str, timeout: float = 120, interval: float = 0.5, describe=None):
    """``check()``'s first truthy value; fails naming ``what`` and the last value (or ``describe()``) after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not after {timeout:.0f} s (last: {describe() if describe else last!r})")


def delete_every_pod(plane: ControlPlane, namespace: str) -> None:
    """Delete the namespace's pods and wait until they are gone (their kubelet stops the guests first; minutes on
    a loaded machine)."""
    plane.kubectl("delete", "pod", "-n", namespace, "--all", "--wait=false")
    wait_until(lambda: not get(plane, "pods", "-n", namespace)["items"], f"every pod of {namespace} gone", timeout=300)


def leftovers_of(node: RealNode) -> list[str]:
    """What a stopped node left on this machine: mounts, cgroups, processes, routes or addresses in its pod subnet,
    the host's ip_forward changed (other work on the machine may mount, make cgroups and links meanwhile: only
    what names this node counts)."""
    found = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if node.id in line]
    found += [str(c) for c in node.cgroups if c.exists()]
    found += [command for command in command_lines() if node.id in command]
    prefix = node.pod_subnet.rsplit(".", 1)[0] + "."
    for args in (["route"], ["-o", "addr"]):
        shown = subprocess.run(["ip", *args], capture_output=True, text=True, check=False).stdout
        found += [line for line in shown.splitlines() if prefix in line]
    if node.ip_forward is not None and Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != node.ip_forward:
        found.append("net.ipv4.ip_forward not restored")
    if node.workdir.exists():
        found.append(str(node.workdir))
    return found


@pytest.fixture
def node_factory(plane: ControlPlane) -> Iterator:
    """Start RealNodes on ``plane``; each is stopped after the test, and must have left nothing behind."""
    started: list[RealNode] = []

    def start(**kwargs) -> RealNode:
        node = RealNode(plane, **kwargs)
        started.append(node)
        return node.start()

    yield start
    failed_stops = [entry for node in started for entry in node.stop()]
    assert failed_stops == []
    assert {node.name: leftovers_of(node) for node in started} == {node.name: [] for node in started}


def command_lines() -> list[str]:
    """Every process's command line (those that end while being read are skipped)."""
    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines
