"""Fixtures for the real-kernel scenarios: the cached VM image, VMs booted from it, and playbook runs over SSH.

These tests boot Debian 12 under QEMU's software emulation and take minutes: ``make vm-test``, the last step of
``make test``, runs them all, one file per xdist worker (a VM each), and ``make vm-test-grub`` the three GRUB files;
the default ``pytest`` run skips this folder (``norecursedirs`` in pyproject.toml).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from .qemu_vm import Machine, Vm

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO_ROOT / "playbooks"
FACTS_PLAYBOOK = Path(__file__).with_name("read_facts.yml")
# Shared locks on the images this session boots, held until it ends: scripts/vm-image.sh removes an older build
# only when no run holds it (another checkout's script, another key, may share the cache).
_IMAGES_IN_USE: list[IO[str]] = []
RECAP = re.compile(r"^tee-vm\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


@pytest.fixture(scope="session")
def vm_image() -> Path:
    """The cached image directory (built by scripts/vm-image.sh on first use: minutes)."""
    return cached_image("grub")


def cached_image(variant: str) -> Path:
    """The cached image of one variant of scripts/vm-image.sh (``grub`` or ``systemd-boot``), built if missing."""
    for tool in ("qemu-system-x86_64", "qemu-img", "ssh"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run scripts/sysdeps.sh (make test does)")
    # One build of a variant at a time: two xdist workers on a cold cache would otherwise each build and publish
    # an image, the second replacing the first (and its SSH key) under the first worker's running VM. The two
    # variants live in their own directories and trim only their own builds, so they build side by side.
    cache = (
        os.environ.get("TEE_CACHE_DIR")
        or f"{os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache'}/confidential-tee"
    )
    lock_dir = Path(cache) / "vm"  # where scripts/vm-image.sh caches the image
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / f".build-{variant}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = subprocess.run(
            [str(REPO_ROOT / "scripts" / "vm-image.sh"), variant],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        assert built.returncode == 0, built.stderr
        image = Path(built.stdout.strip().splitlines()[-1])
        # Taken before the build lock is released, so no build removes the image between the two.
        in_use = (image / ".in-use").open("a")
        fcntl.flock(in_use, fcntl.LOCK_SH)
        os.utime(image / ".in-use")
        _IMAGES_IN_USE.append(in_use)
    return image


def boot_vm(
    image: Path, workdir: Path, machine: Machine, *, direct_kernel_args: tuple[str, ...] | None = None
) -> Iterator[Vm]:
    vm = Vm(image_dir=image, workdir=workdir, machine=machine)
    try:
        vm.start(direct_kernel_args=direct_kernel_args)
        yield vm
    finally:
        vm.stop()
        print(f"\n{workdir.name}: boots took {[round(s) for s in vm.boots]} s until SSH answered")


def recap(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The PLAY RECAP counters of the last play (``ok``, ``changed``, ``unreachable``, ``failed``)."""
    found = RECAP.findall(result.stdout)
    assert found, f"no PLAY RECAP in the output:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    ok, changed, unreachable, failed = (int(value) for value in found[-1])
    return {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed}


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"rc={result.returncode}\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"


@pytest.fixture(scope="session")
def run_playbook(
    ansible_playbook_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(vm, playbook, *args, host_vars=None, extra=None)``: a real ansible-playbook against the VM.

    ``host_vars`` go into the inventory (where a role's own variables belong); ``extra`` is passed as one JSON
    ``-e`` (extra variables win over everything, so only play-level switches go there).
    """

    def run(
        vm: Vm,
        playbook: str | Path,
        *args: str,
        host_vars: dict[str, object] | None = None,
        extra: dict[str, object] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        inventory = vm.inventory(**(host_vars or {}))
        path = playbook if isinstance(playbook, Path) else PLAYBOOKS / playbook
        options = ["-i", str(inventory), *args]
        if extra:
            options += ["-e", json.dumps(extra)]
        try:
            return ansible_playbook_cli(path, *options, env={"ANSIBLE_PIPELINING": "true"}, timeout=2400)
        finally:
            # The run may have rebooted the VM: the harness's next command logs in again.
            vm.drop_ssh_connection()

    return run


@pytest.fixture(scope="session")
def read_facts(run_playbook: Callable[..., subprocess.CompletedProcess[str]]) -> Callable[[Vm], dict]:
    """``read(vm, capacity=True, configured=True)``: tee_host_info (capacity on), and tee_capacity_info and
    kernel_cmdline's configured facts unless left out (``None`` in the result then: each call costs seconds)."""

    def read(vm: Vm, *, capacity: bool = True, configured: bool = True) -> dict:
        out = vm.workdir / "facts.json"
        out.unlink(missing_ok=True)
        extra = {"tee_vm_facts_out": str(out), "tee_vm_read_capacity": capacity, "tee_vm_read_configured": configured}
        result = run_playbook(vm, FACTS_PLAYBOOK, extra=extra)
        assert result.returncode == 0, explain(result)
        return json.loads(out.read_text())

    return read
