"""playbooks/verify_node.yml (the roles' verify.yml task files) against teesim-built node trees."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def build_node(tmp_path, teesim_node):
    def build(vendor: str, *extra: str) -> Path:
        return teesim_node(tmp_path / vendor, "--vendor", vendor, *extra)

    return build


@pytest.fixture
def verify(ansible_playbook_cli):
    def run(node: Path):
        return ansible_playbook_cli(
            REPO / "playbooks" / "verify_node.yml",
            extra_vars={
                "tee_node_hosts": "localhost",
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "tee_host_root": node,
            },
        )

    return run


@pytest.mark.slow
def test_intel_node_with_tdx_keys_passes(build_node, verify):
    proc = verify(build_node("intel"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in proc.stdout


@pytest.mark.slow
def test_intel_node_without_tdx_keys_fails_with_guidance(build_node, verify):
    node = build_node("intel", "--capacity", "tdx=0")
    # kvm_intel claims TDX, but the misc cgroup offers no keys: the capacity check must catch it.
    (node / "sys/module/kvm_intel/parameters/tdx").write_text("Y\n")
    proc = verify(node)
    assert proc.returncode != 0
    assert "tdx capacity 0" in proc.flat and "at least 1 required" in proc.flat


@pytest.mark.slow
def test_intel_node_with_tdx_off_names_the_bios_and_kernel_checks(build_node, verify):
    node = build_node("intel")
    (node / "sys/module/kvm_intel/parameters/tdx").write_text("N\n")
    proc = verify(node)
    assert proc.returncode != 0
    assert f"kvm_intel did not enable TDX ({node}/sys/module/kvm_intel/parameters/tdx is N)" in proc.flat
    assert "key split" in proc.flat


@pytest.mark.slow
@pytest.mark.parametrize("iommu_pt", [False, True])
def test_amd_node_and_iommu_passthrough(build_node, verify, iommu_pt):
    node = build_node("amd")
    cmdline = "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro kvm_amd.sev=1" + (" iommu=pt" if iommu_pt else "")
    (node / "proc/cmdline").write_text(cmdline + "\n")
    proc = verify(node)
    if iommu_pt:
        assert proc.returncode != 0 and "iommu=pt" in proc.flat and "disables SEV-SNP" in proc.flat
    else:
        assert proc.returncode == 0, proc.stdout[-3000:]
