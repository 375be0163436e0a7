"""confidential.tee.tee_node on a systemd-boot host: /etc/kernel/cmdline and kernel-install reach the kernel.

One Debian 12 VM booted by UEFI (Debian's OVMF) and systemd-boot from its EFI system partition, with no GRUB
at all (``scripts/vm-image.sh systemd-boot``: the entry ``debian-<release>.conf`` was written by the guest's
own ``kernel-install add`` from ``/etc/kernel/cmdline``). Otherwise the machine of the GRUB scenario: q35, an
emulated VT-d, a spare e1000, an Intel vendor_id. Three boots in all, steps in order on the same VM: check
mode changes nothing; a real run edits ``/etc/kernel/cmdline``, regenerates the running kernel's entry with
``kernel-install`` and reboots once, and systemd-boot boots that entry into exactly the requested arguments
with every other argument unchanged; the facts agree; a second run changes nothing; the revert boots the
first command line again.

On the same machine, between the second run and the revert, the kernel key-pool agent (issue 45): check mode
installs nothing; the tee_key_agent role installs it, it starts under systemd, reads the VM kernel's misc cgroup (no
TEE keys under emulation), says so and advertises nothing, without crashing or restarting; killed, systemd brings
it back; and the revert's reboot is the restart of the machine it must survive (no boot of its own).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import boot_vm, cached_image, explain, recap
from .qemu_vm import Machine, Vm

pytestmark = pytest.mark.slow

TEE_ARGS = ("kvm_intel.tdx=1", "nohibernate", "intel_iommu=on")
# What the roles write and what kernel-install regenerates: the command line, the ESP's loader entries and the
# kernel and initramfs kernel-install copies there. The ESP's random seed is systemd-boot's, renewed at boot.
BOOT_FILES = "/etc/kernel /boot/efi/loader /boot/efi/debian /etc/modprobe.d /etc/modules-load.d"
FINGERPRINT = (
    f"find {BOOT_FILES} -type f ! -name '*~' ! -name random-seed -print0 2>/dev/null | sort -z | xargs -0 sha256sum; "
    f"find {BOOT_FILES} ! -name '*~' 2>/dev/null | sort"
)
# systemd-boot's variables (the Boot Loader Interface's vendor GUID): which loader ran and which entry it booted.
LOADER_GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    image = cached_image("systemd-boot")
    machine = Machine("GenuineIntel", "intel-iommu", uefi=True)
    yield from boot_vm(image, tmp_path_factory.mktemp("systemd-boot-vm"), machine)


@pytest.fixture(scope="module")
def first_boot(vm: Vm) -> dict[str, str]:
    """What the first boot was: the kernel's command line, the entry systemd-boot chose, the configured line."""
    return {
        "cmdline": vm.kernel_cmdline(),
        "entry": loader_variable(vm, "LoaderEntrySelected"),
        "configured": vm.read("cat /etc/kernel/cmdline"),
    }


def loader_variable(vm: Vm, name: str) -> str:
    """A Boot Loader Interface variable as text (efivarfs: 4 attribute bytes, then NUL-terminated UTF-16LE)."""
    path = f"/sys/firmware/efi/efivars/{name}-{LOADER_GUID}"
    script = f"import sys; sys.stdout.write(open('{path}', 'rb').read()[4:].decode('utf-16-le').rstrip('\\0'))"
    return vm.read(f'python3 -c "{script}"')


def entry_options(vm: Vm, entry: str) -> str:
    """The ``options`` of a loader entry on the ESP, as systemd-boot reads them."""
    lines = vm.read(f"cat /boot/efi/loader/entries/{entry}").splitlines()
    options = [line.split(None, 1)[1] for line in lines if line.startswith("options")]
    assert len(options) == 1, lines
    return options[0]


def test_check_mode_reports_the_change_and_writes_nothing(vm: Vm, first_boot: dict, run_playbook) -> None:
    # The machine is what the scenario claims: UEFI, systemd-boot, the entry kernel-install wrote, no GRUB.
    assert loader_variable(vm, "LoaderInfo").startswith("systemd-boot "), "booted by systemd-boot"
    release = vm.read("uname -r").strip()
    assert first_boot["entry"] == f"debian-{release}.conf"
    assert vm.ssh("test -e /etc/default/grub || test -e /boot/grub", check=False).returncode != 0
    assert not set(TEE_ARGS) & set(first_boot["cmdline"].split()), first_boot
    before, modules, boot = vm.read(FINGERPRINT), vm.read("ls /sys/module"), vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", "--check", "--diff", extra={"tee_reboot_ok": True})

    assert result.returncode == 0, explain(result)
    assert recap(result)["changed"] > 0, "check mode should report the changes it would make"
    assert "/etc/kernel/cmdline" in result.stdout, explain(result)
    assert all(arg in result.stdout for arg in TEE_ARGS), explain(result)
    assert vm.read(FINGERPRINT) == before
    assert vm.read("ls /sys/module") == modules
    assert vm.boot_id() == boot


def test_real_run_reboots_once_into_the_requested_arguments(vm: Vm, first_boot: dict, run_playbook) -> None:
    boots, boot = vm.kernel_boots(), vm.boot_id()

    result = run_playbook(
        vm, "tee_node.yml", host_vars={"tdx_host_reboot_ok": "true", "iommu_passthrough_reboot_ok": "true"}
    )

    assert result.returncode == 0, explain(result)
    assert vm.boot_id() != boot
    assert vm.kernel_boots() == boots + 1, "one reboot for every role"
    # systemd-boot booted the same entry, which kernel-install rewrote from the edited /etc/kernel/cmdline.
    assert loader_variable(vm, "LoaderEntrySelected") == first_boot["entry"]
    configured = vm.read("cat /etc/kernel/cmdline")
    assert entry_options(vm, first_boot["entry"]) == " ".join(configured.split())
    assert configured.split()[: len(first_boot["configured"].split())] == first_boot["configured"].split()
    booted = vm.kernel_cmdline().split()
    assert all(booted.count(arg) == 1 for arg in TEE_ARGS), booted
    # Every argument of the first boot is still there, byte for byte and in order (systemd-boot's own
    # initrd= included).
    assert [arg for arg in booted if arg not in TEE_ARGS] == first_boot["cmdline"].split()


def test_facts_agree_with_the_kernel(vm: Vm, read_facts) -> None:
    facts = read_facts(vm, capacity=False)
    host, cmdline = facts["host"], facts["host"]["cmdline"]

    assert cmdline["readable"] is True
    # The TEE and IOMMU arguments the facts pick out are the kernel's, in the kernel's order.
    assert cmdline["args"] == [arg for arg in vm.kernel_cmdline().split() if arg in TEE_ARGS]
    assert (cmdline["kvm_intel_tdx"], cmdline["nohibernate"], cmdline["intel_iommu_on"]) == (True, True, True)
    configured = facts["configured"]
    assert (configured["setup"], configured["source"]) == ("kernel_install", "/etc/kernel/cmdline"), configured
    flags = configured["configured_facts"]
    assert (flags["kvm_intel_tdx"], flags["nohibernate"], flags["intel_iommu_on"]) == (True, True, True)
    # The emulated CPU has no TDX: the boot verdict says so, with reasons, rather than guessing.
    assert (host["tee_vendor"], host["boot"]["technology"]) == ("intel", "TDX")
    assert host["boot"]["ok"] is False and host["boot"]["reasons"]
    groups = vm.read("ls /sys/kernel/iommu_groups").split()
    assert groups and host["iommu"]["groups"] == len(groups), "intel_iommu=on took effect"


def test_second_run_changes_nothing_and_does_not_reboot(vm: Vm, run_playbook) -> None:
    before, boot = vm.read(FINGERPRINT), vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", extra={"tee_reboot_ok": True})

    assert result.returncode == 0, explain(result)
    assert recap(result)["changed"] == 0, explain(result)
    assert vm.boot_id() == boot
    assert vm.read(FINGERPRINT) == before


KEY_AGENT = Path(__file__).with_name("key_agent.yml")
AGENT_UNIT = "confidential-tee-key-agent.service"
AGENT_FILES = "/usr/local/lib/confidential-tee /etc/systemd/system/confidential-tee-key-agent.service"
AGENT_CLI = "ansible_collections.confidential.tee.plugins.module_utils.agent.cli"
# A JSON kubeconfig whose API server does not answer: the VM runs no Kubernetes.
NO_API = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "none",
    "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
    "users": [{"name": "none", "user": {"token": "not-a-token"}}],
    "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
}
# What the agent says on a kernel without TEE keys (plugins/module_utils/agent/decision.py's reasons).
NO_KEYS = ("NoTeeKeyResource", "MiscControllerUnavailable")


def agent_service(vm: Vm) -> dict[str, str]:
    keys = "ActiveState,SubState,NRestarts,MainPID,ActiveEnterTimestampMonotonic"
    lines = vm.read(f"systemctl show {AGENT_UNIT} --property={keys}").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def wait_up_for(vm: Vm, seconds: float, timeout: float = 300) -> dict[str, str]:
    """The service once it has been active for ``seconds`` of the guest's monotonic clock (not the host's)."""
    deadline = time.monotonic() + timeout
    while True:
        state = agent_service(vm)
        now_us = float(vm.read("cat /proc/uptime").split()[0]) * 1e6
        entered = int(state.get("ActiveEnterTimestampMonotonic") or 0)
        if state.get("ActiveState") == "active" and entered and now_us - entered >= seconds * 1e6:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{AGENT_UNIT} not up for {seconds} s: {state}\n{vm.read('journalctl -u ' + AGENT_UNIT)}"
            )
        time.sleep(2)


def test_key_agent_check_mode_installs_nothing(vm: Vm, run_playbook) -> None:
    kubeconfig = json.dumps(NO_API)
    vm.ssh(
        f"mkdir -p /etc/confidential-tee && umask 077 && echo '{kubeconfig}' > /etc/confidential-tee/agent.kubeconfig"
    )
    assert vm.ssh(f"ls {AGENT_FILES}", check=False).returncode != 0, "no agent before the role runs"

    result = run_playbook(vm, KEY_AGENT, "--check")

    assert result.returncode == 0, explain(result)
    assert recap(result)["changed"] > 0, explain(result)
    assert "Would install the key agent for node tee-vm" in " ".join(result.stdout.split()), explain(result)
    assert vm.ssh(f"ls {AGENT_FILES}", check=False).returncode != 0, "check mode installed something"
    assert vm.ssh(f"systemctl cat {AGENT_UNIT}", check=False).returncode != 0


def test_key_agent_runs_under_systemd_says_there_are_no_keys_and_stays_up(vm: Vm, run_playbook) -> None:
    result = run_playbook(vm, KEY_AGENT)

    assert result.returncode == 0, explain(result)
    assert vm.read(f"systemctl is-enabled {AGENT_UNIT}").strip() == "enabled"
    # Ten seconds of its own clock, ten passes at the default interval: the same process, never restarted.
    first = wait_up_for(vm, 1)
    state = wait_up_for(vm, 10)
    assert (state["SubState"], state["NRestarts"], state["MainPID"]) == ("running", "0", first["MainPID"]), state
    journal = vm.read(f"journalctl -u {AGENT_UNIT} -o cat")
    assert any(reason in journal for reason in NO_KEYS), journal
    # Its decision, as the installed agent makes it here: no pool, so nothing to advertise.
    once = vm.read(f"PYTHONPATH=/usr/local/lib/confidential-tee/agent python3 -m {AGENT_CLI} --once --dry-run")
    decided = json.loads(once)
    assert decided["pools"] == [] and decided["condition"]["reason"] in NO_KEYS, decided
    assert decided["written"] is False


def test_key_agent_killed_comes_back(vm: Vm) -> None:
    before = wait_up_for(vm, 1)
    vm.ssh(f"systemctl kill --signal=SIGKILL {AGENT_UNIT}")
    deadline = time.monotonic() + 300
    while (state := agent_service(vm))["MainPID"] in ("0", before["MainPID"]) or state["ActiveState"] != "active":
        assert time.monotonic() < deadline, state
        time.sleep(2)
    assert int(state["NRestarts"]) == int(before["NRestarts"]) + 1, state


def test_revert_boots_the_first_command_line(vm: Vm, first_boot: dict, run_playbook) -> None:
    boots, boot = vm.kernel_boots(), vm.boot_id()

    result = run_playbook(vm, "tee_node.yml", extra={"tee_state": "absent", "tee_reboot_ok": True})

    assert result.returncode == 0, explain(result)
    assert vm.boot_id() != boot
    assert vm.kernel_boots() == boots + 1
    assert vm.read("cat /etc/kernel/cmdline") == first_boot["configured"]
    assert loader_variable(vm, "LoaderEntrySelected") == first_boot["entry"]
    assert vm.kernel_cmdline() == first_boot["cmdline"]


def test_key_agent_runs_again_after_the_reboot_and_a_second_run_changes_nothing(vm: Vm, run_playbook) -> None:
    # The revert rebooted the machine; the agent is enabled, so systemd started it in this boot.
    state = wait_up_for(vm, 5)
    assert (state["SubState"], state["NRestarts"]) == ("running", "0"), state
    assert vm.read(f"journalctl -b -u {AGENT_UNIT} -o cat").strip(), "no output from the agent in this boot"

    result = run_playbook(vm, KEY_AGENT)

    assert result.returncode == 0, explain(result)
    assert recap(result)["changed"] == 0, explain(result)
    assert agent_service(vm)["MainPID"] == state["MainPID"], "a run that changed nothing restarted the agent"
