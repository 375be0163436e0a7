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
    def run(node: Path, **extra_vars):
        return ansible_playbook_cli(
            REPO / "playbooks" / "verify_node.yml",
            extra_vars={
                "tee_node_hosts": "localhost",
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "tee_host_root": node,
                **extra_vars,
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
    # kvm_intel claims TDX, but the misc cgroup offers no keys: readiness is the parameter *and* the tdx line.
    (node / "sys/module/kvm_intel/parameters/tdx").write_text("Y\n")
    proc = verify(node)
    assert proc.returncode != 0
    assert "TDX is not usable on this host: misc.capacity has no tdx line although kernel" in proc.flat
    assert "'virt/tdx: TDX-Module initialized' at boot" in proc.flat


@pytest.mark.slow
def test_intel_node_with_tdx_off_names_the_bios_and_kernel_checks(build_node, verify):
    node = build_node("intel")
    (node / "sys/module/kvm_intel/parameters/tdx").write_text("N\n")
    proc = verify(node)
    assert proc.returncode != 0
    assert "TDX is not usable on this host: kvm_intel tdx parameter is N although kvm_intel.tdx=1" in proc.flat
    assert "dmesg | grep -i tdx" in proc.flat


@pytest.mark.slow
@pytest.mark.parametrize("spelling", [None, "iommu=pt", "iommu=nomerge,pt", "iommu.passthrough=1"])
def test_amd_node_and_iommu_passthrough(build_node, verify, spelling):
    node = build_node("amd")
    cmdline = "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro kvm_amd.sev=1" + (f" {spelling}" if spelling else "")
    (node / "proc/cmdline").write_text(cmdline + "\n")
    if spelling:
        # What the running kernel then really does: every IOMMU group gets an identity domain.
        for group in (node / "sys/kernel/iommu_groups").iterdir():
            (group / "type").write_text("identity\n")
    proc = verify(node)
    if spelling:
        assert proc.returncode != 0
        assert f"default domain is passthrough ({spelling})" in proc.flat and "disables SEV-SNP" in proc.flat
    else:
        assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.slow
def test_cpu_vendor_that_is_neither_is_refused(build_node, verify):
    node = build_node("intel")
    cpuinfo = (node / "proc/cpuinfo").read_text().replace("GenuineIntel", "HygonGenuine")
    (node / "proc/cpuinfo").write_text(cpuinfo)
    proc = verify(node)
    assert proc.returncode != 0 and "The CPU vendor is HygonGenuine" in proc.flat


@pytest.mark.slow
def test_intel_node_checks_the_attestation_chain_when_asked(build_node, verify):
    node = build_node("intel")
    (node / "etc").mkdir(exist_ok=True)
    (node / "etc/qgs.conf").write_text("port = 0\n")
    proc = verify(node, tee_attestation_check="true", tdx_attestation_dcap_version="1.26")
    assert proc.returncode != 0
    assert "PASS dcap_version: DCAP 1.26 (given)" in proc.flat
    assert "FAIL qgs_config: consumers need the Unix socket" in proc.flat and "vsock port 0" in proc.flat
    assert "link(s) of the attestation chain fail: qgs_config, qgs_socket" in proc.flat
