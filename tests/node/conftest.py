"""The real node's fixtures: a control plane with the scheduler, and a node of ``make node`` joined to it.

These tests need root (cgroups, mount namespaces, runc), the builds of ``make k8s``, ``make node`` and
``make upstream`` (each built here when missing: minutes the first time), and Debian's runc. They are kept out of
the default pytest run (``norecursedirs`` in pyproject.toml); ``make node-test`` runs them.
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


def wait_until(check, what: str, timeout: float = 120, interval: float = 0.5):
    """``check()``'s first truthy value; fails naming ``what`` and the last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not after {timeout:.0f} s (last: {last!r})")


def kubevirt_plugins() -> Path:
    """KubeVirt v1.9.0's device plugins as ``make upstream`` builds them (built now if missing)."""
    built = subprocess.run(
        [str(REPO_ROOT / "upstream" / "build.sh"), "kubevirt-plugins"], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"upstream/build.sh kubevirt-plugins failed:\n{built.stderr[-4000:]}")
    return Path(built.stdout.strip().rpartition("=")[2]) / "kubevirt-plugins"


def host_state() -> dict[str, set[str]]:
    """What a node run could leave on this machine: mounts, network links, cgroups at the hierarchies' tops."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    cgroups = {str(p) for h in Path("/sys/fs/cgroup").iterdir() if h.is_dir() for p in h.iterdir() if p.is_dir()}
    return {
        "mounts": {" ".join(line.split()[3:5]) for line in Path("/proc/self/mountinfo").read_text().splitlines()},
        "links": {line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if ":" in line},
        "cgroups": cgroups,
        "ip_forward": {Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()},
    }


@pytest.fixture
def node_factory(plane: ControlPlane) -> Iterator:
    """Start RealNodes on ``plane``; each is stopped after the test, and must have left nothing behind."""
    started: list[RealNode] = []
    before = host_state()

    def start(**kwargs) -> RealNode:
        node = RealNode(plane, **kwargs)
        started.append(node)
        return node.start()

    yield start
    leftovers = [entry for node in started for entry in node.stop()]
    for node in started:
        plane.kubectl("delete", "node", node.name, "--ignore-not-found", "--wait=false", check=False)
    assert leftovers == []
    after = host_state()
    assert {key: after[key] - before[key] for key in after} == {key: set() for key in after}
    for node in started:
        assert not node.workdir.exists()
        assert [command for command in command_lines() if node.workdir.name in command] == []


def command_lines() -> list[str]:
    """Every process's command line (those that end while being read are skipped)."""
    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines
