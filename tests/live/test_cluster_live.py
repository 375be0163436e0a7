"""confidential.tee.cluster applied to a real kube-apiserver through ansible-playbook and kubernetes.core.

The nodes are simulated (teesim host trees for the host facts; their Node objects registered first, with the
status a kubelet writes); the API server, etcd, TLS, RBAC and admission are real (tests/live/conftest.py).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
RULE = "confidential-tee-keys"


def test_check_then_apply_then_nothing_changes_and_foreign_fields_stay(live, cluster_run):
    live.register_simulated_nodes()
    dry = cluster_run(live, "--check", "--diff")
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert live.collection_objects() == {}, "--check created objects on the server"
    # It said where it would write before anything else happened.
    said = dry.flat.index("tee_output is apply (the default): the objects go by server-side apply to context tee-live")
    assert said < dry.flat.index("Read TDX/SNP readiness")
    assert "server-side dry run" in dry.flat

    applied = cluster_run(live, "--diff")
    assert applied.returncode == 0, applied.stdout[-4000:]
    made = live.collection_objects()
    assert f"NodeFeatureRule/{RULE}" in made and any(k.startswith("RuntimeClass/") for k in made), made
    # --check --diff showed the very objects the real run made.
    for key in made:
        kind, name = key.split("/")
        assert f"{kind}/{name}" in dry.flat and f"{kind}/{name}" in applied.flat

    # The second run (changed=0, and not one write request at the API server) is test_cluster_apply_live.py's, with
    # KubeVirt, the kernel mode and the GPU nodes' labels and drop-ins on top: not run twice in the 5-minute budget.

    # Another field manager takes a field of ours: the next run reports the conflict and leaves it alone.
    live.require_private("changes the collection's RuntimeClass as another field manager")
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
