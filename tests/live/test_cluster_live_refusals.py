"""confidential.tee.cluster refusing bad access and bad cluster states before its first change, on a real API server.

Each failure names the variable that chose the cluster (or the object in the way) and the fix; none shows a
traceback, and the cluster is left as it was.
"""

from __future__ import annotations

import pytest
from kube_control_plane import Pki, write_kubeconfig

pytestmark = pytest.mark.slow
RULE = "confidential-tee-keys"


def test_expired_and_untrusted_certificates(tmp_path, live, cluster_run, assert_refused_first):
    live.require_private("needs the cluster's CA to sign an expired client certificate")
    plane = live.plane
    expired = plane.pki.issue("expired", "tee-admin", groups=("system:masters",), valid_days=-1)
    run = cluster_run(
        live, kubeconfig=write_kubeconfig(tmp_path / "expired.kubeconfig", plane.server, plane.ca, *expired)
    )
    assert_refused_first(run, "Cannot reach the Kubernetes API", "Unauthorized", "tee_kubeconfig and tee_k8s_context")
    stranger = Pki(tmp_path / "other-ca")  # a CA that did not sign the API server's certificate
    cert = stranger.issue("client", "tee-admin", groups=("system:masters",))
    untrusted = write_kubeconfig(tmp_path / "untrusted.kubeconfig", plane.server, stranger.directory / "ca.crt", *cert)
    run = cluster_run(live, kubeconfig=untrusted)
    assert_refused_first(run, "CERTIFICATE_VERIFY_FAILED", "whose certificate the CA in the kubeconfig signed")


def test_rbac_forbidden_names_verb_and_resource_and_changes_nothing(live, cluster_run):
    live.require_private("uses a read-only user this session created")
    live.register_simulated_nodes()
    run = cluster_run(live, kubeconfig=live.limited_kubeconfig)
    assert run.returncode != 0
    assert (
        'cannot patch resource \\"nodefeaturerules\\"' in run.flat
        or 'cannot patch resource "nodefeaturerules"' in run.flat
    ), run.stdout[-4000:]
    assert "Traceback" not in run.stdout + run.stderr
    assert live.collection_objects() == {}


def test_a_rejected_object_leaves_the_cluster_as_it_was(live, cluster_run):
    """An admission policy refuses the SNP RuntimeClass, which is applied after the NodeFeatureRule: nothing lands."""
    live.register_simulated_nodes()
    live.deny(
        "no-snp-runtimeclass",
        {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"]},
        {"expression": "!object.handler.contains('snp')", "message": "SNP runtimes are not allowed here"},
    )
    probe = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "probe"},
        "handler": "probe-snp",
    }
    live.wait_until_refused(probe)
    run = cluster_run(live)
    assert run.returncode != 0
    assert "SNP runtimes are not allowed here" in run.flat, run.stdout[-4000:]
    assert live.collection_objects() == {}, "a rejected object left the others applied"


def test_live_kata_rule_that_makes_a_second_pool_is_refused(live, cluster_run):
    live.register_simulated_nodes()
    kata_deploy = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {"name": "kata-tee-keys"},
        "spec": {
            "rules": [
                {
                    "name": "intel.tdx",
                    "extendedResources": {"tdx.intel.com/keys": "@cpu.security.tdx.total_keys"},
                    "matchFeatures": [
                        {"feature": "cpu.security", "matchExpressions": {"tdx.enabled": {"op": "IsTrue"}}}
                    ],
                }
            ]
        },
    }
    live.apply([kata_deploy], manager="kata-deploy")
    run = cluster_run(live)
    assert run.returncode != 0
    assert "NodeFeatureRule kata-tee-keys advertises tdx.intel.com/keys" in run.flat, run.stdout[-4000:]
    assert "nfd_tee_rules_remove" in run.flat
    assert live.get("nodefeaturerules.nfd.k8s-sigs.io", "kata-tee-keys") is not None
    assert live.get("nodefeaturerules.nfd.k8s-sigs.io", RULE) is None


def test_nfd_not_installed_says_install_it_or_render_manifests(live, cluster_run):
    live.require_private("removes NFD's CRD")
    live.register_simulated_nodes()
    crd = "nodefeaturerules.nfd.k8s-sigs.io"
    saved = live.get("customresourcedefinitions", crd)
    live.kubectl("delete", "crd", crd, "--wait=true", "--timeout=60s")
    try:
        run = cluster_run(live)
    finally:
        live.plane.install_crds(live.crd_files["nfd"])
    assert saved is not None
    assert run.returncode != 0
    assert (
        "NodeFeatureRule" in run.flat
        and "Install Node Feature Discovery" in run.flat
        and "tee_output: manifests" in run.flat
    ), run.stdout[-4000:]
    assert "Traceback" not in run.stdout + run.stderr
