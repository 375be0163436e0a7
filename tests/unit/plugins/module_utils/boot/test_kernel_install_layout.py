"""kernel-install's layout decision, branch by branch, on trees built from its rules.

Each tree is what a host holds; the expected layout, $BOOT and entry token are what systemd's kernel-install takes
from it: the shell script up to 253 (252 is Debian 12's /usr/bin/kernel-install) and the C program from 254
(kernel-install.c, boot-entry.c, find-esp.c, kernel-config.c). Mount points cannot be made in a test tree, so the
mounts are given as kernel-install would find them (file system type, GPT partition type).
"""

from __future__ import annotations

import re
import struct
import subprocess

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.boot import kernel_install_layout as kil
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

MID = "0123456789abcdef0123456789abcdef"
SHELL = b"#!/bin/sh\n# SPDX-License-Identifier: LGPL-2.1-or-later\necho 'kernel-install 252 (252.38-1~deb12u1)'\n"
TOOL = "/usr/bin/kernel-install"


def c_program(version: int) -> bytes:
    return b"\x7fELF\x02\x01\x01" + b"\0" * 64 + f"libsystemd-shared-{version}.so\0".encode()


def build(tmp_path, files: dict, dirs=(), tool: bytes = SHELL) -> HostReader:
    """A host tree: ``files`` (path: text), ``dirs`` (empty directories), the kernel-install of a version."""
    base = {"/etc/machine-id": MID + "\n", "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12"\nID=debian\n'}
    for path, text in {**base, **files}.items():
        if text is None:
            continue
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(text if isinstance(text, bytes) else text.encode())
    for path in dirs:
        (tmp_path / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (tmp_path / TOOL.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / TOOL.lstrip("/")).write_bytes(tool)
    return HostReader(str(tmp_path))


def detect(reader, env=None, mounts=None, image=None):
    mounts = mounts or {}
    found = kil.detect(reader, TOOL, env or {}, mount_of=lambda path: mounts.get(path), image=image)
    return found.layout, found.boot_root, found.token


# ------------------------------------------------------------------------------------------ the shell script (<=253)

SHELL_CASES = {
    # The VM image: bootctl install --entry-token=literal:debian --make-entry-directory=yes on the ESP at /boot/efi.
    "debian-vm-image": (
        {"/etc/kernel/entry-token": "debian\n", "/boot/efi/loader/entries.srel": "type1\n"},
        ["/boot/efi/debian", "/boot/efi/loader/entries", "/boot/grub"],
        ("bls", "/boot/efi", "debian"),
    ),
    "no-boot-holds-type1": ({}, ["/boot"], ("other", "/boot", MID)),
    "loader-entries-alone-is-not-bls": ({}, ["/boot/efi/loader/entries"], ("other", "/boot/efi", MID)),
    "machine-id-directory": ({}, ["/boot/" + MID], ("bls", "/boot", MID)),
    "os-release-id-directory": ({}, ["/efi/debian"], ("bls", "/efi", "debian")),
    "image-id-before-id": (
        {"/etc/os-release": "ID=fedora\nIMAGE_ID=tee-node\n"},
        ["/boot/efi/tee-node", "/boot/efi/fedora"],
        ("bls", "/boot/efi", "tee-node"),
    ),
    "default-directory": ({"/etc/os-release": "NAME=x\n"}, ["/boot/Default"], ("bls", "/boot", "Default")),
    # The inner loop stops at loader/entries after the first candidate: the ID directory is never reached.
    "loader-entries-stops-the-token-search": (
        {},
        ["/boot/loader/entries", "/boot/debian"],
        ("other", "/boot", MID),
    ),
    "srel-type1": ({"/boot/loader/entries.srel": "type1\n"}, ["/boot/loader/entries"], ("bls", "/boot", MID)),
    "srel-other-beats-token-directory": (
        {"/boot/loader/entries.srel": "something-else\n"},
        ["/boot/" + MID],
        ("other", "/boot", MID),
    ),
    "efi-searched-first": ({}, ["/efi/loader/entries", "/boot/" + MID], ("other", "/efi", MID)),
    "entry-token-file-is-searched-alone": (
        {"/etc/kernel/entry-token": "custom\n"},
        ["/boot/" + MID, "/boot/efi/custom"],
        ("bls", "/boot/efi", "custom"),
    ),
    "entry-token-file-without-directory": (
        {"/etc/kernel/entry-token": "custom\n", "/boot/loader/entries.srel": "type1\n"},
        ["/boot/loader/entries"],
        ("bls", "/boot", "custom"),
    ),
    "install-conf-layout": (
        {"/etc/kernel/install.conf": "layout=other\n"},
        ["/boot/" + MID],
        ("other", "/boot", MID),
    ),
    "etc-install-conf-before-usr-lib": (
        {"/etc/kernel/install.conf": "# nothing set\n", "/usr/lib/kernel/install.conf": "layout=uki\n"},
        ["/boot/" + MID],
        ("bls", "/boot", MID),
    ),
    "usr-lib-install-conf": (
        {"/usr/lib/kernel/install.conf": 'layout="uki"\n'},
        ["/boot/" + MID],
        ("uki", "/boot", MID),
    ),
    "install-conf-boot-root": (
        {"/etc/kernel/install.conf": "BOOT_ROOT=/srv/esp\n", "/srv/esp/loader/entries.srel": "type1\n"},
        ["/boot/efi/loader/entries"],
        ("bls", "/srv/esp", MID),
    ),
    "uninitialized-machine-id": (
        {"/etc/machine-id": "uninitialized\n", "/boot/loader/entries.srel": "type1\n"},
        ["/boot/loader/entries"],
        ("bls", "/boot", None),
    ),
    "machine-info-id": (
        {"/etc/machine-info": "KERNEL_INSTALL_MACHINE_ID=ffffffffffffffffffffffffffffffff\n"},
        ["/boot/ffffffffffffffffffffffffffffffff"],
        ("bls", "/boot", "ffffffffffffffffffffffffffffffff"),
    ),
    # The script resets layout= before sourcing install.conf: KERNEL_INSTALL_LAYOUT in machine-info is not read.
    "machine-info-layout-ignored": (
        {"/etc/machine-info": "KERNEL_INSTALL_LAYOUT=bls\n"},
        ["/boot"],
        ("other", "/boot", MID),
    ),
}


@pytest.mark.parametrize("case", sorted(SHELL_CASES))
def test_shell_script_decides_from_directories(tmp_path, case):
    files, dirs, expected = SHELL_CASES[case]
    assert detect(build(tmp_path, files, dirs)) == expected


def test_shell_script_takes_a_mount_point_when_no_directory_matches(tmp_path):
    reader = build(tmp_path, {"/boot/efi/loader/entries.srel": "type1\n"}, ["/boot/efi", "/efi"])
    assert detect(reader, mounts={"/boot/efi": ("vfat", None)}) == ("bls", "/boot/efi", MID)
    assert detect(reader, mounts={"/efi": ("ext4", None), "/boot/efi": ("vfat", None)})[1] == "/efi"
    assert detect(reader) == ("other", "/boot", MID)


def test_shell_script_environment(tmp_path):
    reader = build(
        tmp_path,
        {"/etc/kernel/install.conf": "BOOT_ROOT=/srv/esp\n", "/conf/install.conf": "layout=bls\n"},
        ["/boot/" + MID, "/srv/esp", "/mnt/esp/" + MID],
    )
    # The environment's BOOT_ROOT wins over install.conf's; KERNEL_INSTALL_CONF_ROOT replaces /etc/kernel.
    assert detect(reader, env={"BOOT_ROOT": "/mnt/esp"}) == ("bls", "/mnt/esp", MID)
    assert detect(reader) == ("other", "/srv/esp", MID)
    assert detect(reader, env={"KERNEL_INSTALL_CONF_ROOT": "/conf"}) == ("bls", "/boot", MID)
    assert detect(reader, env={"ENTRY_TOKEN": "x", "BOOT_ROOT": "/boot"}) == ("other", "/boot", "x")
    # KERNEL_INSTALL_LAYOUT in the environment is overwritten by the script's own (252: export ...="$layout").
    assert detect(reader, env={"KERNEL_INSTALL_LAYOUT": "bls"})[0] == "other"
    assert detect(reader, env={"KERNEL_INSTALL_BYPASS": "1"})[0] == "bypassed"
    assert detect(reader, env={"KERNEL_INSTALL_BYPASS": "yes"})[0] == "other"  # the script compares with "1"


def test_the_script_and_its_version_are_recognized(tmp_path):
    reader = build(tmp_path, {}, ["/boot"])
    assert kil.implementation(reader, TOOL) == ("shell", 252)
    reader = build(tmp_path, {}, ["/boot"], tool=c_program(256))
    assert kil.implementation(reader, TOOL) == ("C", 256)


# ------------------------------------------------------------------------------------------ the C program (254+)

ESP = ("vfat", kil.ESP_TYPE)


def test_c_program_boot_root_is_a_mounted_partition_not_a_directory(tmp_path):
    dirs = ["/boot/loader/entries", "/boot/efi/loader/entries", "/efi"]
    reader = build(tmp_path, {"/boot/efi/loader/entries.srel": "type1\n"}, dirs, tool=c_program(255))
    assert detect(reader) == ("other", "/boot", MID)  # no partition mounted: /boot, which says nothing
    assert detect(reader, mounts={"/boot/efi": ESP}) == ("bls", "/boot/efi", MID)
    assert detect(reader, mounts={"/boot/efi": ("vfat", None)})[1] == "/boot/efi"  # type unknown: FAT counts
    assert detect(reader, mounts={"/boot/efi": ("vfat", "0fc63daf-8483-4772-8e79-3d69d8477de4")})[1] == "/boot"
    assert detect(reader, mounts={"/boot/efi": ("ext4", kil.ESP_TYPE)})[1] == "/boot"  # an ESP is FAT
    assert detect(reader, mounts={"/efi": ESP, "/boot/efi": ESP})[1] == "/efi"
    # /boot is XBOOTLDR only with its partition type; a plain ext4 /boot does not count.
    assert detect(reader, mounts={"/boot": ("ext4", None), "/boot/efi": ESP})[1] == "/boot/efi"
    assert detect(reader, mounts={"/boot": ("ext4", kil.XBOOTLDR_TYPE), "/boot/efi": ESP})[1] == "/boot"
    assert detect(reader, env={"SYSTEMD_ESP_PATH": "/efi"}, mounts={"/efi": ESP, "/boot/efi": ESP})[1] == "/efi"
    assert detect(reader, env={"SYSTEMD_RELAX_ESP_CHECKS": "1"}, mounts={"/boot/efi": ("ext4", None)})[1] == (
        "/boot/efi"
    )


def test_c_program_entry_token(tmp_path):
    dirs = ["/boot/" + MID, "/boot/debian", "/boot/custom"]
    reader = build(tmp_path, {}, dirs, tool=c_program(254))
    assert detect(reader) == ("bls", "/boot", MID)  # the machine ID first, no directory search
    (tmp_path / "etc/kernel").mkdir(parents=True)
    (tmp_path / "etc/kernel/entry-token").write_text("custom\n")
    assert detect(reader)[2] == "custom"
    (tmp_path / "etc/kernel/entry-token").unlink()
    (tmp_path / "etc/machine-id").write_text("")
    assert detect(reader) == ("bls", "/boot", "debian")  # no machine ID: os-release's ID
    (tmp_path / "etc/os-release").unlink()
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/os-release").write_text("ID=fedora\nIMAGE_ID=custom\n")
    assert detect(reader)[2] == "custom"  # /usr/lib/os-release, IMAGE_ID before ID


@pytest.mark.parametrize(
    ("files", "version", "layout"),
    [
        ({"/etc/machine-info": "KERNEL_INSTALL_LAYOUT=other\n"}, 254, "other"),
        ({"/etc/machine-info": "KERNEL_INSTALL_LAYOUT=other\n", "/etc/kernel/install.conf": "layout=bls"}, 254, "bls"),
        ({"/usr/lib/kernel/install.conf": "layout=uki\n"}, 255, "uki"),
        ({"/usr/lib/kernel/install.conf": "layout=auto\n"}, 255, "bls"),
        ({"/usr/lib/kernel/install.conf.d/50-tee.conf": "layout=other\n"}, 256, "other"),
        ({"/usr/lib/kernel/install.conf.d/50-tee.conf": "layout=other\n"}, 255, "bls"),  # no drop-ins before 256
        (
            {
                "/etc/kernel/install.conf": "layout=other\n",
                "/usr/lib/kernel/install.conf.d/50-a.conf": "layout=uki\n",
                "/etc/kernel/install.conf.d/60-b.conf": "layout=bls\n",
            },
            257,
            "bls",
        ),
    ],
)
def test_c_program_layout_settings(tmp_path, files, version, layout):
    reader = build(tmp_path, files, ["/boot/" + MID], tool=c_program(version))
    assert detect(reader)[0] == layout


def uki(sections: list[bytes]) -> bytes:
    """A PE image with the named sections (headers only, as kernel-image.c reads them)."""
    pe = 0x80
    head = bytearray(pe + 24 + 240 + 40 * len(sections))
    head[:2] = b"MZ"
    struct.pack_into("<I", head, 0x3C, pe)
    head[pe : pe + 4] = b"PE\0\0"
    struct.pack_into("<HH", head, pe + 4, 0x8664, len(sections))
    struct.pack_into("<H", head, pe + 20, 240)
    for index, name in enumerate(sections):
        offset = pe + 24 + 240 + 40 * index
        head[offset : offset + 8] = name.ljust(8, b"\0")
    return bytes(head)


def test_c_program_takes_a_unified_kernel_image_as_layout_uki(tmp_path):
    files = {
        "/boot/uki.efi": uki([b".text", b".osrel", b".linux", b".initrd"]),
        "/boot/vmlinuz": uki([b".setup", b".text", b".reloc"]),  # a bzImage's EFI stub is PE too
    }
    reader = build(tmp_path, files, ["/boot/" + MID], tool=c_program(256))
    assert detect(reader, image="/boot/uki.efi")[0] == "uki"
    assert detect(reader, image="/boot/vmlinuz")[0] == "bls"
    assert detect(build(tmp_path, files, [], tool=SHELL), image="/boot/uki.efi")[0] == "bls"  # the script never looks


def test_reasons_say_how_it_was_decided(tmp_path):
    reader = build(tmp_path, {}, ["/boot/efi/loader/entries"])
    found = kil.detect(reader, TOOL, {}, mount_of=lambda path: None)
    assert found.why() == (
        "$BOOT is /boot/efi (/boot/efi/loader/entries/ exists); neither /boot/efi/loader/entries.srel nor an "
        f"entry-token directory /boot/efi/{MID}/, so layout=other"
    )


def test_host_mounts_reads_mountinfo_for_the_host_root(tmp_path):
    mount_of = kil.host_mounts(HostReader("/"))
    assert mount_of("/proc") is not None and mount_of("/proc")[0] == "proc"
    assert mount_of("/no/such/dir") is None
    assert kil.host_mounts(HostReader(str(tmp_path)))("/proc") is None


# ------------------------------------------------------------------------------------------ against the real script

HOST_SCRIPT = "/usr/bin/kernel-install"
# The script's absolute paths and the copy's: every place it reads, moved under the test tree.
SCRIPT_PATHS = (
    "/etc/kernel",
    "/etc/machine-id",
    "/etc/machine-info",
    "/etc/os-release",
    "/usr/lib/kernel/install.conf",
)


def host_script() -> str | None:
    """This machine's kernel-install when it is the shell script (Debian 12: systemd 252), else None."""
    try:
        with open(HOST_SCRIPT, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    searched = 'BOOT_ROOT_SEARCH="/efi /boot /boot/efi"'
    return text if text.startswith("#!") and searched in text and 'BOOT_ROOT="/boot"' in text else None


@pytest.mark.skipif(host_script() is None, reason="no kernel-install shell script (systemd <= 253) on this machine")
@pytest.mark.parametrize("case", sorted(SHELL_CASES))
def test_the_installed_script_decides_the_same(tmp_path, case):
    """The host's own kernel-install, its paths moved into the tree, says the same through 'inspect'."""
    files, dirs, _expected = SHELL_CASES[case]
    root = str(tmp_path)
    layout, boot_root, token = detect(build(tmp_path, files, dirs))
    script = host_script() or ""
    for path in SCRIPT_PATHS:
        script = script.replace(path, root + path)
    script = script.replace(
        'BOOT_ROOT_SEARCH="/efi /boot /boot/efi"', f'BOOT_ROOT_SEARCH="{root}/efi {root}/boot {root}/boot/efi"'
    )
    script = script.replace('BOOT_ROOT="/boot"', f'BOOT_ROOT="{root}/boot"')
    script = script.replace('for pref in "/efi" "/boot/efi"', f'for pref in "{root}/efi" "{root}/boot/efi"')
    conf = tmp_path / "etc/kernel/install.conf"
    if conf.exists():
        conf.write_text(conf.read_text().replace("BOOT_ROOT=/", f"BOOT_ROOT={root}/"))
    (tmp_path / "ki").write_text(script)
    env = {"PATH": "/usr/bin:/bin", "KERNEL_INSTALL_PLUGINS": "/bin/true"}
    out = subprocess.run(["sh", str(tmp_path / "ki"), "inspect"], capture_output=True, text=True, env=env, check=True)
    told = dict(re.findall(r"^KERNEL_INSTALL_(\w+): (.*)$", out.stdout, re.M))
    assert (told["LAYOUT"], told["BOOT_ROOT"].replace(root, "", 1) or "/") == (layout, boot_root)
    assert token is None or told["ENTRY_TOKEN"] == token


def test_c_program_settings_from_the_environment_and_machine_info(tmp_path):
    files = {
        "/etc/machine-info": f"KERNEL_INSTALL_MACHINE_ID={'f' * 32}\nKERNEL_INSTALL_LAYOUT=other\n",
        "/srv/esp/loader/entries.srel": "type1\n",
    }
    dirs = ["/boot/" + MID, "/boot/ffffffffffffffffffffffffffffffff"]
    reader = build(tmp_path, files, dirs, tool=c_program(257))
    assert detect(reader) == ("other", "/boot", "ffffffffffffffffffffffffffffffff")
    # KERNEL_INSTALL_READ_MACHINE_INFO=0 skips /etc/machine-info (the machine ID and the layout in it).
    assert detect(reader, env={"KERNEL_INSTALL_READ_MACHINE_INFO": "0"}) == ("bls", "/boot", MID)
    assert detect(reader, env={"MACHINE_ID": MID, "BOOT_ROOT": "/srv/esp"}) == ("other", "/srv/esp", MID)
    (tmp_path / "etc/machine-info").unlink()
    assert detect(reader, env={"BOOT_ROOT": "/srv/esp"}) == ("bls", "/srv/esp", MID)
    assert detect(reader, env={"KERNEL_INSTALL_BYPASS": "yes"})[0] == "bypassed"  # getenv_bool, unlike the script


def test_partition_type_from_the_udev_database(tmp_path):
    reader = build(
        tmp_path,
        {
            "/run/udev/data/b259:1": (
                f"S:disk/by-partlabel/esp\nE:ID_PART_ENTRY_TYPE={kil.ESP_TYPE.upper()}\nE:ID_FS_TYPE=vfat\n"
            )
        },
        [],
    )
    assert kil.partition_type(reader, "259:1") == kil.ESP_TYPE
    assert kil.partition_type(reader, "259:2") is None
