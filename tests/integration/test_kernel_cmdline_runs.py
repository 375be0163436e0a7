"""kernel_cmdline through real ansible-playbook runs: --diff on non-UTF-8 files, symlinks, hostile trees."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

GRUB = b'# caf\xe9\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="console=ttyS0 iommu=pt,nomerge"\n'


def grub_node(root: Path, *, symlink: bool = False, update_grub: bool = True) -> Path:
    (root / "etc/default").mkdir(parents=True)
    target = root / ("srv/grub" if symlink else "etc/default/grub")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(GRUB)
    if symlink:
        (root / "etc/default/grub").symlink_to("/srv/grub")
    if update_grub:
        tool = root / "usr/sbin/update-grub"
        tool.parent.mkdir(parents=True)
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("ro quiet\n")
    return root


def task(diff=False, **args):
    return [{"name": "cmdline", "confidential.tee.kernel_cmdline": args, "ignore_errors": True, "diff": diff}]


def test_diff_on_a_latin1_file_applies_once_and_reports_success(tmp_path, playbook, ansible_playbook_cli):
    # Issue 7, defect 5: with --diff the write happened, then the task failed, so handlers never ran.
    # No update-grub in the tree: under a host_root it would run through chroot, which a bare tree cannot do.
    node = grub_node(tmp_path / "node", update_grub=False)
    tasks = task(host_root=str(node), absent=["iommu=pt,nomerge"], name="tee", diff=True)
    run = playbook(tmp_path, tasks, {"localhost": {}})
    result = run.result("cmdline", "localhost")
    assert not result.get("failed"), result.get("msg")
    assert any("caf\\xe9" in diff["before"] for diff in result["diff"][1:])
    assert result["changed"] is True
    assert (node / "etc/default/grub").read_bytes().startswith(b"# caf\xe9\n")
    assert b"iommu=pt" not in (node / "etc/default/grub").read_bytes()


def test_diff_output_of_a_latin1_file_in_check_mode(tmp_path, ansible_playbook_cli):
    node = grub_node(tmp_path / "node")
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - confidential.tee.kernel_cmdline:\n"
        f"        host_root: {node}\n        absent: ['iommu=pt,nomerge']\n        name: tee\n"
    )
    env = {"ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    proc = ansible_playbook_cli(playbook, "--check", "--diff", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "# caf\\xe9" in proc.stdout  # shown as an escape, not a crash
    assert "-console=ttyS0 iommu=pt,nomerge" in proc.flat or "iommu=pt,nomerge" in proc.stdout
    assert (node / "etc/default/grub").read_bytes() == GRUB


def test_symlinked_grub_file_keeps_its_link(tmp_path, playbook):
    node = grub_node(tmp_path / "node", symlink=True)
    run = playbook(
        tmp_path, task(host_root=str(node), absent=["iommu"], name="tee"), {"localhost": {}}, check_mode=True
    )
    result = run.result("cmdline", "localhost")
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True and "iommu=pt,nomerge" not in result["configured"]
    assert (node / "etc/default/grub").is_symlink()
