"""playbooks/tee_node.yml in check mode against a teesim node tree with a Debian GRUB: the plan, no change."""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="console=ttyS0,115200n8"\n'


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def grub_node(teesim_node, root: Path, vendor: str) -> Path:
    """A teesim node tree with a Debian GRUB whose update-grub fails if anything runs it."""
    node = teesim_node(root, "--vendor", vendor)
    (node / "etc/default").mkdir(parents=True, exist_ok=True)
    (node / "etc/default/grub").write_text(GRUB)
    for directory in ("etc/modules-load.d", "etc/modprobe.d"):
        (node / directory).mkdir(parents=True, exist_ok=True)
    tool = node / "usr/sbin/update-grub"
    tool.parent.mkdir(parents=True, exist_ok=True)
    tool.write_text("#!/bin/sh\nexit 1\n")  # would fail if anything ran it
    tool.chmod(0o755)
    return node


@pytest.mark.slow
def test_check_mode_plan_for_a_simulated_tdx_node_changes_nothing(tmp_path, teesim_node, ansible_playbook_cli):
    node = grub_node(teesim_node, tmp_path / "node", "intel")
    before = snapshot(node)

    proc = ansible_playbook_cli(
        REPO / "playbooks" / "tee_node.yml",
        "--check",
        "--diff",
        "-v",
        extra_vars={
            "tee_node_hosts": "localhost",
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "tee_host_root": node,
        },
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    flat = proc.flat
    assert snapshot(node) == before
    # The plan names the drop-ins it would write and the command it would run, and shows the token diff.
    assert "create /etc/default/grub.d/90-confidential-tee-tdx.cfg" in flat
    assert "create /etc/default/grub.d/91-confidential-tee-iommu.cfg" in flat
    assert "/usr/sbin/update-grub" in flat
    assert "+kvm_intel.tdx=1" in proc.stdout and "+nohibernate" in proc.stdout and "+intel_iommu=on" in proc.stdout
    # One kernel_modules task plans both roles' modules-load files; the roles' own calls are skipped.
    one_call = task_output(proc.stdout, "Load every role's kernel modules now and at every boot with one call")
    for path in ("/etc/modules-load.d/vsock.conf", "/etc/modules-load.d/vfio.conf"):
        assert f"--- before: {node}{path}" in one_call, one_call[-3000:]
    for task in ("vsock : Load the vsock modules now", "iommu_passthrough : Load the vfio modules now"):
        assert task_output(proc.stdout, f"confidential.tee.{task}").lstrip().startswith("skipping:"), task


def task_output(stdout: str, name_start: str) -> str:
    """What the default callback printed for the task whose name starts with ``name_start`` (up to the next task)."""
    after = stdout.split(f"TASK [{name_start}", 1)[1]
    return after.split("\n", 1)[1].split("\nTASK [", 1)[0]


@pytest.mark.slow
def test_the_roles_own_host_roots_are_where_the_cpu_vendor_is_read(tmp_path, teesim_node, ansible_playbook_cli):
    # An AMD node tree given through the roles' own (deprecated) variables only (no tee_host_root), read from a
    # controller whose own CPU may be Intel: the plan must be the tree's (SEV-SNP), and its IOMMU report the tree's.
    node = grub_node(teesim_node, tmp_path / "node", "amd")
    roots = {f"{role}_host_root": str(node) for role in ("snp_host", "iommu_passthrough", "vsock")}

    proc = ansible_playbook_cli(
        REPO / "playbooks" / "tee_node.yml",
        "--check",
        "--diff",
        "-e",
        json.dumps(
            {
                "tee_node_hosts": "localhost",
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                **roots,
            }
        ),
    )

    assert proc.returncode == 0, proc.stdout[-4000:]
    warned = " ".join(proc.stderr.split())
    for name in roots:
        assert f"[DEPRECATION WARNING]: {name} is deprecated: set tee_host_root instead" in warned, proc.stderr[-3000:]
    assert "/etc/default/grub.d/90-confidential-tee-snp.cfg" in proc.flat, proc.flat[-4000:]
    assert "+kvm_amd.sev_snp=1" in proc.stdout
    assert "kvm_intel.tdx=1" not in proc.stdout
    types = Counter(path.read_text().strip() for path in (node / "sys/kernel/iommu_groups").glob("*/type"))
    shown = ", ".join(f"{kind}: {count}" for kind, count in types.items())
    assert f"{types.total()} IOMMU groups ({shown})" in proc.flat, proc.flat[-4000:]


@pytest.mark.slow
def test_a_vsock_host_root_of_its_own_is_refused_before_any_change(tmp_path, teesim_node, ansible_playbook_cli):
    # vsock's file is written by the same kernel_modules call as the vfio file: one root for both.
    node = grub_node(teesim_node, tmp_path / "node", "intel")
    other = grub_node(teesim_node, tmp_path / "other", "intel")
    before = snapshot(node), snapshot(other)

    proc = ansible_playbook_cli(
        REPO / "playbooks" / "tee_node.yml",
        extra_vars={
            "tee_node_hosts": "localhost",
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "tee_host_root": node,
            "iommu_passthrough_host_root": node,
            "vsock_host_root": other,
        },
    )

    assert proc.returncode != 0
    assert (
        f"the host root is given twice, differently (tee_host_root: {node}; iommu_passthrough_host_root: {node}; "
        f"vsock_host_root: {other})"
    ) in proc.flat, proc.flat[-3000:]
    assert (snapshot(node), snapshot(other)) == before


def role_entries(play_file: Path) -> Counter:
    """How often the plays of ``play_file`` enter each role: include_role, import_role and the roles: section."""
    entries: Counter = Counter()

    def walk(tasks):
        for task in tasks or []:
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                if key in task:
                    entries[task[key]["name"]] += 1
            for key in ("block", "rescue", "always"):
                walk(task.get(key))

    for play in yaml.safe_load(play_file.read_text()):
        for role in play.get("roles") or []:
            entries[role["role"] if isinstance(role, dict) else role] += 1
        for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
            walk(play.get(section))
    return entries


@pytest.mark.parametrize("playbook", ["tee_node.yml", "render_machineconfigs.yml"])
def test_every_host_role_is_entered_once(playbook):
    # Issue 44: the playbook reads each role's requests through confidential.tee.host_role_request and applies them
    # all before entering any role; it no longer enters a role for its request and again for its changes.
    entries = role_entries(REPO / "playbooks" / playbook)
    host_roles = [f"confidential.tee.{role}" for role in ("tdx_host", "snp_host", "iommu_passthrough", "vsock")]
    assert {role: entries[role] for role in host_roles} == dict.fromkeys(host_roles, 1)


def test_the_entry_count_sees_a_second_entry(tmp_path):
    twice = tmp_path / "twice.yml"
    tasks = [
        {"ansible.builtin.include_role": {"name": "confidential.tee.vsock", "tasks_from": "request"}},
        {"block": [{"ansible.builtin.import_role": {"name": "confidential.tee.vsock"}}]},
    ]
    twice.write_text(yaml.safe_dump([{"hosts": "all", "roles": ["confidential.tee.vsock"], "tasks": tasks}]))
    assert role_entries(twice)["confidential.tee.vsock"] == 3
