"""After converge + idempotence: files, contents, modes, preserved arguments, backups, recorded tool calls."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "files"
CALLS = "/var/log/tee-bootloader-calls.log"
TDX = ["kvm_intel.tdx=1", "nohibernate"]
SNP = ["kvm_amd.sev=1", "kvm_amd.sev_es=1", "kvm_amd.sev_snp=1"]


def fixture(host) -> str:
    return host.file("/etc/tee-fixture").content_string.strip()


def original(path: str, kind: str) -> str:
    return (FIXTURES / kind / path.lstrip("/")).read_text()


def calls(host) -> list[str]:
    log = host.file(CALLS)
    return log.content_string.splitlines() if log.exists else []


def backups(host, path: str) -> list[str]:
    out = host.check_output(f"ls -1 {path}.*~ 2>/dev/null || true")
    return sorted(out.split())


def only(host, kind):
    if fixture(host) != kind:
        pytest.skip(f"instance carries the {fixture(host)} fixture")


def assert_plain_file(host, path, mode=0o644):
    f = host.file(path)
    assert f.is_file, path
    assert (f.mode, f.user, f.group) == (mode, "root", "root"), path
    return f.content_string


def test_vsock_and_vfio_listed_for_boot(host):
    vsock = assert_plain_file(host, "/etc/modules-load.d/vsock.conf")
    assert vsock.splitlines()[1:] == ["vhost_vsock", "vsock_loopback"]
    vfio = assert_plain_file(host, "/etc/modules-load.d/vfio.conf")
    assert vfio.splitlines()[1:] == ["vfio", "vfio_iommu_type1", "vfio_pci"]


def test_tdx_modprobe_option_only_on_intel(host):
    path = "/etc/modprobe.d/confidential-tee-tdx.conf"
    if fixture(host) == "bls":  # the AMD instance
        assert not host.file(path).exists
    else:
        assert "options kvm_intel tdx=1" in assert_plain_file(host, path).splitlines()


def test_grub_dropins_and_preserved_arguments(host):
    only(host, "grub")
    before = original("/etc/default/grub", "grub")
    # Only the conflicting kvm_intel.tdx=0 left the user's file; every other byte is where it was.
    assert assert_plain_file(host, "/etc/default/grub") == before.replace(" kvm_intel.tdx=0", "")
    assert assert_plain_file(host, "/etc/default/grub.d/50-site.cfg") == original(
        "/etc/default/grub.d/50-site.cfg", "grub"
    )
    tdx = assert_plain_file(host, "/etc/default/grub.d/90-confidential-tee-tdx.cfg")
    assert 'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} kvm_intel.tdx=1 nohibernate"' in tdx.splitlines()
    iommu = assert_plain_file(host, "/etc/default/grub.d/91-confidential-tee-iommu.cfg")
    assert 'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} intel_iommu=on"' in iommu.splitlines()
    saved = backups(host, "/etc/default/grub")
    assert len(saved) == 1 and host.file(saved[0]).content_string == before


def test_grub_regenerated_once_with_the_right_kernel_line(host):
    only(host, "grub")
    # tee_node.yml applies tdx_host's and iommu_passthrough's drop-ins in one task: one update-grub for both;
    # idempotence added nothing.
    assert calls(host) == ["update-grub "]
    linux = host.file("/boot/grub/grub.cfg").content_string.split()
    args = linux[2:]
    for arg in ["console=tty0", "console=ttyS0,115200n8", "mitigations=auto,nosmt", *TDX, "intel_iommu=on"]:
        assert args.count(arg) == 1, arg
    assert args[-2:] == ["quiet", "audit=1"]  # GRUB_CMDLINE_LINUX_DEFAULT, extended by the site drop-in
    assert "kvm_intel.tdx=0" not in args


def test_bls_entries_edited_through_grubby(host):
    only(host, "bls")
    assert calls(host) == [
        "grubby --update-kernel=ALL --remove-args=amd_iommu=on",
        "grubby --update-kernel=ALL --args=" + " ".join(SNP),
    ]
    entries = sorted(host.check_output("ls -1 /boot/loader/entries/*.conf").split())
    assert len(entries) == 3
    for entry in entries:
        text = host.file(entry).content_string
        options = next(line for line in text.splitlines() if line.startswith("options ")).split()[1:]
        assert options == [
            "root=UUID=7d9c1e52-4a7b-4f0e-9c61-2b3a4d5e6f70",
            "ro",
            "rootflags=subvol=root",
            "mitigations=auto",
            "rhgb",
            "quiet",
            *SNP,
        ], entry
        saved = backups(host, entry)
        assert len(saved) == 1, entry
        assert host.file(saved[0]).content_string == original(entry, "bls")
    assert not host.file("/etc/default/grub.d").exists  # BLS hosts get no GRUB drop-in


def test_kernel_install_cmdline(host):
    only(host, "kernel_install")
    before = original("/etc/kernel/cmdline", "kernel_install")
    now = assert_plain_file(host, "/etc/kernel/cmdline")
    assert now == before.rstrip("\n") + " " + " ".join([*TDX, "intel_iommu=on"]) + "\n"
    release = host.check_output("uname -r")
    expected = f"kernel-install add {release} /usr/lib/modules/{release}/vmlinuz"
    assert calls(host) == [expected]  # one kernel-install add for tdx_host and iommu_passthrough together
    assert host.file("/boot/tee-installed-cmdline").content_string == now
    # The module read the entry kernel-install wrote back (it exits 0 even when it writes none).
    entries = host.check_output("ls -1 /boot/efi/loader/entries/").split()
    assert [name for name in entries if name.endswith(f"-{release}.conf")] == entries and len(entries) == 1
    options = next(
        line
        for line in host.file(f"/boot/efi/loader/entries/{entries[0]}").content_string.splitlines()
        if line.startswith("options")
    )
    assert options.split()[1:] == now.split()
    saved = backups(host, "/etc/kernel/cmdline")
    assert len(saved) == 1
    assert host.file(saved[0]).content_string == before  # the copy is the user's original
