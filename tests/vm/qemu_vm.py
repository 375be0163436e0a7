"""A Debian 12 VM under QEMU's software emulation (TCG), reachable over SSH on a loopback port.

The disk is a copy-on-write overlay over the image ``scripts/vm-image.sh`` caches, so every VM starts from the
same installed system and the image is never written. It boots through SeaBIOS and the GRUB installed in the
image: a reboot the roles ask for goes through the real ``grub.cfg`` that ``update-grub`` wrote, never through
QEMU's ``-kernel``. ``Machine(uefi=True)`` boots the systemd-boot image through OVMF and the loader entry
``kernel-install`` wrote instead. Waits are generous and never asserted on: an emulated CPU on a busy machine is slow.

The first boot of each machine kind is made once, through the boot loader like every other, and kept as a QEMU
snapshot (``savevm``; a UEFI machine's variable store with it) beside the image; later VMs of that kind resume it
(``-loadvm``) in seconds instead of booting for a minute or more. No test measures that first boot: every reboot a
test asserts on is a real one through the boot loader.
A machine QEMU cannot snapshot (its AMD IOMMU cannot migrate) may start with ``start(direct_kernel_args=...)``:
its first boot loads the kernel and initrd that the image's ``grub.cfg`` names, with QEMU's ``-kernel`` and
that entry's own command line plus the given arguments; from its first reboot on, the VM boots from the same disk
and port through SeaBIOS and GRUB, as every other.

Every reset the guest asks for ends QEMU (``-no-reboot``) and the harness starts it again on the same disk, port,
firmware variables and serial log: the next boot goes through the firmware and the boot loader like a power cycle.
Inside one TCG process each boot after a reset was slower than the one before (QEMU keeps what it translated for
the last boot): from GRUB's "Loading initial ramdisk" to the kernel's first timestamp took 10-14 s after the first
reset and 34-42 s after the second (a quiet 2-core host, 2026-11-28).

The harness's own commands share one SSH connection per boot (OpenSSH's ControlMaster): an SSH handshake costs the
emulated CPU seconds. Ansible keeps its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
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
# What the kernel prints (pr_emerg, so also under quiet) when the guest powers off: the one clean QEMU exit that is
# not a reset to boot again from.
POWER_DOWN = "reboot: Power down"
# The image's partition table: the ext4 root of the GRUB variant is its first partition (scripts/vm-image.sh).
SECTOR = 512
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
    # Started once the VM is up: starts QEMU again at each guest reset (-no-reboot), until stop().
    _reset_watch: threading.Thread | None = None
    _stopping: bool = False
    # Why QEMU ended for good (a crash, a power-off), set by the reset watch for the next wait to raise.
    _ended: str | None = None

    @property
    def key(self) -> Path:
        return self.image_dir / "id_ed25519"

    @property
    def serial_log(self) -> Path:
        return self.workdir / "serial.log"

    @property
    def monitor_socket(self) -> Path:
        # A UNIX socket path has at most 107 bytes: a short one under /tmp, unique per VM.
        return Path(tempfile.gettempdir()) / f"tee-vm-{self._digest}.monitor"

    @property
    def control_path(self) -> Path:
        """The harness's shared SSH connection, per QEMU launch (the port is new each launch)."""
        return Path(tempfile.gettempdir()) / f"tee-vm-{self._digest}-{self.port}.ssh"

    @property
    def _digest(self) -> str:
        return hashlib.sha256(str(self.workdir).encode()).hexdigest()[:16]

    def qemu_command(self) -> list[str]:
        overlay = self.workdir / "disk.qcow2"
        command = [
            "qemu-system-x86_64",
            # kernel-irqchip=split: an emulated IOMMU wants the IOAPIC in QEMU (under TCG it always is; the
            # option keeps the line valid where the same command runs with KVM).
            # sata=off: q35's AHCI controller, which no test uses (the disk is virtio) and which OVMF sets up; its
            # state failed to restore from a UEFI machine's snapshot ("Failed to load ich9_ahci:ahci", QEMU 7.2).
            "-machine",
            "q35,accel=tcg,kernel-irqchip=split,sata=off",
            "-cpu",
            f"qemu64,vendor={self.machine.cpu_vendor}",
            "-smp",
            "1",
            "-m",
            "1024",
            "-nodefaults",
            "-display",
            "none",
            # Appended, not truncated, by each QEMU the reboots start: one log of every boot of this VM.
            "-chardev",
            f"file,id=serial0,path={self.serial_log},append=on",
            "-serial",
            "chardev:serial0",
            # A guest reset ends this QEMU; the reset watch starts the next (see the module's docstring).
            "-no-reboot",
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
                # The variable store as qcow2: savevm keeps the firmware's variables with the disk (it refuses raw).
                "-drive",
                f"if=pflash,format=qcow2,unit=1,file={self.uefi_vars}",
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

    @property
    def uefi_vars(self) -> Path:
        return self.workdir / "OVMF_VARS.qcow2"

    def snapshot_path(self) -> Path:
        """Where the first boot of this machine kind is kept: beside the image, keyed by what QEMU emulates."""
        varying = (str(self.workdir), str(self.monitor_socket), "hostfwd")
        emulated = [arg for arg in self.qemu_command() if not any(part in arg for part in varying)]
        key = hashlib.sha256("\0".join(emulated).encode()).hexdigest()[:12]
        return self.image_dir / "snapshots" / f"{key}.qcow2"

    def start(self, *, direct_kernel_args: tuple[str, ...] | None = None) -> None:
        """Resume this machine kind's booted snapshot; without one, boot through GRUB and try to keep the boot.

        With ``direct_kernel_args``, boot the kernel of the image's first GRUB entry directly instead (no snapshot),
        with that entry's command line and these arguments where ``GRUB_CMDLINE_LINUX`` ends; the guest's first
        reboot goes through GRUB.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.machine.uefi:
            subprocess.run(
                ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(OVMF_VARS), str(self.uefi_vars)],
                check=True,
                timeout=60,
            )
        overlay = self.workdir / "disk.qcow2"
        snapshot = self.snapshot_path()
        if direct_kernel_args is not None:
            self._create_overlay(overlay)
            self._launch(*self._direct_kernel(direct_kernel_args))
            self._watch_resets()
            self.wait_for_ssh()
            return
        if snapshot.is_file() and not self._snapshot_usable(snapshot):
            # Made beside an image that has since moved (a cache directory renamed or copied): QEMU cannot open it.
            snapshot.unlink()
        if snapshot.is_file():
            # A copy, not an overlay: QEMU loads only the snapshots of the image it writes to.
            self._copy_snapshot(snapshot, overlay)
            self._launch("-loadvm", SNAPSHOT)
            self._watch_resets()
            self.wait_for_ssh()
            return
        self._create_overlay(overlay)
        self._launch()
        self.wait_for_ssh()
        if self._save_snapshot(snapshot):
            self._end_qemu()
            self.serial_log.rename(self.workdir / "serial-first-boot.log")
            self._copy_snapshot(snapshot, overlay)
            self._launch("-loadvm", SNAPSHOT)
            self.wait_for_ssh()
        self._watch_resets()

    @staticmethod
    def _vars_of(snapshot: Path) -> Path:
        """A UEFI machine's variable store at the snapshot, kept beside its disk (savevm snapshots both)."""
        return snapshot.with_name(f"{snapshot.stem}-vars.qcow2")

    def _copy_snapshot(self, snapshot: Path, overlay: Path) -> None:
        shutil.copyfile(snapshot, overlay)
        if self.machine.uefi:
            shutil.copyfile(self._vars_of(snapshot), self.uefi_vars)

    def _snapshot_usable(self, snapshot: Path) -> bool:
        if self.machine.uefi and not self._vars_of(snapshot).is_file():
            return False
        return self._snapshot_backed_by_this_image(snapshot)

    def _snapshot_backed_by_this_image(self, snapshot: Path) -> bool:
        """Whether ``snapshot``'s backing file is this image's disk (qemu-img records it as an absolute path)."""
        info = subprocess.run(
            ["qemu-img", "info", "--output=json", "-U", str(snapshot)], capture_output=True, text=True, check=False
        )
        if info.returncode != 0:
            return False
        described = json.loads(info.stdout)
        backing = described.get("full-backing-filename") or described.get("backing-filename")
        return backing is not None and Path(backing).resolve() == (self.image_dir / "disk.raw").resolve()

    def _create_overlay(self, overlay: Path) -> None:
        backing = str(self.image_dir / "disk.raw")
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", backing, str(overlay)],
            check=True,
            timeout=60,
        )

    def _direct_kernel(self, extra: tuple[str, ...]) -> list[str]:
        """QEMU's -kernel/-initrd/-append for the first entry of the image's grub.cfg, read from the disk offline.

        The kernel line GRUB makes is ``BOOT_IMAGE=<path> root=... ro <GRUB_CMDLINE_LINUX> <..._DEFAULT>``; the
        image's ``GRUB_CMDLINE_LINUX_DEFAULT`` is ``quiet``, so ``extra`` goes before it, where a drop-in that
        appends to ``GRUB_CMDLINE_LINUX`` puts its arguments. The tests compare the line with the one
        ``update-grub`` writes in the guest.
        """
        disk = self.image_dir / "disk.raw"
        table = subprocess.run(["sfdisk", "--json", str(disk)], capture_output=True, text=True, check=True, timeout=60)
        root_fs = f"{disk}?offset={json.loads(table.stdout)['partitiontable']['partitions'][0]['start'] * SECTOR}"
        grub_cfg = self._debugfs(root_fs, "cat /boot/grub/grub.cfg")
        entry = next((line.split() for line in grub_cfg.splitlines() if line.split()[:1] == ["linux"]), None)
        initrd = next((line.split() for line in grub_cfg.splitlines() if line.split()[:1] == ["initrd"]), None)
        if not entry or not initrd:
            raise RuntimeError(f"no linux/initrd line in the image's grub.cfg:\n{grub_cfg}")
        kernel, args = entry[1], entry[2:]
        cut = len(args) - 1 if args[-1:] == ["quiet"] else len(args)
        line = [f"BOOT_IMAGE={kernel}", *args[:cut], *extra, *args[cut:]]
        for source, name in ((kernel, "vmlinuz"), (initrd[1], "initrd.img")):
            self._debugfs(root_fs, f"dump {source} {self.workdir / name}")
        kernel_file, initrd_file = self.workdir / "vmlinuz", self.workdir / "initrd.img"
        return ["-kernel", str(kernel_file), "-initrd", str(initrd_file), "-append", " ".join(line)]

    @staticmethod
    def _debugfs(file_system: str, request: str) -> str:
        done = subprocess.run(
            ["debugfs", "-R", request, file_system], capture_output=True, text=True, check=False, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"debugfs -R {request!r} {file_system} failed: {done.stderr}")
        return done.stdout

    def _watch_resets(self) -> None:
        self._reset_watch = threading.Thread(target=self._relaunch_at_each_reset, daemon=True)
        self._reset_watch.start()

    def _relaunch_at_each_reset(self) -> None:
        """At each guest reset QEMU exits (-no-reboot): start it again from the disk, on the same port (Ansible's
        reboot waits for the host at the address it knows). The first boot's -kernel or -loadvm is not repeated:
        every later boot goes through the firmware and the boot loader. A crash or a power-off ends the watch."""
        while True:
            process = self.process
            assert process is not None
            returncode = process.wait()
            if self._stopping:
                return
            if returncode != 0 or POWER_DOWN in self.console_tail(5):
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                self._ended = f"QEMU exited with {returncode}: {error}"
                return
            self.drop_ssh_connection()
            self._launch(port=self.port)
            if self._stopping:  # stop() ended the old QEMU while this one started
                self._end_qemu()

    def _save_snapshot(self, snapshot: Path) -> bool:
        """Keep the running first boot as ``snapshot``; False where QEMU refuses (its AMD IOMMU cannot migrate)."""
        self.ssh("sync")
        self.drop_ssh_connection()  # the snapshot keeps no session of this harness
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
        if self.machine.uefi:
            # The variables first: a published disk snapshot means its variables are there too.
            partial_vars = snapshot.with_name(f".{snapshot.stem}-vars.{os.getpid()}")
            shutil.copyfile(self.uefi_vars, partial_vars)
            os.replace(partial_vars, self._vars_of(snapshot))
        shutil.copyfile(self.workdir / "disk.qcow2", partial)
        os.replace(partial, snapshot)
        return True

    def _launch(self, *extra: str, port: int = 0) -> None:
        self.port = port or free_loopback_port()
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
        """Wait until sshd answers: cheap banner probes first (no key exchange), then one real login."""
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            self._raise_if_exited()
            if self._sshd_banner() and self.ssh("true", check=False, timeout=60).returncode == 0:
                self.boots.append(time.monotonic() - started)
                return
            time.sleep(1)
        raise TimeoutError(f"no SSH on 127.0.0.1:{self.port} after {timeout} s; serial console:\n{self.console_tail()}")

    def _sshd_banner(self) -> bool:
        """Whether sshd sends its banner: QEMU accepts the connection at once and forwards it when the guest can
        take it, so a guest without network or sshd yet shows as a reset or as silence (a short wait, retried)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
                conn.settimeout(10)
                return conn.recv(8).startswith(b"SSH-")
        except OSError:
            return False

    def _raise_if_exited(self) -> None:
        if "Kernel panic - not syncing" in self.console_tail(200):
            raise RuntimeError(f"the guest kernel panicked:\n{self.console_tail()}")
        if self._ended is not None:
            raise RuntimeError(f"{self._ended}\n{self.console_tail()}")
        if self._reset_watch is not None and self._reset_watch.is_alive():
            return  # QEMU may have ended at a reset: the watch starts the next boot
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
        shared = ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}", "-o", "ControlPersist=600"]
        target = ["-i", str(self.key), "-p", str(self.port), "root@127.0.0.1"]
        return ["ssh", *shlex.split(SSH_OPTIONS), *shared, *target, command]

    def drop_ssh_connection(self) -> None:
        """End the harness's shared SSH connection (before a reboot: a connection to the old boot must not serve
        the next command)."""
        if self.control_path.exists():
            subprocess.run(
                [*self.ssh_command("true")[:-2], "-O", "exit", "root@127.0.0.1"],
                capture_output=True,
                timeout=30,
                check=False,
            )

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

    def kernel_cmdline(self) -> str:
        """The running kernel's /proc/cmdline, also kept in ``cmdlines.txt`` once per boot: the evidence the docs quote
        (the image boots with quiet, so the serial console does not show the kernel's own "Command line:")."""
        boot, line = self.read("cat /proc/sys/kernel/random/boot_id /proc/cmdline").split("\n", 1)
        line = line.strip()
        record = self.workdir / "cmdlines.txt"
        seen = record.read_text() if record.exists() else ""
        if boot not in seen:
            with record.open("a") as out:
                out.write(f"{boot} {line}\n")
        return line

    def reboot(self) -> None:
        """Reboot from inside (as an operator would) and wait until a new boot answers on SSH."""
        before = self.boot_id()
        self.ssh("systemctl reboot", check=False, timeout=60)
        self.drop_ssh_connection()
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(2)
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
        self._stopping = True
        self.drop_ssh_connection()
        self._end_qemu()
        if self._reset_watch is not None:
            self._reset_watch.join(timeout=120)
            self._end_qemu()  # a relaunch that was under way when the test ended

    def _end_qemu(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
