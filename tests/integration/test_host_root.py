"""One host root (issue 44): tee_host_root is read by every role; a role's own <role>_host_root still works for one
release with a deprecation warning, and a second, different root is refused before anything is written."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.slow

PLAY = """\
- hosts: tdx-node-5
  gather_facts: false
  roles:
    - role: confidential.tee.vsock
      vsock_load_now: false
"""
DEPRECATION = "[DEPRECATION WARNING]: vsock_host_root is deprecated: set tee_host_root instead"


def run(ansible_playbook_cli, tmp_path, **variables):
    (tmp_path / "site.yml").write_text(PLAY)
    (tmp_path / "hosts.ini").write_text(
        f"tdx-node-5 ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    given = [arg for name, value in variables.items() for arg in ("-e", f"{name}={value}")]
    return ansible_playbook_cli("site.yml", "-i", "hosts.ini", *given, cwd=str(tmp_path))


def test_tee_host_root_alone_is_read_without_a_warning(ansible_playbook_cli, tmp_path):
    node = tmp_path / "node"
    node.mkdir()
    proc = run(ansible_playbook_cli, tmp_path, tee_host_root=node)
    assert proc.returncode == 0, proc.flat[-3000:]
    assert (node / "etc/modules-load.d/vsock.conf").is_file()
    assert "DEPRECATION" not in proc.stdout + proc.stderr


def test_the_roles_own_name_still_works_with_one_deprecation_warning(ansible_playbook_cli, tmp_path):
    node = tmp_path / "node"
    node.mkdir()
    proc = run(ansible_playbook_cli, tmp_path, vsock_host_root=node)
    assert proc.returncode == 0, proc.flat[-3000:]
    assert (node / "etc/modules-load.d/vsock.conf").is_file()
    # Ansible writes deprecations to stderr, and each message once however often the root is read.
    warned = " ".join(proc.stderr.split())
    assert warned.count(DEPRECATION) == 1, proc.stderr[-3000:]
    assert "removed from collection 'confidential.tee' version 0.3.0" in warned


def test_a_second_different_root_is_refused_before_any_write(ansible_playbook_cli, tmp_path):
    node, other = tmp_path / "node", tmp_path / "other"
    node.mkdir()
    other.mkdir()
    proc = run(ansible_playbook_cli, tmp_path, tee_host_root=node, vsock_host_root=other)
    assert proc.returncode != 0
    assert (
        f"confidential.tee.host_root on host tdx-node-5: the host root is given twice, differently "
        f"(tee_host_root: {node}; vsock_host_root: {other})"
    ) in proc.flat, proc.flat[-3000:]
    assert not any(node.iterdir()) and not any(other.iterdir())
