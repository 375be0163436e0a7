"""tee_host_info over a real H100 host capture (CC capable, CC off, no misc controller).

The node tree is built from the capture's cpuinfo flags, kernel release, cgroup controllers, devices and PCI
listing by teesim's capture builder, and `nvidia-smi` is its stand-in that replays the verbatim outputs captured
on that host.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from teesim.fixtures.capture import BUNDLED_CAPTURES, build_capture_tree

pytestmark = pytest.mark.slow


@pytest.fixture
def h100_node(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "h100"
    smi = build_capture_tree(BUNDLED_CAPTURES / "h100-cc-off", root)
    return root, smi


def test_h100_capture(h100_node, tmp_path, playbook):
    root, smi = h100_node
    tasks = [
        {"name": "host", "confidential.tee.tee_host_info": {"host_root": str(root), "nvidia_smi_path": str(smi)}},
        {"name": "capacity", "confidential.tee.tee_capacity_info": {"host_root": str(root)}},
        {
            "name": "preflight",
            "confidential.tee.tee_host_info": {"host_root": str(root), "nvidia_smi_path": str(smi), "preflight": True},
        },
    ]
    run = playbook(tmp_path, tasks, {"h100": {}})
    assert run.returncode == 0, run.stderr
    host = run.result("host", "h100")["host"]
    assert host["kernel"]["version"][:2] == [6, 18]
    assert host["cpu"]["flags"]["hypervisor"] is True and host["cpu"]["flags"]["tdx_host_platform"] is False
    assert host["tdx"]["supported"] is False and host["snp"]["supported"] is False
    assert host["vsock"]["vsock"] is True and host["vsock"]["vhost_vsock"] is False
    gpu = host["gpu"]
    assert gpu["present"] and gpu["driver_version"] == "580.159.04"
    assert gpu["cc_capable"] is True and gpu["cc_enabled"] is False and gpu["cc_state"] == "OFF"
    assert gpu["ready_state"] == "not-ready" and gpu["ready"] is False
    assert len(gpu["gpus"]) == 1 and "H100" in gpu["gpus"][0]["name"]
    assert host["pci"]["devices"] == [
        {
            "bdf": "0000:00:06.0",
            "vendor": "0x10de",
            "device": "0x2330",
            "class": "0x0302",
            "driver": "nvidia",
            "iommu_group": None,
        }
    ]
    capacity = run.result("capacity", "h100")
    assert capacity["misc_controller"]["present"] is False
    assert "cpuset cpu io memory hugetlb pids" in capacity["misc_controller"]["reason"]
    # The expected preflight verdict: GPU CC capable but off and not ready; no TDX, no SEV-SNP.
    verdict = run.result("preflight", "h100")["host"]["preflight"]
    by_id = {c["id"]: c for s in verdict["sections"] for c in s["checks"]}
    sections = {s["id"]: s for s in verdict["sections"]}
    assert verdict["verdict"] == "FAIL" and verdict["ready"] is False
    assert by_id["gpu.cc_capable"]["verdict"] == "PASS"
    assert by_id["gpu.cc_mode"]["verdict"] == "FAIL" and by_id["gpu.cc_mode"]["detail"].startswith("CC state OFF")
    assert by_id["gpu.ready"]["verdict"] == "FAIL" and by_id["gpu.ready"]["detail"] == "CC GPUs ready state: not-ready"
    assert by_id["tdx.cpu_flag"]["verdict"] == "FAIL" and "virtual machine" in by_id["tdx.cpu_flag"]["detail"]
    assert sections["sev_snp"]["verdict"] == "SKIP" and "needs AMD" in sections["sev_snp"]["reason"]
    assert by_id["iommu.gpu_vfio"]["detail"] == "not on vfio-pci: 0000:00:06.0 (nvidia)"
    assert all(c["remediation"] for c in by_id.values() if c["verdict"] == "FAIL")
