"""tee_cluster_apply: dry runs of every differing object before the first write; nothing sent when nothing differs.

The API calls are recorded by a stand-in for the module's Cluster (tests/live/test_cluster_apply_live.py runs the
module against a real kube-apiserver).
"""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster.apply_plan import plan_step
from ansible_collections.confidential.tee.plugins.modules import tee_cluster_apply as mod

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": {"nvidia.com/cc.mode": "on"}}}
OTHER = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-2", "labels": {"nvidia.com/cc.mode": "on"}}}


class Recorder(mod.Cluster):
    def __init__(self, live: dict, refuse: str | None = None):
        super().__init__(client=None, state="patched", manager="confidential-tee", force=False)
        self.live, self.refuse, self.calls = live, refuse, []

    def read(self, objects):
        self.calls.append(("read", len(objects)))
        return {k: v for k, v in self.live.items() if k in {f"Node/{o['metadata']['name']}" for o in objects}}

    def send(self, step, dry_run):
        self.calls.append(("dry run" if dry_run else "write", step.ref))
        if dry_run and step.ref == self.refuse:
            raise mod.ApiException(status=422, reason="Invalid")
        if not dry_run:
            self.live[step.ref] = NODE if step.ref == "Node/gpu-1" else OTHER


class Module:
    def __init__(self, check_mode=False, diff=False):
        self.check_mode, self._diff = check_mode, diff


def test_nothing_differs_nothing_is_sent():
    cluster = Recorder({"Node/gpu-1": NODE, "Node/gpu-2": OTHER})
    result = mod.run(Module(), cluster, [NODE, OTHER])
    assert cluster.calls == [("read", 2)]
    assert result["changed"] is False and result["writes"] == 0
    assert result["changes"]["written"] == result["changes"]["removed"] == []
    assert result["changes"]["entries"] == [
        {"name": "Node/gpu-1", "changed": False, "reasons": ["unchanged"]},
        {"name": "Node/gpu-2", "changed": False, "reasons": ["unchanged"]},
    ]


def test_every_differing_object_is_dry_run_before_the_first_write_and_read_back():
    stale = {**OTHER, "metadata": {"name": "gpu-2", "labels": {"nvidia.com/cc.mode": "off"}}}
    cluster = Recorder({"Node/gpu-1": {**NODE, "metadata": {"name": "gpu-1"}}, "Node/gpu-2": stale})
    result = mod.run(Module(diff=True), cluster, [NODE, OTHER])
    assert cluster.calls == [
        ("read", 2),
        ("dry run", "Node/gpu-1"),
        ("dry run", "Node/gpu-2"),
        ("write", "Node/gpu-1"),
        ("write", "Node/gpu-2"),
        ("read", 2),
    ]
    assert result["changes"]["written"] == ["Node/gpu-1", "Node/gpu-2"]
    assert result["writes"] == 2 and [d["before_header"] for d in result["diff"]] == ["Node/gpu-1", "Node/gpu-2"]
    assert '"off"' in result["diff"][1]["before"] and '"on"' in result["diff"][1]["after"]


def test_one_refused_dry_run_writes_none_and_check_mode_writes_nothing():
    cluster = Recorder(
        {"Node/gpu-1": {**NODE, "metadata": {"name": "gpu-1"}}, "Node/gpu-2": {**OTHER, "metadata": {"name": "gpu-2"}}},
        refuse="Node/gpu-2",
    )
    with pytest.raises(mod.ApplyError, match=r"refused Node/gpu-2: 422 Invalid\. Nothing was changed"):
        mod.run(Module(), cluster, [NODE, OTHER])
    assert not [c for c in cluster.calls if c[0] == "write"]
    cluster = Recorder({"Node/gpu-1": {**NODE, "metadata": {"name": "gpu-1"}}})
    result = mod.run(Module(check_mode=True), cluster, [NODE])
    assert result["changed"] is True and result["writes"] == 0
    assert result["changes"]["written"] == ["Node/gpu-1"]  # what would be sent
    assert cluster.calls == [("read", 1), ("dry run", "Node/gpu-1")]
    assert plan_step(NODE, cluster.live["Node/gpu-1"], "patched", "confidential-tee").writes


def test_a_deletion_is_named_among_the_removed():
    cluster = Recorder({"Node/gpu-1": NODE})
    cluster.state = "absent"
    result = mod.run(Module(check_mode=True), cluster, [NODE, OTHER])
    assert result["changes"]["removed"] == ["Node/gpu-1"] and result["changes"]["written"] == []
    assert [entry["reasons"] for entry in result["changes"]["entries"]] == [
        [step["action"]] for step in result["objects"]
    ]
    assert result["changes"]["entries"][0] == {"name": "Node/gpu-1", "changed": True, "reasons": ["delete"]}
