"""A boot update that fails on a real kernel loses nothing: the run stops before any reboot, every boot file is as
it was, and GRUB boots the line the host had.

The Intel machine of test_tee_node_reboots_real_kernel.py (its own VM, resumed from the same first boot), as a host
is provisioned the first time: ``tee_node`` applies the TDX and IOMMU arguments while the boot update cannot
succeed, once with ``update-grub`` replaced by a script that exits 1 and once with the file system that holds
``/boot`` full. Each run fails at its one ``kernel_cmdline`` task (tee_node applies the arguments before any role
changes anything else) with the drop-ins it wrote removed and ``grub.cfg`` untouched, and does not reboot. One
reboot after both: GRUB boots the first command line, string for string.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import boot_vm, explain
from .qemu_vm import Machine, Vm
from .test_tee_node_reboots_real_kernel import FINGERPRINT, TEE_ARGS

pytestmark = pytest.mark.slow

BREAK_UPDATE_GRUB = (
    "mv /usr/sbin/update-grub /usr/sbin/update-grub.real && "
    "printf '#!/bin/sh\\necho injected failure >&2\\nexit 1\\n' >/usr/sbin/update-grub && "
    "chmod 0755 /usr/sbin/update-grub"
)
REPAIR_UPDATE_GRUB = "mv /usr/sbin/update-grub.real /usr/sbin/update-grub"
# The filesystem that holds /boot (here also /) filled until root can write no more: fallocate takes the free
# blocks without writing data, dd the last ones. The run's "No space left on device" shows it was full.
# /boot is on the root file system in this image, so filling it fills the disk Ansible's module files and
# Python's temporary files go to as well: those go to a small tmpfs on /tmp for this run (ansible_remote_tmp),
# as on a host whose separate /boot is full, and only the boot update meets the full disk.
FILL_BOOT = (
    "mountpoint -q /tmp || mount -t tmpfs -o size=64m,mode=1777 tee-vm-tmp /tmp; "
    "fallocate -l $(( $(stat -f -c '%f * %S' /boot) )) /boot/tee-vm-fill 2>/dev/null || "
    "fallocate -l $(( $(stat -f -c '%f * %S' /boot) - 1048576 )) /boot/tee-vm-fill; "
    "dd if=/dev/zero of=/boot/tee-vm-fill-rest bs=4k 2>/dev/null; sync; true"
)
EMPTY_BOOT = "rm -f /boot/tee-vm-fill*; umount tee-vm-tmp || true"


@pytest.fixture(scope="module")
def vm(vm_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    yield from boot_vm(vm_image, tmp_path_factory.mktemp("bad-boot-vm"), Machine("GenuineIntel", "intel-iommu"))


@pytest.fixture(scope="module")
def first_cmdline(vm: Vm) -> str:
    """The command line GRUB booted before any role ran."""
    line = vm.kernel_cmdline()
    assert not set(TEE_ARGS) & set(line.split()), line
    return line


def apply_must_fail(
    vm: Vm, run_playbook, breakage: str, repair: str, remote_tmp: str | None = None
) -> tuple[object, str, str]:
    """Break the boot update in the VM, run tee_node for real, and return its result and the boot files
    before/after."""
    before = vm.read(FINGERPRINT)
    vm.ssh(breakage)
    extra: dict[str, object] = {"tee_reboot_ok": True}
    if remote_tmp:
        extra["ansible_remote_tmp"] = f"{remote_tmp}/.ansible-tmp"
    try:
        result = run_playbook(vm, "tee_node.yml", extra=extra)
        after = vm.read(FINGERPRINT)
    finally:
        vm.ssh(repair)
    return result, before, after


def test_failing_update_grub_fails_before_reboot_and_restores_the_files(
    vm: Vm, first_cmdline: str, run_playbook
) -> None:
    boot = vm.boot_id()

    result, before, after = apply_must_fail(vm, run_playbook, BREAK_UPDATE_GRUB, REPAIR_UPDATE_GRUB)

    assert result.returncode != 0, explain(result)
    assert "update-grub" in result.stdout, explain(result)
    assert vm.boot_id() == boot, "no reboot after a failed boot update"
    assert after == before


def test_full_boot_fails_before_reboot_and_restores_the_files(vm: Vm, first_cmdline: str, run_playbook) -> None:
    boot = vm.boot_id()

    result, before, after = apply_must_fail(vm, run_playbook, FILL_BOOT, EMPTY_BOOT, remote_tmp="/tmp")

    assert result.returncode != 0, explain(result)
    assert "No space left on device" in result.stdout, explain(result)
    assert vm.boot_id() == boot, "no reboot after a failed boot update"
    assert after == before


def test_after_failed_boot_updates_the_host_boots_the_line_it_had(vm: Vm, first_cmdline: str) -> None:
    # One reboot for both failures above: what they left on the disk is what GRUB boots.
    vm.reboot()

    assert vm.kernel_cmdline() == first_cmdline
