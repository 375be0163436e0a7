"""TEE_LIVE_KUBECONFIG: the live tests against a cluster they did not start.

This session's control plane stands in for "someone's cluster": the live tests run again in a second pytest
process pointed at it by TEE_LIVE_KUBECONFIG alone, as a user would run them against a staging cluster
(docs/live-cluster.md). What they may write there is the collection's own objects, removed again afterwards;
everything else the cluster holds must come out as it went in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[2]
RULE = "confidential-tee-keys"
# The kinds whose objects a cluster has whoever runs it; the second run must leave each as it found it.
WATCHED = (
    "nodes",
    "namespaces",
    "customresourcedefinitions.apiextensions.k8s.io",
    "runtimeclasses.node.k8s.io",
    "nodefeaturerules.nfd.k8s-sigs.io",
)
SKIPPED_BECAUSE = "TEE_LIVE_KUBECONFIG names someone's cluster"


def _state(live) -> dict[str, str]:
    """Every watched object by kind/name, with the resourceVersion the server gave its last write."""
    state = {}
    for resource in WATCHED:
        for item in live.get(resource)["items"]:
            state[f"{resource}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    return state


def _pytest_against(live, *tests: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEE_LIVE_", "PYTEST_XDIST"))}
    env["TEE_LIVE_KUBECONFIG"] = str(live.kubeconfig)
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:xdist", *tests]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)


def test_the_live_tests_on_someone_elses_cluster_touch_only_the_collections_objects(live):
    live.require_private("starts the live tests against this session's cluster as someone else's")
    live.register_simulated_nodes()  # the cluster's kubelets registered its nodes
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "theirs"}}
    live.apply([{**runtime_class, "handler": "runc"}], manager="someone-else")
    before = _state(live)

    run = _pytest_against(live, "tests/live/test_cluster_live.py", "tests/live/test_kubevirt_live.py")
    assert run.returncode == 0, run.stdout[-4000:]
    # The tests that would plant, register or install skipped, saying why; the apply test got through --check,
    # the first and the second run (changed=0) and stopped only where it would change a RuntimeClass as another tool.
    assert "4 skipped" in run.stdout and run.stdout.count(SKIPPED_BECAUSE) == 4, run.stdout[-4000:]
    assert "this test changes the collection's RuntimeClass as another field manager" in run.stdout
    assert _state(live) == before
    assert live.collection_objects() == {}


def test_the_live_tests_refuse_a_cluster_that_holds_the_collections_objects(live):
    live.require_private("plants the collection's rule in this session's cluster")
    ours = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {"name": RULE},
        "spec": {"rules": [{"name": "someone ran the collection here", "labels": {"example.com/tee": "true"}}]},
    }
    live.apply([ours], manager="confidential-tee")
    before = _state(live)

    run = _pytest_against(live, "tests/live/test_cluster_live.py")
    assert run.returncode != 0
    assert f"the cluster already holds objects of confidential.tee (NodeFeatureRule/{RULE})" in run.stdout, run.stdout[
        -4000:
    ]
    assert "never change or delete what they did not create" in run.stdout
    assert _state(live) == before
