"""TEE_LIVE_KUBECONFIG: the live tests against a cluster they did not start.

This session's control plane stands in for "someone's cluster": the live tests that need a private cluster run
against it as the ``live_cluster`` fixture builds it from ``TEE_LIVE_KUBECONFIG`` alone (``someones_cluster``), as a
user would run them against a staging cluster (docs/live-cluster.md), each inside the ``live`` fixture's clean-up
(``cleaning_up``), and must skip there, saying why, leaving everything the cluster holds as it went in. They run in
this process: a second pytest process pointed at the same cluster checked the same and cost its start, its
collection and its own node trees on top (about a minute in all). The test that does write there, the collection's
own objects, removed again afterwards, is test_cluster_live.py: its --check and real run go through that view on
every run.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
RULE = "confidential-tee-keys"
# The live tests that would plant, register or install, run again on "someone's cluster": every one of them must skip
# there, saying why. (Not test_cluster_apply_live.py: its tests read one module fixture's runs, which skips first
# thing on a cluster that is not private, require_private, before it writes anything. Not test_cluster_live.py: it
# runs its own --check and real run through this view.)
ON_SOMEONES_CLUSTER = ("test_kubevirt_live.py",)
SKIPPED_BECAUSE = "TEE_LIVE_KUBECONFIG names someone's cluster"


def _tests(file: str) -> dict[str, object]:
    """The test functions of ``file`` (a module of its own: pytest imports test files by path, not by name)."""
    spec = importlib.util.spec_from_file_location(f"on_someones_cluster_{Path(file).stem}", HERE / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: test for name, test in vars(module).items() if name.startswith("test_") and callable(test)}


def _skip_reason(test, fixtures: dict, cleaned_up) -> str:
    """Run ``test`` with its fixtures taken by name from ``fixtures``, inside the ``live`` fixture's clean-up; the
    reason it skipped (it failing, or passing without a skip, fails here)."""
    with cleaned_up(fixtures["live"]), pytest.raises(pytest.skip.Exception) as skipped:
        test(**{name: fixtures[name] for name in inspect.signature(test).parameters})
    return str(skipped.value)


def test_the_live_tests_that_need_a_private_cluster_skip_on_someone_elses_and_touch_nothing(
    live, as_someones_cluster, cleaning_up, cluster_run, recap_changed, assert_refused_first, reference
):
    live.require_private("runs the live tests against this session's cluster as someone else's")
    theirs, before = as_someones_cluster(live)
    fixtures = {
        "live": theirs,
        "cluster_run": cluster_run,
        "recap_changed": recap_changed,
        "assert_refused_first": assert_refused_first,
        "reference": reference,
    }
    reasons = {
        name: _skip_reason(test, fixtures, cleaning_up)
        for file in ON_SOMEONES_CLUSTER
        for name, test in _tests(file).items()
    }
    # The tests that would plant, register or install skipped, saying why.
    assert len(reasons) >= 3 and all(SKIPPED_BECAUSE in why for why in reasons.values()), reasons
    assert live.versions() == before
    assert live.collection_objects() == {}


def test_the_live_tests_refuse_a_cluster_that_holds_the_collections_objects(live, someones_cluster):
    live.require_private("plants the collection's rule in this session's cluster")
    ours = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureRule",
        "metadata": {"name": RULE},
        "spec": {"rules": [{"name": "someone ran the collection here", "labels": {"example.com/tee": "true"}}]},
    }
    live.apply([ours], manager="confidential-tee")
    before = live.versions()

    with pytest.raises(pytest.fail.Exception) as refused:
        someones_cluster({"TEE_LIVE_KUBECONFIG": str(live.kubeconfig)})
    assert f"the cluster already holds objects of confidential.tee (NodeFeatureRule/{RULE})" in str(refused.value)
    assert "never change or delete what they did not create" in str(refused.value)
    assert live.versions() == before
