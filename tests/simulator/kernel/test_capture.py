"""A host tree rebuilt from the real H100 capture, with an nvidia-smi that replays the captured outputs."""

from __future__ import annotations

import os
import subprocess

from teesim.kernel.capture import build_capture_tree, probe_sections


def test_capture_tree(tmp_path, reference):
    capture = reference / "hosts" / "h100-cc-off"
    smi = build_capture_tree(capture, tmp_path)
    probe = probe_sections(capture)
    assert (tmp_path / "proc/sys/kernel/osrelease").read_text() == probe["uname"].split()[2] + "\n"
    cpuinfo = (tmp_path / "proc/cpuinfo").read_text()
    assert "vendor_id\t: GenuineIntel" in cpuinfo and " hypervisor " in cpuinfo
    assert (tmp_path / "sys/fs/cgroup/cgroup.controllers").read_text() == "cpuset cpu io memory hugetlb pids\n"
    device = tmp_path / "sys/bus/pci/devices/0000:00:06.0"
    assert (device / "vendor").read_text() == "0x10de\n" and (device / "class").read_text() == "0x030200\n"
    assert os.readlink(device / "driver") == "../../../../bus/pci/drivers/nvidia"
    assert not (device / "iommu_group").exists()
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == ["kvm", "nvidia0", "vsock"]
    done = subprocess.run([smi, "conf-compute", "-grs"], capture_output=True, text=True, check=True)
    assert "Confidential Compute GPUs Ready state: not-ready" in done.stdout
    refused = subprocess.run([smi, "--list-gpus"], capture_output=True, text=True)
    assert refused.returncode == 1 and "no capture for --list-gpus" in refused.stderr
    # Rebuilding over an existing tree replaces the links instead of failing.
    build_capture_tree(capture, tmp_path)
