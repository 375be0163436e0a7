"""The apply path of playbooks/cluster.yml.

No kube-apiserver can be installed on the machines this project tests on (no container registry), so
the run against a cluster happens only where ``KUBECONFIG`` names one, and then as a server-side dry
run (``--check``): reads, plans and dry-run applies, changes nothing. Elsewhere it is skipped, saying so.
The token test needs no cluster: it points the apply path at a closed port and checks that the bearer
token appears nowhere in the output, even at -vvv, when the API call fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "cluster.yml"
TOKEN = "s3cr3t-token-e9b1c4d7f2a8"


def _inventory(tmp_path, node_root, **cluster_vars) -> Path:
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **cluster_vars},
            "children": {
                "tee_nodes": {
                    "hosts": {"tdx-1": {"tee_host_root": str(node_root), "tee_node_consumers": ["kata", "kubevirt"]}}
                }
            },
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


@pytest.mark.slow
def test_api_token_never_appears_in_output(tmp_path, teesim_node, ansible_playbook_cli):
    pytest.importorskip("kubernetes", reason="the kubernetes Python client (dev extra) drives kubernetes.core")
    node = teesim_node(tmp_path / "tdx-1", "--vendor", "intel")
    inventory = _inventory(
        tmp_path,
        node,
        tee_output="apply",
        tee_k8s_host="https://127.0.0.1:9",
        tee_k8s_api_key=TOKEN,
        tee_k8s_validate_certs=False,
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = ansible_playbook_cli(
        PLAYBOOK, "-i", str(inventory), "-vvv", env={"KUBECONFIG": "/dev/null", "TMPDIR": str(scratch)}
    )
    assert proc.returncode != 0  # nothing listens on port 9
    assert "127.0.0.1" in proc.stdout  # the failure was the API call, after the token was handed over
    assert TOKEN not in proc.stdout and TOKEN not in proc.stderr
    # The token's private kubeconfig (0600 while it existed) is gone, although the play failed.
    assert f"path: {scratch}/" in proc.stdout and "Remove the temporary kubeconfig" in proc.stdout
    assert list(scratch.glob("*.kubeconfig")) == []


@pytest.mark.slow
def test_dry_run_against_the_cluster_in_kubeconfig(tmp_path, teesim_node, ansible_playbook_cli):
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig or not Path(kubeconfig).is_file():
        pytest.skip("no KUBECONFIG names a cluster here: the apply path was not run against an API server")
    pytest.importorskip("kubernetes", reason="the kubernetes Python client (dev extra) drives kubernetes.core")
    node = teesim_node(tmp_path / "tdx-1", "--vendor", "intel")
    inventory = _inventory(tmp_path, node, tee_output="apply", tee_kubeconfig=kubeconfig)
    proc = ansible_playbook_cli(PLAYBOOK, "-i", str(inventory), "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-5000:]
