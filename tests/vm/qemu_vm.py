"""A Debian 12 VM under QEMU's software emulation (TCG), reachable over SSH on a loopback port.

The disk is a copy-on-write overlay over the image ``scripts/vm-image.sh`` caches, so every VM starts from the
same installed system and the cache is never written. It boots through SeaBIOS and the GRUB installed in the
image: a reboot the roles ask for goes through the real ``grub.cfg`` that ``update-grub`` wrote, never through
QEMU's ``-kernel``. ``Machine(uefi=True)`` boots the systemd-boot image through OVMF and the loader entry
``kernel-install`` wrote instead. Waits are generous and never asserted on: an emulated CPU on a busy machine is slow.
"""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# Every wait is a deadline for a hang, not a speed requirement.
BOOT_TIMEOUT_S = 1200
SSH_OPTIONS = (
    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
    "-o ConnectTimeout=30 -o ServerAliveInterval=15 -o ServerAliveCountMax=8 -o BatchMode=yes"
)


@dataclass(frozen=True)
class Machine:
    """What QEMU emulates: the CPU vendor the guest reads in /proc/cpuinfo and its IOMMU."""

    cpu_vendor: str  # GenuineIntel or AuthenticAMD (qemu64 with this vendor_id)
    iommu: str | None  # "intel-iommu", "amd-iommu" or None
    # A spare PCI function the guest's e1000 driver claims, for the roles to hand to vfio-pci.
    spare_nic: bool = True
    # UEFI (Debian's OVMF) instead of SeaBIOS: for the systemd-boot image, which boots from its ESP.
    uefi: bool = False


# Debian's ovmf (2022.11): the firmware code, read-only, and a template of its variable store; each VM writes
# its own copy of the store.
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Vm:
    image_dir: Path
    workdir: Path
    machine: Machine
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    boots: list[float] = field(default_factory=list)

    @property
    def key(self) -> Path:
        return self.image_dir / "id_ed25519"

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    def qemu_command(self) -> list[str]:
        overlay = self.workdir / "disk.qcow2"
        command = [
            "qemu-system-x86_64",
            # kernel-irqchip=split: an emulated IOMMU wants the IOAPIC in QEMU (under TCG it always is; the
            # option keeps the line valid where the same command runs with KVM).
            "-machine",
            "q35,accel=tcg,kernel-irqchip=split",
            "-cpu",
            f"qemu64,vendor={self.machine.cpu_vendor}",
            "-smp",
            "1",
            "-m",
            "1024",
            "-nodefaults",
            "-display",
            "none",
            "-serial",
            f"file:{self.serial_log}",
        ]
        # Before any PCI device: QEMU attaches the devices that follow to this IOMMU. Without interrupt
        # remapping: under TCG on a loaded host the kernel's IO-APIC timer check through remapped interrupts
        # can fail ("timer doesn't work through Interrupt-remapped IO-APIC", a panic); DMA remapping, which
        # makes the IOMMU groups, is unaffected.
        if self.machine.iommu == "intel-iommu":
            command += ["-device", "intel-iommu,intremap=off"]
        elif self.machine.iommu == "amd-iommu":
            command += ["-device", "amd-iommu,intremap=off"]
        if self.machine.uefi:
            command += [
                "-drive",
                f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
                "-drive",
                f"if=pflash,format=raw,unit=1,file={self.workdir / 'OVMF_VARS.fd'}",
            ]
        command += [
            "-drive",
            f"file={overlay},format=qcow2,if=virtio",
            "-netdev",
            f"user,id=net0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
            "-device",
            "virtio-net-pci,netdev=net0",
        ]
        if self.machine.spare_nic:
            command += ["-netdev", "user,id=spare,restrict=on", "-device", "e1000,netdev=spare"]
        return command

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        overlay = self.workdir / "disk.qcow2"
        backing = str(self.image_dir / "disk.raw")
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", backing, str(overlay)],
            check=True,
            timeout=60,
        )
        if self.machine.uefi:
            shutil.copyfile(OVMF_VARS, self.workdir / "OVMF_VARS.fd")
        self.port = free_loopback_port()
        self.process = subprocess.Popen(
            self.qemu_command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.wait_for_ssh()

    def wait_for_ssh(self, timeout: float = BOOT_TIMEOUT_S) -> None:
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            self._raise_if_exited()
            probe = self.ssh("true", check=False, timeout=60)
            if probe.returncode == 0:
                self.boots.append(time.monotonic() - started)
                return
            time.sleep(3)
        raise TimeoutError(f"no SSH on 127.0.0.1:{self.port} after {timeout} s; serial console:\n{self.console_tail()}")

    def _raise_if_exited(self) -> None:
        if "Kernel panic - not syncing" in self.console_tail(200):
            raise RuntimeError(f"the guest kernel panicked:\n{self.console_tail()}")
        if self.process is not None and self.process.poll() is not None:
            error = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
            raise RuntimeError(f"QEMU exited with {self.process.returncode}: {error}\n{self.console_tail()}")

    def console_tail(self, lines: int = 40) -> str:
        try:
            text = self.serial_log.read_text(errors="replace")
        except OSError:
            return "(no serial log)"
        return "\n".join(text.splitlines()[-lines:])

    def ssh_command(self, command: str) -> list[str]:
        return ["ssh", *shlex.split(SSH_OPTIONS), "-i", str(self.key), "-p", str(self.port), "root@127.0.0.1", command]

    def ssh(self, command: str, *, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        try:
            result = subprocess.run(
                self.ssh_command(command), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            if check:
                raise
            return subprocess.CompletedProcess(command, 255, "", "timed out")
        if check and result.returncode != 0:
            raise AssertionError(f"{command!r} failed in the VM ({result.returncode}): {result.stderr}{result.stdout}")
        return result

    def read(self, command: str) -> str:
        return self.ssh(command).stdout

    def boot_id(self) -> str:
        return self.read("cat /proc/sys/kernel/random/boot_id").strip()

    def reboot(self) -> None:
        """Reboot from inside (as an operator would) and wait until a new boot answers on SSH."""
        before = self.boot_id()
        self.ssh("systemctl reboot", check=False, timeout=60)
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(5)
            self.wait_for_ssh(timeout=max(1.0, deadline - time.monotonic()))
            if self.boot_id() != before:
                return
        raise TimeoutError(f"the VM did not come back from a reboot; serial console:\n{self.console_tail()}")

    def inventory(self, **host_vars: object) -> Path:
        """An INI inventory for this VM (one host, ``tee-vm``) with the given host variables."""
        settings = {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": f"'{SSH_OPTIONS}'",
            "ansible_python_interpreter": "/usr/bin/python3",
            **host_vars,
        }
        path = self.workdir / "inventory.ini"
        path.write_text("tee-vm " + " ".join(f"{name}={value}" for name, value in settings.items()) + "\n")
        return path

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
