"""iommu_passthrough's NVIDIA vfio-pci binding, run for real against a simulated sysfs tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DEVICES = {
    # bdf: (vendor, class, driver)
    "0000:17:00.0": ("0x10de", "0x030200", "nvidia"),  # H100: bind
    "0000:18:00.0": ("0x10de", "0x068000", None),  # NVSwitch without driver: bind
    "0000:19:00.0": ("0x10de", "0x030200", "vfio-pci"),  # already bound: skip
    "0000:1a:00.1": ("0x10de", "0x040300", "snd_hda_intel"),  # NVIDIA audio function: not a GPU
    "0000:00:1f.6": ("0x8086", "0x020000", "e1000e"),  # Intel NIC
}


def build_sysfs(root: Path) -> Path:
    sys_dir = root / "sys"
    bus = sys_dir / "bus/pci"
    (bus / "devices").mkdir(parents=True)
    (bus / "drivers_probe").write_text("")
    for bdf, (vendor, klass, driver) in DEVICES.items():
        real = sys_dir / "devices/pci0000:00" / bdf
        real.mkdir(parents=True)
        (real / "vendor").write_text(vendor + "\n")
        (real / "class").write_text(klass + "\n")
        (real / "driver_override").write_text("(null)\n")
        if driver:
            drv = bus / "drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            (drv / "unbind").write_text("")
            (real / "driver").symlink_to(os.path.relpath(drv, real))
        (bus / "devices" / bdf).symlink_to(os.path.relpath(real, bus / "devices"))
    (sys_dir / "kernel/iommu_groups/0/devices").mkdir(parents=True)
    (sys_dir / "kernel/iommu_groups/1/devices").mkdir(parents=True)
    (root / "etc/modules-load.d").mkdir(parents=True)  # present on every systemd host
    return sys_dir


def run_role(run_playbook, root: Path, check: bool = False) -> subprocess.CompletedProcess:
    playbook = root / "play.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "bind",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": sys.executable},
                    "roles": [
                        {
                            "role": "confidential.tee.iommu_passthrough",
                            "vars": {
                                "tee_host_root": str(root),
                                "iommu_passthrough_cpu_vendor": "amd",
                                "iommu_passthrough_bind_nvidia": True,
                                # This test is about sysfs; a container CI runner must not skip the binding.
                                "iommu_passthrough_container_types": [],
                            },
                        }
                    ],
                }
            ]
        )
    )
    return run_playbook(playbook, *(["--check"] if check else []))


@pytest.mark.slow
def test_nvidia_devices_bound_once_and_others_untouched(tmp_path, ansible_playbook_cli):
    sys_dir = build_sysfs(tmp_path)
    dev = sys_dir / "devices/pci0000:00"
    drivers = sys_dir / "bus/pci/drivers"

    dry = run_role(ansible_playbook_cli, tmp_path, check=True)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert (dev / "0000:17:00.0/driver_override").read_text() == "(null)\n"
    assert not (tmp_path / "etc/modules-load.d/vfio.conf").exists()

    proc = run_role(ansible_playbook_cli, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (dev / "0000:17:00.0/driver_override").read_text() == "vfio-pci"
    assert (dev / "0000:18:00.0/driver_override").read_text() == "vfio-pci"
    assert (drivers / "nvidia/unbind").read_text() == "0000:17:00.0"
    # The fake drivers_probe is a plain file: only the last write remains.
    assert (sys_dir / "bus/pci/drivers_probe").read_text() in {"0000:17:00.0", "0000:18:00.0"}
    for untouched in ("0000:19:00.0", "0000:1a:00.1", "0000:00:1f.6"):
        assert (dev / untouched / "driver_override").read_text() == "(null)\n", untouched
    assert (drivers / "vfio-pci/unbind").read_text() == ""
    assert (tmp_path / "etc/modules-load.d/vfio.conf").read_text().splitlines()[1:] == [
        "vfio",
        "vfio_iommu_type1",
        "vfio_pci",
    ]
    assert "2 IOMMU groups" in proc.stdout
    assert "already on vfio-pci: 0000:19:00.0" in " ".join(proc.stdout.split()), proc.stdout[-2000:]
