"""A module's refusal names the user's variable and the host when a role filled the option, and the option when the
module is called directly, through the real ansible-playbook (plugin_utils.module_refusal, issue 43)."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.slow

PLAY = """\
- hosts: tdx-node-5
  gather_facts: false
  {body}
"""


def run(ansible_playbook_cli, tmp_path, body: str):
    (tmp_path / "site.yml").write_text(PLAY.format(body=body))
    (tmp_path / "hosts.ini").write_text(
        f"tdx-node-5 ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return ansible_playbook_cli("site.yml", "-i", "hosts.ini", cwd=str(tmp_path))


def test_a_roles_module_refusal_names_the_role_variable_and_the_host_in_every_line_shown(
    ansible_playbook_cli, tmp_path
):
    missing = tmp_path / "no-such-root"
    proc = run(ansible_playbook_cli, tmp_path, f"roles: [{{role: confidential.tee.vsock, vsock_host_root: {missing}}}]")
    assert proc.returncode != 0
    named = (
        f"confidential.tee.kernel_modules on host tdx-node-5: inventory variable vsock_host_root (option host_root): "
        f"host_root {missing} is not a directory"
    )
    # The task's error line and its result both carry it (ansible-core shows the first, callbacks the second).
    assert f"Task failed: Action failed: {named}" in proc.flat, proc.flat[-3000:]
    assert f"msg: '{named}" in proc.flat
    assert "Module failed: host_root" not in proc.flat


def test_a_refused_root_names_the_one_collection_variable(ansible_playbook_cli, tmp_path):
    missing = tmp_path / "no-such-root"
    body = f"vars:\n    tee_host_root: {missing}\n  roles: [{{role: confidential.tee.vsock}}]"
    proc = run(ansible_playbook_cli, tmp_path, body)
    assert proc.returncode != 0
    assert (
        f"confidential.tee.kernel_modules on host tdx-node-5: inventory variable tee_host_root (option host_root): "
        f"host_root {missing} is not a directory"
    ) in proc.flat, proc.flat[-3000:]


def test_a_direct_call_names_the_option(ansible_playbook_cli, tmp_path):
    missing = tmp_path / "no-such-root"
    body = (
        "tasks:\n    - confidential.tee.kernel_modules:\n        host_root: "
        f"{missing}\n        modules: [vsock_loopback]\n        path: /etc/modules-load.d/vsock.conf\n"
    )
    proc = run(ansible_playbook_cli, tmp_path, body)
    assert proc.returncode != 0
    assert (
        f"confidential.tee.kernel_modules on host tdx-node-5: option host_root: host_root {missing} is not a directory"
        in proc.flat
    ), proc.flat[-3000:]
