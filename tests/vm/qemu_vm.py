"""A Debian 12 VM under QEMU's software emulation (TCG), reachable over SSH on a loopback port.

The disk is a copy-on-write overlay over the image ``scripts/vm-image.sh`` caches, so every VM starts from the
same installed system and the image is never written. It boots through SeaBIOS and the GRUB installed in the
image: a reboot the roles ask for goes through the real ``grub.cfg`` that ``update-grub`` wrote, never through
QEMU's ``-kernel``. ``Machine(uefi=True)`` boots the systemd-boot image through OVMF and the loader entry
``kernel-install`` wrote instead. Waits are generous and never asserted on: an emulated CPU on a busy machine is slow.

The first boot of each BIOS machine kind is made once, through GRUB like every other, and kept as a QEMU snapshot
(``savevm``) beside the image; later VMs of that kind resume it (``-loadvm``) in seconds instead of booting for a
minute or more. No test measures that first boot: every reboot a test asserts on is a real one through GRUB.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Every wait is a deadline for a hang, not a speed requirement.
BOOT_TIMEOUT_S = 1200
SNAPSHOT = "booted"
# GRUB prints this on the serial console before it loads each kernel (10_linux's message): one line per boot
# through GRUB, whatever the kernel's log level (the image boots with quiet).
GRUB_LOADING = "Loading Linux "
# The kernel's banner, the first line it logs: the systemd-boot image boots without quiet, so each boot prints it.
KERNEL_BANNER = "Linux version "
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

    @property
    def monitor_socket(self) -> Path:
        # A UNIX socket path has at most 107 bytes: a short one under /tmp, unique per VM.
        digest = hashlib.sha256(str(self.workdir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"tee-vm-{digest}.monitor"

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
            "-monitor",
            f"unix:{self.monitor_socket},server=on,wait=off",
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

    def snapshot_path(self) -> Path:
        """Where the first boot of this machine kind is kept: beside the image, keyed by what QEMU emulates."""
        varying = (str(self.workdir), str(self.monitor_socket), "hostfwd")
        emulated = [arg for arg in self.qemu_command() if not any(part in arg for part in varying)]
        key = hashlib.sha256("\0".join(emulated).encode()).hexdigest()[:12]
        return self.image_dir / "snapshots" / f"{key}.qcow2"

    def start(self) -> None:
        """Resume this machine kind's booted snapshot; without one, boot through GRUB and try to keep the boot."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.machine.uefi:
            shutil.copyfile(OVMF_VARS, self.workdir / "OVMF_VARS.fd")
        overlay = self.workdir / "disk.qcow2"
        snapshot = self.snapshot_path()
        if snapshot.is_file():
            # A copy, not an overlay: QEMU loads only the snapshots of the image it writes to.
            shutil.copyfile(snapshot, overlay)
            self._launch("-loadvm", SNAPSHOT)
            self.wait_for_ssh()
            return
        backing = str(self.image_dir / "disk.raw")
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", backing, str(overlay)],
            check=True,
            timeout=60,
        )
        self._launch()
        self.wait_for_ssh()
        # OVMF's variable store is a raw pflash drive, which savevm refuses: a UEFI machine boots every time.
        if not self.machine.uefi and self._save_snapshot(snapshot):
            self.stop()
            self.serial_log.rename(self.workdir / "serial-first-boot.log")
            shutil.copyfile(snapshot, overlay)
            self._launch("-loadvm", SNAPSHOT)
            self.wait_for_ssh()

    def _save_snapshot(self, snapshot: Path) -> bool:
        """Keep the running first boot as ``snapshot``; False where QEMU refuses (its AMD IOMMU cannot migrate)."""
        self.ssh("sync")
        self.monitor("stop")
        saved = self.monitor(f"savevm {SNAPSHOT}", timeout=600)
        if "Error" in saved:
            self.monitor("cont")
            return False
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        # Published by a rename, so a half-written snapshot is never resumed.
        partial = snapshot.with_name(f".{snapshot.name}.{os.getpid()}")
        self.monitor("quit")
        assert self.process is not None
        self.process.wait(timeout=120)
        shutil.copyfile(self.workdir / "disk.qcow2", partial)
        os.replace(partial, snapshot)
        return True

    def _launch(self, *extra: str) -> None:
        self.port = free_loopback_port()
        self.monitor_socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [*self.qemu_command(), *extra], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def monitor(self, command: str, *, timeout: float = 60) -> str:
        """Run one QEMU monitor (HMP) command and return what it printed before the next prompt."""
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(self.monitor_socket))
            received = b""
            while b"(qemu) " not in received:
                chunk = conn.recv(4096)
                if not chunk:
                    raise RuntimeError(f"the QEMU monitor closed before its prompt: {received!r}")
                received += chunk
            conn.sendall(command.encode() + b"\n")
            received = b""
            while b"(qemu) " not in received and time.monotonic() < deadline:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                received += chunk
        return received.decode(errors="replace")

    def kernel_boots(self) -> int:
        """How many times a kernel was loaded on this VM since it started (or resumed).

        Through GRUB, its own line (the GRUB image boots with quiet); through systemd-boot, which prints nothing
        on the serial console, the kernel's banner.
        """
        marker = KERNEL_BANNER if self.machine.uefi else GRUB_LOADING
        return self.serial_log.read_text(errors="replace").count(marker)

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
