"""confidential.tee.tee_node on a real kernel: the arguments it configures are the ones the kernel boots with.

One Debian 12 VM (QEMU TCG, q35, emulated VT-d, a spare e1000 for vfio-pci, an Intel vendor_id) booted through
its own GRUB. The steps run in order on the same VM, as an operator would run them:
check mode changes nothing; a real run reboots once and the kernel reports exactly the requested arguments
with every other argument unchanged; the facts match what the kernel shows; a second run changes nothing; the
revert boots the original command line again. Failed boot updates have their own VM
(test_failed_boot_update_keeps_the_old_line.py), which runs on the other core meanwhile.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import boot_vm, explain, recap
from .qemu_vm import Machine, Vm

pytestmark = pytest.mark.slow

TEE_ARGS = ("kvm_intel.tdx=1", "nohibernate", "intel_iommu=on")
# Everything the roles write or regenerate: these must be byte for byte unchanged where the tests say so.
BOOT_FILES = "/etc/default/grub /etc/default/grub.d /boot/grub/grub.cfg /etc/modprobe.d /etc/modules-load.d"
# Backups the kernel_cmdline module leaves (<file>.<timestamp>~) are not configuration: grub-mkconfig skips them.
FINGERPRINT = (
    f"find {BOOT_FILES} -type f ! -name '*~' -print0 2>/dev/null | sort -z | xargs -0 sha256sum; "
    f"find {BOOT_FILES} ! -name '*~' 2>/dev/null | sort"
)
SPARE_NIC = {"iommu_passthrough_nvidia_vendor": "0x8086", "iommu_passthrough_nvidia_classes": ["0x0200"]}


@pytest.fixture(scope="module")
def vm(vm_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    yield from boot_vm(vm_image, tmp_path_factory.mktemp("intel-vm"), Machine("GenuineIntel", "intel-iommu"))


@pytest.fixture(scope="module")
def first_cmdline(vm: Vm) -> str:
    """The command line GRUB booted before any role ran (read once, at the first step)."""
    return vm.kernel_cmdline()


def without(tokens: list[str], removed: tuple[str, ...]) -> list[str]:
    return [token for token in tokens if token not in removed]


def test_check_mode_reports_the_change_and_writes_nothing(vm: Vm, first_cmdline: str, run_playbook) -> None:
    assert not set(TEE_ARGS) & set(first_cmdline.split()), first_cmdline
    before, modules, boot = vm.read(FINGERPRINT), vm.read("ls /sys/module"), vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", "--check", "--diff", extra={"tee_reboot_ok": True})

    assert result.returncode == 0, explain(result)
    assert recap(result)["changed"] > 0, "check mode should report the changes it would make"
    assert all(arg in result.stdout for arg in TEE_ARGS), explain(result)
    assert vm.read(FINGERPRINT) == before
    assert vm.read("ls /sys/module") == modules
    assert vm.boot_id() == boot


def test_real_run_reboots_once_into_the_requested_arguments(vm: Vm, first_cmdline: str, run_playbook) -> None:
    boots, boot = vm.kernel_boots(), vm.boot_id()

    # The roles' own switches, in the inventory: tee_node turns them into its one reboot for every role.
    result = run_playbook(
        vm, "tee_node.yml", host_vars={"tdx_host_reboot_ok": "true", "iommu_passthrough_reboot_ok": "true"}
    )

    assert result.returncode == 0, explain(result)
    assert vm.boot_id() != boot
    assert vm.kernel_boots() == boots + 1, "one reboot for every role"
    booted = vm.kernel_cmdline().split()
    assert all(booted.count(arg) == 1 for arg in TEE_ARGS), booted
    # Every argument that was there before is still there, byte for byte and in order.
    assert without(booted, TEE_ARGS) == first_cmdline.split()


def test_facts_are_what_the_kernel_shows(vm: Vm, read_facts) -> None:
    facts = read_facts(vm)
    host, cmdline = facts["host"], facts["host"]["cmdline"]

    assert cmdline["readable"] is True
    assert (cmdline["kvm_intel_tdx"], cmdline["nohibernate"], cmdline["intel_iommu_on"]) == (True, True, True)
    assert set(TEE_ARGS) <= set(cmdline["args"])
    configured = facts["configured"]["configured_facts"]
    assert (configured["kvm_intel_tdx"], configured["nohibernate"], configured["intel_iommu_on"]) == (True, True, True)

    assert host["kernel"]["release"] == vm.read("uname -r").strip()
    assert (host["cpu"]["vendor"], host["tee_vendor"]) == ("GenuineIntel", "intel")
    # The emulated CPU has no TDX: the verdict says so, with reasons, rather than guessing.
    assert host["boot"]["technology"] == "TDX"
    assert host["boot"]["ok"] is False and host["boot"]["reasons"]
    assert host["power"]["hibernation_available"] is ("disk" in vm.read("cat /sys/power/state").split())

    groups = vm.read("ls /sys/kernel/iommu_groups").split()
    assert groups, "intel_iommu=on with an emulated VT-d gives IOMMU groups"
    assert host["iommu"]["groups"] == len(groups)
    assert host["iommu"]["enabled"] is True
    assert_pci_devices_match(vm, host["pci"])

    for module, loaded in host["modules"].items():
        assert loaded is (vm.ssh(f"test -d /sys/module/{module}", check=False).returncode == 0), module
    for module in ("vhost_vsock", "vsock_loopback", "vfio", "vfio_pci", "vfio_iommu_type1"):
        assert host["modules"][module] is True, module
    assert host["vsock"]["vhost_vsock"] is (vm.ssh("test -c /dev/vhost-vsock", check=False).returncode == 0) is True
    # The emulated CPU has no VMX or SVM: neither KVM module loads, and their TEE parameters are unknown (null).
    for vendor, module in (("intel", "kvm_intel"), ("amd", "kvm_amd")):
        loaded = vm.ssh(f"test -d /sys/module/{module}", check=False).returncode == 0
        assert host["kvm"][vendor]["loaded"] is loaded, module
    if not host["kvm"]["intel"]["loaded"]:
        assert host["kvm"]["intel"]["tdx"] is None, "kvm_intel's tdx parameter is unknown while it is not loaded"

    assert_capacity_matches(vm, facts["capacity"])


def assert_pci_devices_match(vm: Vm, pci: dict) -> None:
    script = (
        'for d in /sys/bus/pci/devices/*; do printf \'%s %s %s %s %s\\n\' "${d##*/}" "$(cat $d/vendor)" '
        '"$(cat $d/class)" "$(basename "$(readlink $d/driver)" 2>/dev/null)" '
        '"$(basename "$(readlink $d/iommu_group)" 2>/dev/null)"; done'
    )
    shown = {}
    for line in vm.read(script).splitlines():
        bdf, vendor, klass, driver, group = (line.split(" ") + [""] * 5)[:5]
        shown[bdf] = (vendor, klass[:6], driver or None, group or None)
    assert pci["readable"] is True
    reported = {d["bdf"]: (d["vendor"], d["class"], d["driver"], d["iommu_group"]) for d in pci["devices"]}
    assert reported == shown


def assert_capacity_matches(vm: Vm, capacity: dict) -> None:
    controller = capacity["misc_controller"]
    has_file = vm.ssh("test -e /sys/fs/cgroup/misc.capacity", check=False).returncode == 0
    assert controller["present"] is has_file
    if not has_file:
        assert controller["reason"], "an absent controller needs a reason"
        return
    assert controller["reason"] is None
    # The kernel prints a line only for a resource with a capacity (kernel/cgroup/misc.c): no line is 0.
    capacities = misc_lines(vm, "/sys/fs/cgroup/misc.capacity")
    # Usage: the root's misc.current where the kernel has one, else the sum of the top-level cgroups' (a lower
    # bound: the root's own charges are not shown), as the module documents.
    root_current = vm.ssh("test -e /sys/fs/cgroup/misc.current", check=False).returncode == 0
    used: dict[str, int] = {}
    for path in ["/sys/fs/cgroup/misc.current"] if root_current else vm.read(CHILD_MISC_CURRENT).split():
        for name, value in misc_lines(vm, path).items():
            used[name] = used.get(name, 0) + value
    has_peak = vm.ssh("test -e /sys/fs/cgroup/misc.peak", check=False).returncode == 0
    for name, resource in capacity["resources"].items():
        assert resource["capacity"] == capacities.get(name, 0), name
        assert resource["current"] == used.get(name, 0), name
        assert resource["current_is_lower_bound"] is not root_current, name
        # The kernel answered both files: nothing about this resource is unknown.
        assert resource["unknown"] == [], (name, resource["unknown"])
        assert (resource["peak"] is None) is not has_peak, name


# The top-level cgroups' misc.current files (none where the misc controller is not enabled for the children).
CHILD_MISC_CURRENT = 'for f in /sys/fs/cgroup/*/misc.current; do [ -e "$f" ] && echo "$f"; done; true'


def misc_lines(vm: Vm, path: str) -> dict[str, int]:
    """A misc file's ``<name> <value>`` lines, as cat shows them in the guest."""
    return {name: int(value) for name, value in (line.split() for line in vm.read(f"cat {path}").splitlines() if line)}


def test_vfio_binding_is_reported_as_the_kernel_made_it(vm: Vm, run_playbook) -> None:
    # A gpu-worker binds the configured vendor's devices; the spare e1000 (8086, class 0x0200) stands in.
    bind = run_playbook(vm, "tee_node.yml", extra={"tee_node_role": "gpu-worker", **SPARE_NIC})
    assert bind.returncode == 0, explain(bind)
    bound = vm.read(
        'for d in /sys/bus/pci/devices/*; do [ "$(basename "$(readlink $d/driver)")" = vfio-pci ] && '
        'echo "${d##*/} $(basename "$(readlink $d/iommu_group)")"; done; true'
    ).split()
    assert len(bound) == 2, f"the spare NIC is bound to vfio-pci: {bound}"

    verify = run_playbook(vm, "verify_node.yml")

    flat = " ".join(verify.stdout.split())
    assert f"vfio-pci: {bound[0]} in IOMMU group {bound[1]}" in flat, explain(verify)
    groups = len(vm.read("ls /sys/kernel/iommu_groups").split())
    assert re.search(rf"IOMMU: {groups} groups", flat), explain(verify)
    assert "vhost_vsock" in flat and "/dev/vhost-vsock present" in flat, explain(verify)
    # The emulated CPU cannot run TDX: the verdict fails, naming why.
    assert verify.returncode != 0 and "TDX is not usable on this host" in flat, explain(verify)


def test_second_run_changes_nothing_and_does_not_reboot(vm: Vm, run_playbook) -> None:
    boot = vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", extra={"tee_reboot_ok": True})

    assert result.returncode == 0, explain(result)
    assert recap(result)["changed"] == 0, explain(result)
    assert vm.boot_id() == boot


def test_revert_boots_the_original_command_line(vm: Vm, first_cmdline: str, run_playbook) -> None:
    boot = vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", extra={"tee_state": "absent", "tee_reboot_ok": True})

    assert result.returncode == 0, explain(result)
    assert vm.boot_id() != boot
    assert vm.kernel_cmdline() == first_cmdline
    assert vm.ssh("test -e /etc/modprobe.d/confidential-tee-tdx.conf", check=False).returncode != 0
    assert vm.ssh("test -e /etc/modules-load.d/vfio.conf", check=False).returncode != 0
