"""cluster.yml in apply mode writes only what differs (issue 31, C3): a second run sends no write request at all
(counted by the real kube-apiserver), and a changed label, a changed drop-in or a label someone removed is still
written. The GPU nodes' labels go through one API pass over all of them (tasks/cluster_batch.yml of gpu_cc_node).
"""

from __future__ import annotations

import pytest
import yaml

pytestmark = pytest.mark.slow
# No containerd on the simulated nodes, no GPU Operator CC manager on the control plane to report the mode.
GPU = {"tee_node_gpu": True, "gpu_cc_node_containerd": False, "gpu_cc_node_wait_cc_state": False}
DROPIN = "etc/kubernetes/kubelet.conf.d/90-confidential-tee-gpu-cc.conf"


def _labels(live, node: str) -> dict:
    return live.get("nodes", node)["metadata"].get("labels", {})


def test_a_second_run_sends_no_write_and_a_change_is_still_written(live, cluster_run, recap_changed, tmp_path):
    live.require_private("registers Nodes and counts the API server's write requests")
    live.register_simulated_nodes()
    first = cluster_run(live, **GPU)
    assert first.returncode == 0, first.stdout[-4000:]
    for node in ("tdx-1", "snp-1"):
        assert _labels(live, node)["nvidia.com/cc.mode"] == "on"
        assert _labels(live, node)["nvidia.com/gpu.workload.config"] == "vm-passthrough"
        assert "runtimeRequestTimeout: 20m" in (tmp_path / "nodes" / node / DROPIN).read_text()

    before = live.write_requests()
    again = cluster_run(live, **GPU)
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap_changed(again.stdout) == 0, again.stdout[-4000:]
    assert +(live.write_requests() - before) == {}, "the second run sent writes"

    # Someone removes a label of ours; the inventory changes another label and a drop-in setting.
    live.kubectl("label", "node", "snp-1", "nvidia.com/cc.mode-")
    before = live.write_requests()
    changed = cluster_run(
        live,
        **GPU,
        gpu_cc_node_labels={"nvidia.com/gpu.workload.config": "vm-passthrough", "example.com/team": "gpu"},
        gpu_cc_node_runtime_request_timeout="25m",
    )
    assert changed.returncode == 0, changed.stdout[-4000:]
    sent = +(live.write_requests() - before)
    # One merge patch per Node (a dry run first, then the write); nothing else.
    assert sent == {"PATCH (dry run) nodes": 2, "PATCH nodes": 2}, sent
    for node in ("tdx-1", "snp-1"):
        assert _labels(live, node)["example.com/team"] == "gpu"
        assert _labels(live, node)["nvidia.com/cc.mode"] == "on"
        kubelet = yaml.safe_load((tmp_path / "nodes" / node / DROPIN).read_text())
        assert kubelet["runtimeRequestTimeout"] == "25m"
