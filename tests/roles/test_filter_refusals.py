"""A filter that refuses a role's input says so in the user's words, through the real ansible-playbook: the filter,
the host it ran for, the inventory variable the value came from (found from the role being run) and the fix."""

from __future__ import annotations

import sys
import textwrap

PLAN = "{'kubevirt': {'tdx_nodes': ['tdx-1'], 'sev_nodes': [], 'nodes': []}, 'kata': {}, 'nodes': {}}"
TASK = textwrap.dedent(
    """\
    - name: Render the KubeVirt configuration
      ansible.builtin.debug:
        msg: >-
          {{ PLAN | confidential.tee.kubevirt_cc([], {'name': 'kubevirt', 'namespace': 'kubevirt',
             'qgs_socket_path': kubevirt_cc_qgs_socket_path}) }}
    """
).replace("PLAN", PLAN)


def test_a_refusal_inside_a_role_names_the_host_and_the_role_variable(tmp_path, ansible_playbook_cli):
    # A role of the user's own called kubevirt_cc: its variable is kubevirt_cc_qgs_socket_path.
    tasks = tmp_path / "roles" / "kubevirt_cc" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("---\n" + TASK)
    playbook = tmp_path / "site.yml"
    playbook.write_text(
        "- hosts: tdx-node-7\n  gather_facts: false\n  roles: [kubevirt_cc]\n"
        "  vars:\n    kubevirt_cc_qgs_socket_path: var/run/tdx-qgs/qgs.socket\n    tee_k8s_node_name: node-a\n"
    )
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"tdx-node-7 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    proc = ansible_playbook_cli(str(playbook), "-i", str(inventory), cwd=str(tmp_path))
    assert proc.returncode != 0
    assert (
        "confidential.tee.kubevirt_cc on host tdx-node-7 (Kubernetes node node-a): inventory variable "
        "kubevirt_cc_qgs_socket_path: the QGS socket path must be an absolute path" in proc.flat
    ), proc.flat[-3000:]
    assert "set it to a path such as /var/run/tdx-qgs/qgs.socket" in proc.flat
