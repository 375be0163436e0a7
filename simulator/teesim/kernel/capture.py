"""A host tree rebuilt from a real host capture (``../shared/reference/hosts/<name>``), for ``host_root``.

A capture holds ``host-probe.txt`` (sections ``## uname``, ``## cpuinfo flags``, ``## cgroup.controllers``,
``## /dev``, ``## iommu_groups``, ``## lspci`` ...) and verbatim ``nvidia-smi`` outputs. This writes the
files the collection reads, as the captured host had them, plus ``usr/bin/nvidia-smi``: a stand-in that
replays the captured outputs for exactly the commands that were captured (anything else exits 1).

Simplifications: the command line is not captured (it is replaced by a neutral one); cpuinfo has one
processor with the captured flags; devices are empty regular files; ``sys/bus/pci/devices/<bdf>`` are
directories.
"""

from __future__ import annotations

import re
import stat
import sys
from pathlib import Path

_SECTION_RE = re.compile(r"^## (.+?)\n(.*?)(?=^## |\Z)", re.M | re.S)
_PCI_RE = re.compile(
    r"^/sys/bus/pci/devices/(?P<bdf>\S+) vendor=(?P<vendor>\S+) device=(?P<device>\S+) class=(?P<cls>\S+)"
    r" driver=(?P<driver>\S*) iommu_group=(?P<group>\S*)$",
    re.M,
)
# Devices the collection looks at; everything else in the captured /dev listing is irrelevant to it.
_DEVICES = ("vsock", "vhost-vsock", "kvm", "sev", "sgx_enclave", "sgx_provision", "nvidia0")

STAND_IN = """#!{python}
# Replays nvidia-smi outputs captured on a real host (written by teesim's capture builder).
import re, sys
from pathlib import Path
capture = Path({capture!r})
args = sys.argv[1:]
if args == ["-q"]:
    sys.stdout.write((capture / "nvidia-smi-q.txt").read_text())
elif args == ["--version"]:
    sys.stdout.write((capture / "nvidia-smi-version.txt").read_text())
elif args[:1] == ["conf-compute"] and len(args) == 2:
    text = (capture / "nvidia-smi-conf-compute.txt").read_text()
    sections = dict(re.findall(r"^## (\\S+)\\n(.*?)(?=^## |\\Z)", text, re.M | re.S))
    if args[1] not in sections:
        sys.exit("stand-in: no capture for " + " ".join(args))
    sys.stdout.write(sections[args[1]])
else:
    sys.exit("stand-in: no capture for " + " ".join(args))
"""


def probe_sections(capture: Path) -> dict[str, str]:
    """The ``## name`` sections of ``host-probe.txt``."""
    return dict(_SECTION_RE.findall((capture / "host-probe.txt").read_text()))


def _write(root: Path, relpath: str, text: str) -> None:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _pci(root: Path, listing: str) -> None:
    for match in _PCI_RE.finditer(listing):
        base = f"sys/bus/pci/devices/{match['bdf']}"
        _write(root, f"{base}/vendor", match["vendor"] + "\n")
        _write(root, f"{base}/device", match["device"] + "\n")
        _write(root, f"{base}/class", match["cls"] + "\n")
        links = {"driver": ("bus/pci/drivers", match["driver"]), "iommu_group": ("kernel/iommu_groups", match["group"])}
        for link, (parent, value) in links.items():
            path = root / base / link
            if path.is_symlink():
                path.unlink()
            if value:
                path.symlink_to(f"../../../../{parent}/{value}")


def build_capture_tree(capture: Path, out: Path) -> Path:
    """Write the host tree of ``capture`` under ``out``; returns the path of its nvidia-smi stand-in."""
    probe = probe_sections(capture)
    flags = probe["cpuinfo flags"].strip()
    vendor = re.search(r"^Vendor ID:\s*(\S+)", probe.get("lscpu", ""), re.M)
    model = re.search(r"^Model name:\s*(.+)$", probe.get("lscpu", ""), re.M)
    _write(
        out,
        "proc/cpuinfo",
        f"processor\t: 0\nvendor_id\t: {vendor[1] if vendor else 'unknown'}\n"
        f"model name\t: {model[1].strip() if model else 'unknown'}\n{flags}\n\n",
    )
    _write(out, "proc/sys/kernel/osrelease", probe["uname"].split()[2] + "\n")
    _write(out, "proc/cmdline", "BOOT_IMAGE=/boot/vmlinuz root=/dev/vda1 ro console=ttyS0\n")
    _write(out, "sys/fs/cgroup/cgroup.controllers", probe["cgroup.controllers"].strip() + "\n")
    (out / "sys/kernel/iommu_groups").mkdir(parents=True, exist_ok=True)
    for group in probe.get("iommu_groups", "").split():
        (out / "sys/kernel/iommu_groups" / group).mkdir(exist_ok=True)
    for device in probe.get("/dev", "").split():
        if device in _DEVICES:
            _write(out, f"dev/{device}", "")
    _pci(out, probe.get("lspci", ""))
    smi = out / "usr/bin/nvidia-smi"
    _write(out, "usr/bin/nvidia-smi", STAND_IN.format(python=sys.executable, capture=str(capture.resolve())))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return smi
