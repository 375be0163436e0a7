"""snp_host against a kernel-install node tree: iommu=pt is refused or removed, amd_iommu=on never stays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CMDLINE = "root=UUID=1 ro quiet amd_iommu=on iommu=pt\n"


def run_snp(run_playbook, root: Path, **role_vars) -> subprocess.CompletedProcess:
    (root / "etc/kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/cmdline").write_text(CMDLINE)
    playbook = root.parent / "play.yml"
    play = {
        "name": "snp",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "roles": [{"role": "confidential.tee.snp_host", "vars": {"tee_host_root": str(root), **role_vars}}],
        "post_tasks": [{"name": "Show", "ansible.builtin.debug": {"msg": "REBOOT={{ snp_host_reboot_required }}"}}],
    }
    playbook.write_text(json.dumps([play]))
    return run_playbook(playbook)


@pytest.mark.slow
def test_configured_iommu_pt_is_refused_before_anything_changes(tmp_path, ansible_playbook_cli):
    root = tmp_path / "node"
    (root / "etc/kernel").mkdir(parents=True)
    (root / "etc/kernel/cmdline").write_text(CMDLINE)
    proc = run_snp(ansible_playbook_cli, root)
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert "iommu=pt is configured (/etc/kernel/cmdline)" in flat and "snp_host_remove_iommu_pt" in flat
    assert (root / "etc/kernel/cmdline").read_text() == CMDLINE
    assert not list((root / "etc/kernel").glob("cmdline.*~"))


@pytest.mark.slow
def test_remove_iommu_pt_when_allowed_and_drop_amd_iommu_on(tmp_path, ansible_playbook_cli):
    root = tmp_path / "node"
    (root / "etc/kernel").mkdir(parents=True)
    (root / "etc/kernel/cmdline").write_text(CMDLINE)
    proc = run_snp(ansible_playbook_cli, root, snp_host_remove_iommu_pt=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (root / "etc/kernel/cmdline").read_text() == (
        "root=UUID=1 ro quiet kvm_amd.sev=1 kvm_amd.sev_es=1 kvm_amd.sev_snp=1\n"
    )
    assert "REBOOT=True" in proc.stdout
    assert [p.read_text() for p in (root / "etc/kernel").glob("cmdline.*~")] == [CMDLINE]


@pytest.mark.slow
def test_requesting_iommu_pt_is_refused(tmp_path, ansible_playbook_cli):
    root = tmp_path / "node"
    (root / "etc/kernel").mkdir(parents=True)
    (root / "etc/kernel/cmdline").write_text("ro\n")
    proc = run_snp(ansible_playbook_cli, root, snp_host_extra_kernel_args=["iommu=pt"])
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert "iommu=pt makes the IOMMU default domain passthrough" in flat and "disables SEV-SNP" in flat
    assert (root / "etc/kernel/cmdline").read_text() == "ro\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ("iommu=pt,nomerge", "iommu=nomerge"),  # the other options survive
        ("iommu=nomerge,pt iommu=soft", "iommu=nomerge,soft"),
        ("iommu.passthrough=1", ""),
    ],
)
def test_every_passthrough_spelling_is_refused_then_removed(tmp_path, ansible_playbook_cli, configured, expected):
    # Issue 7, defect 1: only the literal iommu=pt used to be refused or removed.
    root = tmp_path / "node"
    (root / "etc/kernel").mkdir(parents=True)
    (root / "etc/kernel/cmdline").write_text(f"root=UUID=1 ro {configured}\n")
    refused = run_snp(ansible_playbook_cli, root)
    assert refused.returncode != 0 and "snp_host_remove_iommu_pt" in " ".join(refused.stdout.split())
    fixed = run_snp(ansible_playbook_cli, root, snp_host_remove_iommu_pt=True)
    assert fixed.returncode == 0, fixed.stdout[-3000:]
    line = (root / "etc/kernel/cmdline").read_text()
    args = line.split()
    assert "pt" not in " ".join(a for a in args if a.startswith("iommu")) and "iommu.passthrough=1" not in args
    assert expected in line if expected else not any(a.startswith("iommu") for a in args)
    again = run_snp(ansible_playbook_cli, root, snp_host_remove_iommu_pt=True)
    assert "changed=0" in again.stdout


@pytest.mark.slow
def test_a_string_where_a_list_belongs_names_the_variable(tmp_path, ansible_playbook_cli):
    # Issue 7, defect 10: "iommu=pt" as a string passed the argument spec (split on commas).
    root = tmp_path / "node"
    (root / "etc/kernel").mkdir(parents=True)
    (root / "etc/kernel/cmdline").write_text("ro\n")
    proc = run_snp(ansible_playbook_cli, root, snp_host_extra_kernel_args="nomodeset,quiet")
    flat = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "snp_host_extra_kernel_args must be a list, got the string 'nomodeset,quiet'" in flat
    assert (root / "etc/kernel/cmdline").read_text() == "ro\n"
