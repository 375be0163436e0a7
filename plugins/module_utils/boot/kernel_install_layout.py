# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Which layout ``kernel-install add`` will use on a host, where its ``$BOOT`` is and which entry token it names.

``kernel-install`` writes a Type #1 boot entry only for ``layout=bls``; for ``other`` (and ``uki``) its
``90-loaderentry.install`` exits 0 without writing one, by design. Nothing in its exit code tells the two apart,
so the decision is taken here from the same files, in the same order, as the installed ``kernel-install`` takes
it. Two implementations exist and the rules differ; the installed file says which one runs:

* **the shell script**, systemd up to 253 (``src/kernel-install/kernel-install.in``; 252 is Debian 12's
  ``/usr/bin/kernel-install``, 252.38-1~deb12u1; 253 differs only in treating an ``uninitialized``
  ``/etc/machine-id`` as unset, which 252.38 has as well). Its ``$BOOT`` search looks for directories.
* **the C program**, systemd 254 and later (``src/kernel-install/kernel-install.c``; the entry token comes from
  ``src/shared/boot-entry.c``, the partitions from ``src/shared/find-esp.c``). Its ``$BOOT`` is a mounted
  XBOOTLDR or EFI system partition; from 256 ``install.conf`` also reads ``install.conf.d`` drop-ins
  (``src/shared/kernel-config.c``).

Every rule below names its source beside it. What a file tree cannot show is said where it matters: the C program
checks a partition's GPT type with blkid, read here from udev's database where the host has one.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

# The implementation the host runs: the script's templated version line, the C program's libsystemd-shared soname.
_SCRIPT_VERSION = re.compile(rb"kernel-install (\d+)")
_SHARED_LIBRARY = re.compile(rb"libsystemd-shared-(\d+)")
# Shell-style assignments as install.conf, machine-info and os-release hold them (one per line, optional quotes).
_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=(?:\"([^\"]*)\"|'([^']*)'|([^\s#]*))\s*(?:#.*)?$", re.M)
# GPT partition types (the Discoverable Partitions Specification), as udev's ID_PART_ENTRY_TYPE spells them.
ESP_TYPE = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
XBOOTLDR_TYPE = "bc13c2ff-59e6-4262-a352-b275fd6f7172"
# $BOOT candidates of the shell script (kernel-install.in up to 253: BOOT_ROOT_SEARCH="/efi /boot /boot/efi").
SHELL_BOOT_ROOTS = ("/efi", "/boot", "/boot/efi")
# Of the C program (find-esp.c, 254+: XBOOTLDR at /boot first, then an ESP at /efi, /boot or /boot/efi).
ESP_PATHS = ("/efi", "/boot", "/boot/efi")
# Where a mount is, as /proc/self/mountinfo says: file system type and GPT partition type (None: unknown).
Mount = tuple[str, "str | None"]


@dataclass
class Layout:
    """What ``kernel-install add`` will do: its layout, ``$BOOT``, entry token, and why (for messages)."""

    layout: str  # "bls" writes a Type #1 entry; "other", "uki" or any other name writes none
    boot_root: str
    token: str | None  # None: named after a machine ID kernel-install generates afresh on every run
    implementation: str  # "shell" (systemd up to 253) or "C" (254 and later)
    version: int | None
    reasons: list[str] = field(default_factory=list)

    @property
    def writes_entry(self) -> bool:
        return self.layout == "bls"

    def entry_names(self, release: str, tries: str | None = None) -> list[str]:
        """The entry 90-loaderentry.install writes: ``<token>-<release>.conf``, ``+<tries>`` with /etc/kernel/tries."""
        if not self.token:
            return []
        return [f"{self.token}-{release}+{tries}.conf" if tries else f"{self.token}-{release}.conf"]

    def why(self) -> str:
        return "; ".join(self.reasons)


def assignments(text: str | None) -> dict[str, str]:
    """``KEY=value`` lines (the last one of a key wins, as when the shell sources the file)."""
    found: dict[str, str] = {}
    for key, double, single, bare in _ASSIGNMENT.findall(text or ""):
        found[key] = double or single or bare
    return found


def implementation(reader: HostReader, tool: str) -> tuple[str, int | None]:
    """``("shell", version)`` for the script systemd shipped up to 253, ``("C", version)`` for 254 and later."""
    head = reader.read(tool, limit=4 * 1024 * 1024, record=False).data or b""
    if head.startswith(b"#!"):
        found = _SCRIPT_VERSION.search(head)
        return "shell", int(found.group(1)) if found else None
    found = _SHARED_LIBRARY.search(head)
    return "C", int(found.group(1)) if found else None


def first_line(reader: HostReader, path: str) -> str | None:
    """The first line of a file as ``read -r`` gives it (surrounding blanks dropped), or None when absent."""
    text = reader.read_text(path, record=False)
    if text is None:
        return None
    return text.split("\n", 1)[0].strip(" \t")


def machine_id(reader: HostReader, configured: str) -> str | None:
    """``/etc/machine-id`` unless set before; None where kernel-install would generate a random one.

    kernel-install.in 252-253: ``[ -s /etc/machine-id ]``, ``uninitialized`` is unset; kernel-install.c 254+
    (``id128_get_machine_at``) likewise treats an empty or ``uninitialized`` file as no machine ID.
    """
    if configured:
        return configured
    found = first_line(reader, "/etc/machine-id")
    return found if found and found != "uninitialized" else None


# ------------------------------------------------------------------------------------------ the shell script


def _shell_install_conf(reader: HostReader, env: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """kernel-install.in 252-253: ``$KERNEL_INSTALL_CONF_ROOT/install.conf``, else the first of ``/etc/kernel`` and
    ``/usr/lib/kernel`` that is a file, sourced as shell."""
    conf_root = env.get("KERNEL_INSTALL_CONF_ROOT", "")
    paths = [f"{conf_root}/install.conf"] if conf_root else ["/etc/kernel/install.conf", "/usr/lib/kernel/install.conf"]
    for path in paths:
        if reader.isfile(path):
            return path, assignments(reader.read_text(path, record=False))
    return None, {}


def _shell_tokens(reader: HostReader, env: Mapping[str, str], settings: dict, machine: str | None):
    """kernel-install.in 252-253: ``$ENTRY_TOKEN`` (install.conf, sourced after the environment is read, else the
    environment), else the first line of ``${KERNEL_INSTALL_CONF_ROOT:-/etc/kernel}/entry-token``: the token,
    searched for alone. Else no token yet and the candidates machine ID, ``IMAGE_ID`` and ``ID`` of
    ``/etc/os-release`` (only ``/etc``), ``Default``."""
    given = settings.get("ENTRY_TOKEN") or env.get("ENTRY_TOKEN")
    if not given:
        token_file = f"{env.get('KERNEL_INSTALL_CONF_ROOT') or '/etc/kernel'}/entry-token"
        given = first_line(reader, token_file) if reader.isfile(token_file) else None
    if given:
        return given, [given]
    os_release = assignments(reader.read_text("/etc/os-release", record=False))
    found = [machine or "", os_release.get("IMAGE_ID", ""), os_release.get("ID", ""), "Default"]
    return None, [token for token in found if token]


def _shell_layout(reader: HostReader, env: Mapping[str, str], is_mount: Callable[[str], bool]) -> Layout:
    conf, settings = _shell_install_conf(reader, env)
    # The environment's BOOT_ROOT and MACHINE_ID win over install.conf's (252's _BOOT_ROOT_SAVED, _MACHINE_ID_SAVED).
    boot_root = env.get("BOOT_ROOT") or settings.get("BOOT_ROOT", "")
    configured_id = env.get("MACHINE_ID") or settings.get("MACHINE_ID", "")
    if not configured_id and reader.isfile("/etc/machine-info"):
        configured_id = assignments(reader.read_text("/etc/machine-info", record=False)).get(
            "KERNEL_INSTALL_MACHINE_ID", ""
        )
    machine = machine_id(reader, configured_id)
    token, candidates = _shell_tokens(reader, env, settings, machine)
    reasons: list[str] = []
    found_root = ""
    # The search: in each candidate root, a directory named after a token, else loader/entries; the inner loop
    # stops at the first root holding loader/entries even when a later token's directory exists there too.
    for root in [boot_root] if boot_root else SHELL_BOOT_ROOTS:
        hit = None
        for candidate in candidates:
            if reader.isdir(f"{root}/{candidate}"):
                hit, token = f"{root}/{candidate}/", token or candidate
                break
            if reader.isdir(f"{root}/loader/entries"):
                hit = f"{root}/loader/entries/"
                break
        if hit:
            found_root = root
            reasons.append(f"$BOOT is {root} ({hit} exists)")
            break
    if not found_root:
        mounted = [root for root in ("/efi", "/boot/efi") if is_mount(root)]
        found_root = boot_root or (mounted[0] if mounted else "/boot")
        if boot_root:
            why = "set"
        elif mounted:
            why = "a mount point"
        else:
            why = "the fallback: no candidate holds a token directory or loader/entries"
        reasons.append(f"$BOOT is {found_root} ({why})")
    if token is None and machine:
        token = machine  # "No entry-token candidate matched, using ... from machine-id"
    layout = settings.get("layout", "")
    if layout:
        reasons.append(f"{conf} sets layout={layout}")
    else:
        layout = _layout_from_boot(reader, found_root, token, reasons)
    return Layout(layout, found_root, token, "shell", None, reasons)


def _layout_from_boot(reader: HostReader, boot_root: str, token: str | None, reasons: list[str]) -> str:
    """No layout configured: ``$BOOT/loader/entries.srel`` saying ``type1`` means bls and any other content other;
    without that file, an entry-token directory in ``$BOOT`` means bls; else other. The same in kernel-install.in
    252-253 and in kernel-install.c 254+ (``context_ensure_layout``; 254+ first makes a UKI image ``uki``)."""
    srel = f"{boot_root}/loader/entries.srel"
    if reader.exists(srel):
        content = first_line(reader, srel) or ""
        layout = "bls" if content == "type1" else "other"
        reasons.append(f"{srel} says {content!r}, so layout={layout}")
        return layout
    if token and reader.isdir(f"{boot_root}/{token}"):
        reasons.append(f"no {srel}, but the entry-token directory {boot_root}/{token}/ exists, so layout=bls")
        return "bls"
    reasons.append(f"neither {srel} nor an entry-token directory {boot_root}/{token or '<token>'}/, so layout=other")
    return "other"


# ------------------------------------------------------------------------------------------ the C program

# kernel-image.c 254+ (is_uki): a PE image with these three sections is a unified kernel image.
UKI_SECTIONS = (b".osrel", b".linux", b".initrd")


def is_uki(reader: HostReader, image: str | None) -> bool:
    """Whether the kernel image is a UKI, read from its PE section table as kernel-image.c reads it."""
    data = reader.read(image, limit=64 * 1024, record=False).data or b"" if image else b""
    if len(data) < 0x40 or data[:2] != b"MZ":
        return False
    pe = struct.unpack_from("<I", data, 0x3C)[0]
    if data[pe : pe + 4] != b"PE\0\0" or len(data) < pe + 24:
        return False
    count, optional = struct.unpack_from("<H", data, pe + 6)[0], struct.unpack_from("<H", data, pe + 20)[0]
    table = pe + 24 + optional
    names = {
        data[table + 40 * i : table + 40 * i + 8].rstrip(b"\0") for i in range(count) if table + 40 * i + 8 <= len(data)
    }
    return all(name in names for name in UKI_SECTIONS)


def _c_install_conf(reader: HostReader, env: Mapping[str, str], version: int | None) -> tuple[str | None, dict]:
    """kernel-install.c 254-255: the first of ``$KERNEL_INSTALL_CONF_ROOT``, ``/etc/kernel`` and ``/usr/lib/kernel``
    holding ``install.conf``, read as an environment file. 256+ (kernel-config.c ``load_kernel_install_conf``):
    ``$KERNEL_INSTALL_CONF_ROOT/install.conf`` and its ``install.conf.d``, or else the first of ``/etc``, ``/run``,
    ``/usr/local/lib`` and ``/usr/lib`` ``kernel/install.conf``, then every ``install.conf.d/*.conf`` of those
    directories by name (the first directory's file of a name wins); later settings override earlier ones."""
    conf_root = env.get("KERNEL_INSTALL_CONF_ROOT", "")
    if version is not None and version < 256:
        dirs = [*([conf_root] if conf_root else []), "/etc/kernel", "/usr/lib/kernel"]
        main = next((f"{d}/install.conf" for d in dirs if reader.isfile(f"{d}/install.conf")), None)
        return main, assignments(reader.read_text(main, record=False)) if main else {}
    dirs = [conf_root] if conf_root else ["/etc/kernel", "/run/kernel", "/usr/local/lib/kernel", "/usr/lib/kernel"]
    main = next((f"{d}/install.conf" for d in dirs if reader.isfile(f"{d}/install.conf")), None)
    settings = assignments(reader.read_text(main, record=False)) if main else {}
    dropins: dict[str, str] = {}
    for directory in dirs:
        for name in reader.listdir(f"{directory}/install.conf.d") or []:
            if name.endswith(".conf"):
                dropins.setdefault(name, f"{directory}/install.conf.d/{name}")
    for name in sorted(dropins):
        settings.update(assignments(reader.read_text(dropins[name], record=False)))
    return (main or (dropins[sorted(dropins)[-1]] if dropins else None)), settings


def _c_boot_root(env: Mapping[str, str], mount_of: Callable[[str], Mount | None], reasons: list[str]) -> str:
    """find-esp.c 254+: an XBOOTLDR partition mounted at ``$SYSTEMD_XBOOTLDR_PATH`` or ``/boot``, else an ESP (a FAT
    file system) mounted at ``$SYSTEMD_ESP_PATH`` or the first of ``/efi``, ``/boot``, ``/boot/efi``, else ``/boot``.
    The partition type is blkid's there; here it is udev's, and a FAT mount of unknown type counts as an ESP. Inside
    a container find-esp.c skips the partition-type checks; that is not detected here."""
    xbootldr = env.get("SYSTEMD_XBOOTLDR_PATH") or "/boot"
    mount = mount_of(xbootldr)
    if mount and (mount[1] == XBOOTLDR_TYPE or env.get("SYSTEMD_RELAX_XBOOTLDR_CHECKS") == "1"):
        reasons.append(f"$BOOT is {xbootldr} (a mounted XBOOTLDR partition)")
        return xbootldr
    for path in [env["SYSTEMD_ESP_PATH"]] if env.get("SYSTEMD_ESP_PATH") else ESP_PATHS:
        mount = mount_of(path)
        relaxed = env.get("SYSTEMD_RELAX_ESP_CHECKS") == "1"
        if mount and (relaxed or (mount[0] == "vfat" and mount[1] in (None, ESP_TYPE))):
            reasons.append(f"$BOOT is {path} (a mounted EFI system partition)")
            return path
    reasons.append("$BOOT is /boot (the fallback: no XBOOTLDR or EFI system partition is mounted)")
    return "/boot"


def _c_token(reader: HostReader, conf_root: str, machine: str | None, reasons: list[str]) -> str | None:
    """boot-entry.c 254+: ``<conf root>/entry-token``, else the machine ID, else ``IMAGE_ID`` or ``ID`` of
    os-release (``/etc``, else ``/usr/lib``), else a random machine ID."""
    configured = first_line(reader, f"{conf_root}/entry-token")
    if configured:
        return configured
    if machine:
        return machine
    os_release = reader.read_text("/etc/os-release", record=False)
    if os_release is None:
        os_release = reader.read_text("/usr/lib/os-release", record=False)
    found = assignments(os_release)
    token = found.get("IMAGE_ID") or found.get("ID") or None
    if token is None:
        reasons.append("no machine ID and no IMAGE_ID= or ID= in os-release: the entry is named after a random ID")
    return token


def _c_layout(reader: HostReader, env: Mapping[str, str], version, mount_of, image: str | None) -> Layout:
    reasons: list[str] = []
    conf, settings = _c_install_conf(reader, env, version)
    # context_load_environment, then install.conf, then /etc/machine-info: the first to set a value keeps it.
    boot_root = env.get("BOOT_ROOT") or settings.get("BOOT_ROOT", "")
    configured_id = env.get("MACHINE_ID") or settings.get("MACHINE_ID", "")
    layout, source = settings.get("layout", ""), conf
    if env.get("KERNEL_INSTALL_READ_MACHINE_INFO", "1") not in ("0", "no", "false", "off"):
        info = assignments(reader.read_text("/etc/machine-info", record=False))
        configured_id = configured_id or info.get("KERNEL_INSTALL_MACHINE_ID", "")
        if not layout and info.get("KERNEL_INSTALL_LAYOUT"):
            layout, source = info["KERNEL_INSTALL_LAYOUT"], "/etc/machine-info (KERNEL_INSTALL_LAYOUT)"
    machine = machine_id(reader, configured_id)
    if boot_root:
        reasons.append(f"$BOOT is {boot_root} (set)")
    else:
        boot_root = _c_boot_root(env, mount_of, reasons)
    token = _c_token(reader, env.get("KERNEL_INSTALL_CONF_ROOT") or "/etc/kernel", machine, reasons)
    if layout and layout != "auto":
        reasons.append(f"{source} sets layout={layout}")
    elif is_uki(reader, image):
        layout = "uki"  # context_ensure_layout: a UKI image before anything in $BOOT
        reasons.append(f"{image} is a unified kernel image, so layout=uki")
    else:
        layout = _layout_from_boot(reader, boot_root, token, reasons)
    return Layout(layout, boot_root, token, "C", version, reasons)


# ------------------------------------------------------------------------------------------ mounts and entry point


def host_mounts(reader: HostReader) -> Callable[[str], Mount | None]:
    """A lookup of what is mounted at a host path: ``/proc/self/mountinfo`` (file system type, device), and the
    GPT partition type from the host's udev database (``/run/udev/data/b<major>:<minor>``) where it has one."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    mounts: dict[str, tuple[str, str]] = {}
    for line in lines:
        fields = line.split()
        if " - " in line and len(fields) > 4:
            after = line.split(" - ", 1)[1].split()
            mounts[fields[4].replace("\\040", " ")] = (after[0] if after else "", fields[2])
    # mountinfo names real paths: the host's root by its real path, the live root as "/" (read as is).
    root = "/" if reader.is_live else os.path.realpath(reader.host_root)

    def mount_of(path: str) -> Mount | None:
        real = os.path.realpath(os.path.join(root, path.lstrip("/")))
        if real not in mounts or (not reader.is_live and not real.startswith(root + "/")):
            return None
        fstype, device = mounts[real]
        return fstype, partition_type(reader, device)

    return mount_of


def partition_type(reader: HostReader, device: str) -> str | None:
    """The GPT partition type udev recorded for a block device (``major:minor``), lower case, or None."""
    text = reader.read_text(f"/run/udev/data/b{device}", record=False) or ""
    found = re.search(r"^E:ID_PART_ENTRY_TYPE=(\S+)$", text, re.M)
    return found.group(1).lower() if found else None


def detect(
    reader: HostReader,
    tool: str,
    env: Mapping[str, str],
    mount_of: Callable[[str], Mount | None] | None = None,
    image: str | None = None,
) -> Layout:
    """The layout, ``$BOOT`` and entry token the host's ``kernel-install`` at ``tool`` will use for ``image``."""
    mount_of = mount_of or host_mounts(reader)
    kind, version = implementation(reader, tool)
    bypass = env.get("KERNEL_INSTALL_BYPASS", "")
    # kernel-install.in: [ "$KERNEL_INSTALL_BYPASS" = "1" ]; kernel-install.c: getenv_bool (1, yes, y, true, t, on).
    if bypass == "1" or (kind == "C" and bypass.lower() in ("yes", "y", "true", "t", "on")):
        return Layout(
            "bypassed", "", None, kind, version, ["KERNEL_INSTALL_BYPASS is set: kernel-install does nothing"]
        )
    if kind == "shell":
        result = _shell_layout(reader, env, lambda path: mount_of(path) is not None)
        result.version = version
        return result
    return _c_layout(reader, env, version, mount_of, image)
