"""confidential.tee.snp_host on a real kernel booted by GRUB: IOMMU passthrough is refused, then repaired.

A Debian 12 VM with an AMD vendor_id (QEMU's qemu64 CPU) and an emulated AMD IOMMU. A site drop-in turns on
IOMMU passthrough in two spellings the kernel honours (``iommu=nomerge,pt`` and ``iommu.passthrough=1``) plus
``amd_iommu=on`` (not a valid value), and the kernel runs with them. ``tee_node`` then refuses to run (SEV-SNP
is disabled by the AMD IOMMU driver under passthrough) without touching a file; allowed to repair, it removes
exactly those spellings, keeps ``iommu=nomerge``, and the kernel that GRUB boots runs without passthrough.

QEMU cannot snapshot this machine (its AMD IOMMU cannot migrate), so its first boot would cost a whole boot
and a reboot before the first claim. That boot is setup, not a claim about GRUB: QEMU's ``-kernel`` loads the
image's kernel with the line of its GRUB entry plus the site's arguments, the site's ``update-grub`` runs in
that guest, and the fixture checks that the ``grub.cfg`` it wrote boots exactly the line the kernel runs with.
The repair's reboot, the one the claims rest on, goes through SeaBIOS and GRUB from the disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import boot_vm, explain
from .qemu_vm import Machine, Vm
from .test_tee_node_reboots_real_kernel import FINGERPRINT

pytestmark = pytest.mark.slow

SITE_ARGS = ("iommu=nomerge,pt", "iommu.passthrough=1", "amd_iommu=on")
SNP_ARGS = ("kvm_amd.sev=1", "kvm_amd.sev_es=1", "kvm_amd.sev_snp=1")
SITE_DROPIN = "/etc/default/grub.d/50-site-iommu.cfg"


@pytest.fixture(scope="module")
def vm(vm_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    machine = Machine("AuthenticAMD", "amd-iommu")
    yield from boot_vm(vm_image, tmp_path_factory.mktemp("amd-vm"), machine, direct_kernel_args=SITE_ARGS)


@pytest.fixture(scope="module")
def passthrough_cmdline(vm: Vm) -> str:
    """The site's passthrough arguments, configured the way a site would (a GRUB drop-in) and running."""
    vm.ssh(
        f"printf 'GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX {' '.join(SITE_ARGS)}\"\\n' >{SITE_DROPIN} && update-grub"
    )
    booted = vm.kernel_cmdline()
    assert all(arg in booted.split() for arg in SITE_ARGS), booted
    # What GRUB boots from now on (the default entry update-grub wrote) is the line the kernel runs with.
    assert grub_default_line(vm) == booted, "the site's grub.cfg boots another line than the kernel runs"
    assert vm.kernel_boots() == 0, "this boot was QEMU's -kernel; GRUB boots the next one"
    return booted


def grub_default_line(vm: Vm) -> str:
    """The kernel command line GRUB makes from the first entry of /boot/grub/grub.cfg (BOOT_IMAGE first)."""
    linux = vm.read("grep -m1 -E '^[[:space:]]*linux[[:space:]]' /boot/grub/grub.cfg").split()
    return " ".join([f"BOOT_IMAGE={linux[1]}", *linux[2:]])


def test_kernel_runs_with_passthrough_and_the_facts_say_so(vm: Vm, passthrough_cmdline: str, read_facts) -> None:
    host = read_facts(vm, capacity=False, configured=False)["host"]

    assert (host["cpu"]["vendor"], host["tee_vendor"], host["boot"]["technology"]) == (
        "AuthenticAMD",
        "amd",
        "SEV-SNP",
    )
    assert host["cmdline"]["iommu"]["passthrough"] is True
    assert set(host["cmdline"]["iommu"]["passthrough_args"]) == {"iommu=nomerge,pt", "iommu.passthrough=1"}
    groups = vm.read("ls /sys/kernel/iommu_groups").split()
    assert host["iommu"]["groups"] == len(groups)
    types = vm.read("cat /sys/kernel/iommu_groups/*/type 2>/dev/null; true").split()
    assert host["iommu"]["group_types"] == {kind: types.count(kind) for kind in set(types)}


def test_passthrough_is_refused_and_nothing_changes(vm: Vm, passthrough_cmdline: str, run_playbook) -> None:
    before, boot = vm.read(FINGERPRINT), vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", extra={"tee_reboot_ok": True})

    flat = " ".join(result.stdout.split())
    assert result.returncode != 0, explain(result)
    assert "iommu=nomerge,pt iommu.passthrough=1 is configured" in flat, explain(result)
    assert "snp_host_remove_iommu_pt: true" in flat, explain(result)
    assert vm.read(FINGERPRINT) == before
    assert vm.boot_id() == boot


def test_repair_boots_without_passthrough_and_keeps_the_rest(
    vm: Vm, passthrough_cmdline: str, run_playbook, read_facts
) -> None:
    boots = vm.kernel_boots()

    result = run_playbook(vm, "tee_node.yml", host_vars={"snp_host_remove_iommu_pt": "true", "tee_reboot_ok": "true"})

    assert result.returncode == 0, explain(result)
    assert vm.kernel_boots() == boots + 1, "one reboot, through GRUB"
    booted = vm.kernel_cmdline().split()
    assert not set(SITE_ARGS) & set(booted), booted
    assert all(booted.count(arg) == 1 for arg in SNP_ARGS), booted
    assert booted.count("iommu=nomerge") == 1, "the other iommu= option is kept"
    unrelated = [arg for arg in passthrough_cmdline.split() if arg not in SITE_ARGS]
    assert [arg for arg in booted if arg not in SNP_ARGS and arg != "iommu=nomerge"] == unrelated
    host = read_facts(vm, capacity=False, configured=False)["host"]
    assert host["cmdline"]["iommu"]["passthrough"] is not True
    assert host["cmdline"]["iommu_passthrough_remedy"]["needed"] is False
