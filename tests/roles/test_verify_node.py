"""playbooks/verify_node.yml (the roles' verify.yml task files) against teesim-built node trees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def build_node(root: Path, vendor: str, *extra: str) -> Path:
    teesim = BIN / "teesim"
    if not teesim.exists():
        pytest.skip("teesim is not installed in this virtualenv (make venv installs it)")
    out = root / vendor
    subprocess.run(
        [str(teesim), "node", "build", "--vendor", vendor, "--out", str(out), *extra],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def verify(node: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build" / "collections"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
    }
    cmd = [
        str(BIN / "ansible-playbook"),
        str(REPO / "playbooks" / "verify_node.yml"),
        "-e",
        "tee_node_hosts=localhost",
        "-e",
        "ansible_connection=local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        f"tee_host_root={node}",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    proc.flat = " ".join(proc.stdout.split())  # the YAML callback wraps long messages
    return proc


@pytest.mark.slow
def test_intel_node_with_tdx_keys_passes(tmp_path):
    proc = verify(build_node(tmp_path, "intel"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in proc.stdout


@pytest.mark.slow
def test_intel_node_without_tdx_keys_fails_with_guidance(tmp_path):
    node = build_node(tmp_path, "intel", "--capacity", "tdx=0")
    # kvm_intel claims TDX, but the misc cgroup offers no keys: the capacity check must catch it.
    (node / "sys/module/kvm_intel/parameters/tdx").write_text("Y\n")
    proc = verify(node)
    assert proc.returncode != 0
    assert "tdx capacity 0" in proc.flat and "at least 1 required" in proc.flat


@pytest.mark.slow
def test_intel_node_with_tdx_off_names_the_bios_and_kernel_checks(tmp_path):
    node = build_node(tmp_path, "intel")
    (node / "sys/module/kvm_intel/parameters/tdx").write_text("N\n")
    proc = verify(node)
    assert proc.returncode != 0
    assert f"kvm_intel did not enable TDX ({node}/sys/module/kvm_intel/parameters/tdx is N)" in proc.flat
    assert "key split" in proc.flat


@pytest.mark.slow
@pytest.mark.parametrize("iommu_pt", [False, True])
def test_amd_node_and_iommu_passthrough(tmp_path, iommu_pt):
    node = build_node(tmp_path, "amd")
    cmdline = "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro kvm_amd.sev=1" + (" iommu=pt" if iommu_pt else "")
    (node / "proc/cmdline").write_text(cmdline + "\n")
    proc = verify(node)
    if iommu_pt:
        assert proc.returncode != 0 and "iommu=pt" in proc.flat and "disables SEV-SNP" in proc.flat
    else:
        assert proc.returncode == 0, proc.stdout[-3000:]
