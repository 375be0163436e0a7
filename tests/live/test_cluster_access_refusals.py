"""confidential.tee.cluster refusing a cluster it cannot reach or cannot find, at its first task.

These need no control plane: the kubeconfig names a closed loopback port (with real certificates) or a context
it does not hold. The failure names tee_kubeconfig and tee_k8s_context and comes before any node is read.
"""

from __future__ import annotations

import pytest
from kube_control_plane import Pki, free_port, write_kubeconfig

pytestmark = pytest.mark.slow


@pytest.fixture
def closed_kubeconfig(tmp_path):
    """A kubeconfig (context tee-live) whose server port nobody listens on."""
    pki = Pki(tmp_path / "closed-pki")
    cert = pki.issue("client", "nobody")
    server = f"https://127.0.0.1:{free_port()}"
    return write_kubeconfig(tmp_path / "closed.kubeconfig", server, pki.directory / "ca.crt", *cert)


def test_unreachable_api_fails_at_the_first_task_naming_the_variables(
    cluster_run, closed_kubeconfig, assert_refused_first
):
    run = cluster_run(None, kubeconfig=closed_kubeconfig)
    assert_refused_first(
        run,
        "Cannot reach the Kubernetes API of context tee-live",
        "tee_kubeconfig and tee_k8s_context",
        "Nothing was applied",
        "tee_output: manifests",
        "Connection refused",  # the client tried that kubeconfig's server, not a default one
    )


def test_missing_context_and_missing_kubeconfig(tmp_path, cluster_run, closed_kubeconfig, assert_refused_first):
    run = cluster_run(None, kubeconfig=closed_kubeconfig, tee_k8s_context="staging")
    assert_refused_first(run, "context staging (tee_k8s_context) is not in the kubeconfig", "its contexts: tee-live")
    run = cluster_run(None, kubeconfig=tmp_path / "absent.kubeconfig")
    assert_refused_first(run, "no kubeconfig: tee_kubeconfig names", "absent.kubeconfig")
