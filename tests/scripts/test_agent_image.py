"""make image (scripts/agent_image.py): the key agent's image builds with podman from the Containerfile, without a
registry, and runs the agent as a non-root user: --version, --help, and one dry-run decision over a simulated node's
host tree mounted read-only where the DaemonSet mounts the host's cgroups."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _podman_env() -> dict:
    conf = subprocess.run([str(REPO / "scripts" / "podman-conf.sh")], capture_output=True, text=True, check=True)
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF") or conf.stdout.strip()}


@pytest.fixture(scope="module")
def image() -> str:
    """The image make image builds (cached: seconds when the agent's files did not change)."""
    if shutil.which("podman") is None or shutil.which("debootstrap") is None:
        pytest.skip("podman or debootstrap is missing: run scripts/sysdeps.sh (make sysdeps)")
    if os.geteuid() != 0:
        pytest.skip("the Debian base is debootstrapped, which needs root")
    built = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "agent_image.py")],
        env=_podman_env(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


def _run(image: str, *args: str, entrypoint: str | None = None, volumes=()) -> subprocess.CompletedProcess:
    command = ["podman", "run", "--rm", "--network=none", "--read-only"]
    command += [f"--volume={v}" for v in volumes]
    command += [f"--entrypoint={entrypoint}"] if entrypoint else []
    return subprocess.run(
        [*command, image, *args], env=_podman_env(), capture_output=True, text=True, timeout=300, check=False
    )


def test_the_image_says_its_version_and_help_as_a_non_root_user(image):
    version = _run(image, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"tee-key-agent {image.rsplit(':', 1)[1]}"
    helped = _run(image, "--help")
    assert helped.returncode == 0 and "--host-root" in helped.stdout and "--reserve" in helped.stdout, helped.stderr
    user = _run(image, "-u", entrypoint="id")
    assert user.returncode == 0 and user.stdout.strip() == "65532", user.stdout + user.stderr


def test_the_image_decides_once_over_a_mounted_node_tree(image, tmp_path, teesim_node):
    node = teesim_node(tmp_path / "node", "--vendor", "intel")
    # Readable by the image's user, as the host's /sys/fs/cgroup is (0444 files, 0555 directories).
    subprocess.run(["chmod", "-R", "a+rX", str(node)], check=True)
    decided = _run(
        image,
        "--once",
        "--dry-run",
        "--node=tdx-1",
        "--host-root=/host",
        volumes=[f"{node / 'sys/fs/cgroup'}:/host/sys/fs/cgroup:ro"],
    )
    assert decided.returncode == 0, decided.stderr
    answer = json.loads(decided.stdout)
    assert answer["node"] == "tdx-1" and answer["written"] is False
    # The node tree's TDX keys, read through the mount: the pool the agent would advertise.
    (pool,) = answer["pools"]
    assert pool["misc"] == "tdx" and pool["resource"] == "tdx.intel.com/keys" and pool["capacity"] > 0
