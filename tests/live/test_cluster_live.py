"""confidential.tee.cluster applied to a real kube-apiserver through ansible-playbook and kubernetes.core, as on a
cluster the tests did not start.

The nodes are simulated (teesim host trees for the host facts; their Node objects registered first, with the
status a kubelet writes); the API server, etcd, TLS, RBAC and admission are real (tests/live/conftest.py).

On this session's own cluster the --check and the real run go through the view ``live_cluster`` builds from
``TEE_LIVE_KUBECONFIG`` alone (``someones_cluster``: only the collection's objects written, and removed again by
the ``live`` fixture's clean-up for such a cluster), with Nodes and another tool's RuntimeClass in it: every Node,
Namespace, CRD, RuntimeClass and NodeFeatureRule keeps its resourceVersion. So the two runs prove both the apply and
that mode, once (until 2026-12-02 they ran here and again in test_any_cluster.py). Against someone's cluster
(``TEE_LIVE_KUBECONFIG``) the test runs on it and skips the conflict, the one step that writes as another tool.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
RULE = "confidential-tee-keys"


def _check_then_apply(cluster, cluster_run) -> dict[str, dict]:
    """--check --diff creates nothing and says where it would write; the real run creates what it showed."""
    dry = cluster_run(cluster, "--check", "--diff")
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert cluster.collection_objects() == {}, "--check created objects on the server"
    # It said where it would write before anything else happened.
    said = dry.flat.index("tee_output is apply (the default): the objects go by server-side apply to context tee-live")
    assert said < dry.flat.index("Read TDX/SNP readiness")
    assert "server-side dry run" in dry.flat

    applied = cluster_run(cluster, "--diff")
    assert applied.returncode == 0, applied.stdout[-4000:]
    made = cluster.collection_objects()
    assert f"NodeFeatureRule/{RULE}" in made and any(k.startswith("RuntimeClass/") for k in made), made
    # --check --diff showed the very objects the real run made.
    for key in made:
        kind, name = key.split("/")
        assert f"{kind}/{name}" in dry.flat and f"{kind}/{name}" in applied.flat
    # The second run (changed=0, and not one write request at the API server) is test_cluster_apply_live.py's, with
    # KubeVirt, the kernel mode and the GPU nodes' labels and drop-ins on top: not run twice in the 5-minute budget.
    return made


def _a_foreign_field_is_a_conflict(live, cluster_run, made: dict[str, dict]) -> None:
    """Another field manager takes a field of ours: the next run reports the conflict and leaves it alone."""
    runtime_class = next(v for k, v in made.items() if k.startswith("RuntimeClass/"))
    name = runtime_class["metadata"]["name"]
    theirs = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": runtime_class["handler"],
        "overhead": {"podFixed": {"memory": "777Mi"}},
    }
    live.apply([theirs], manager="someone-else", force=True)
    conflicted = cluster_run(live)
    assert conflicted.returncode != 0
    assert "conflict" in conflicted.flat.lower() and "someone-else" in conflicted.flat, conflicted.stdout[-4000:]
    assert live.get("runtimeclasses.node.k8s.io", name)["overhead"]["podFixed"]["memory"] == "777Mi"
    assert "Traceback" not in conflicted.stdout + conflicted.stderr


def test_check_then_apply_touch_only_the_collections_objects_and_foreign_fields_stay(
    live, cluster_run, as_someones_cluster, cleaning_up
):
    if not live.private:  # someone's cluster: the runs on it, cleaned up by the live fixture
        _check_then_apply(live, cluster_run)
        live.require_private("changes the collection's RuntimeClass as another field manager")
    theirs, before = as_someones_cluster(live)
    with cleaning_up(theirs):
        made = _check_then_apply(theirs, cluster_run)
        _a_foreign_field_is_a_conflict(live, cluster_run, made)
    assert live.versions() == before, "a run on someone's cluster changed an object it did not create"
    assert live.collection_objects() == {}
