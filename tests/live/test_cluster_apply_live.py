"""cluster.yml applying every role's objects together on the real v1.37.2 API server: the NodeFeatureRule, the Kata
RuntimeClasses, KubeVirt (a CR with a gate someone set), the kernel key-pool mode's agent and admission policies
(tee_key_pool_mode: kernel on the TDX node; the SNP node's pool is NFD's) and both nodes as GPU nodes (labels and
kubelet drop-ins; tasks/cluster_batch.yml of gpu_cc_node sends them in one API pass over all the nodes).

Issue 31, C3: --check writes nothing; the first run applies it all; a second run changes nothing and sends not one
write request (counted by the real kube-apiserver); a changed label, a changed drop-in setting and a label someone
removed are still written, and nothing else. The four runs are one module fixture's, the tests read what they did:
one configuration's runs serve every property instead of three files' eight runs (the 5-minute budget of tests/live).
What the kernel mode's objects do once applied is tests/live/test_kernel_key_pool_live.py's.
"""

from __future__ import annotations

import pytest
import yaml
from kube_control_plane import installed_kubevirt, kubevirt_crds

pytestmark = pytest.mark.slow
# No containerd on the simulated nodes, no GPU Operator CC manager on the control plane to report the mode.
GPU = {"tee_node_gpu": True, "gpu_cc_node_containerd": False, "gpu_cc_node_wait_cc_state": False}
DROPIN = "etc/kubernetes/kubelet.conf.d/90-confidential-tee-gpu-cc.conf"
# Kata and KubeVirt share the TDX node's one key pool; on the SNP node they would be two pools (refused), so Kata alone.
CONSUMERS = {"tdx-1": ["kata", "kubevirt"], "snp-1": ["kata"]}
NAMESPACE = "tee-kernel-cluster"  # its own: no controller-manager here finalizes a deleted Namespace
WANTED = {"consumers": CONSUMERS, "node_vars": {"tdx-1": {"tee_key_pool_mode": "kernel"}}}
CLUSTER_VARS = {**GPU, "kernel_key_pool_namespace": NAMESPACE}
OWNED = "app.kubernetes.io/managed-by=confidential.tee"
KINDS = (
    "mutatingadmissionpolicybindings,mutatingadmissionpolicies,validatingadmissionpolicybindings,"
    "validatingadmissionpolicies,clusterrolebindings.rbac.authorization.k8s.io,clusterroles.rbac.authorization.k8s.io"
)


def _labels(live, node: str) -> dict:
    return live.get("nodes", node)["metadata"].get("labels", {})


def _runs(live, run, recap_changed) -> dict:
    """--check, the first run, a second, then a changed inventory after someone removed a label; what each did."""
    done = {}
    writes = live.write_requests()
    done["check"] = run(live, "--check", **WANTED, **CLUSTER_VARS)
    done["check_writes"] = +(live.write_requests() - writes)
    done["check_daemonsets"] = live.get("daemonsets.apps", namespace=NAMESPACE)["items"]

    done["first"] = run(live, **WANTED, **CLUSTER_VARS)
    done["first_labels"] = {node: _labels(live, node) for node in CONSUMERS}
    done["first_dropins"] = {node: (run.roots[node] / DROPIN).read_text() for node in CONSUMERS}
    done["daemonset"] = live.get("daemonsets.apps", "tee-key-agent", NAMESPACE)
    done["policies"] = {p["metadata"]["name"] for p in live.get("mutatingadmissionpolicies")["items"]}
    done["kata_tdx"] = live.get("runtimeclasses.node.k8s.io", "kata-qemu-tdx")
    done["kubevirt"] = live.get("kubevirts.kubevirt.io", "kubevirt", namespace="kubevirt")

    writes = live.write_requests()
    done["again"] = run(live, **WANTED, **CLUSTER_VARS)
    done["again_writes"] = +(live.write_requests() - writes)
    done["again_changed"] = recap_changed(done["again"].stdout) if "PLAY RECAP" in done["again"].stdout else -1

    # Someone removes a label of ours; the inventory changes another label and a drop-in setting.
    live.kubectl("label", "node", "snp-1", "nvidia.com/cc.mode-")
    writes = live.write_requests()
    labels = {"nvidia.com/gpu.workload.config": "vm-passthrough", "example.com/team": "gpu"}
    changed = {**CLUSTER_VARS, "gpu_cc_node_labels": labels, "gpu_cc_node_runtime_request_timeout": "25m"}
    done["changed"] = run(live, **WANTED, **changed)
    done["changed_writes"] = +(live.write_requests() - writes)
    done["changed_labels"] = {node: _labels(live, node) for node in CONSUMERS}
    done["changed_dropins"] = {node: yaml.safe_load((run.roots[node] / DROPIN).read_text()) for node in CONSUMERS}
    return done


@pytest.fixture(scope="module")
def applied(live_cluster, cleaning_up, module_cluster_run, recap_changed):
    """The four runs' outcomes (:func:`_runs`), on a cluster with the nodes, KubeVirt's CRD and a KubeVirt CR."""
    live_cluster.require_private(
        "registers Nodes, installs KubeVirt's CRD, a KubeVirt CR and admission policies, and counts write requests"
    )
    (crd,) = [yaml.safe_load(path.read_text()) for path in kubevirt_crds() if path.name == "kubevirts.kubevirt.io.yaml"]
    with cleaning_up(live_cluster) as live:
        live.register_simulated_nodes()
        try:  # the CRD is removed again even when its install fails half-way: the next test needs a cluster without it
            live.install_crd(crd)
            live.plane.load_objects([installed_kubevirt()])  # with a gate someone set
            yield _runs(live, module_cluster_run, recap_changed)
        finally:
            live.kubectl("delete", KINDS, "-l", OWNED, check=False)
            live.kubectl("delete", "roles,rolebindings", "-n", "default", "-l", OWNED, check=False)
            live.kubectl("delete", "daemonsets,serviceaccounts", "-n", NAMESPACE, "-l", OWNED, check=False)
            live.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
            kubevirts = ("kubevirts.kubevirt.io", "--all", "-n", "kubevirt", "--wait=true", "--timeout=60s")
            live.kubectl("delete", *kubevirts, check=False)
            live.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=true", "--timeout=60s", check=False)


def test_check_writes_nothing(applied):
    check = applied["check"]
    assert check.returncode == 0, check.stdout[-4000:]
    assert all("(dry run)" in write for write in applied["check_writes"]), applied["check_writes"]
    assert applied["check_daemonsets"] == []


def test_the_first_run_applies_every_roles_objects(applied):
    first = applied["first"]
    assert first.returncode == 0, first.stdout[-4000:]
    for node in CONSUMERS:
        assert applied["first_labels"][node]["nvidia.com/cc.mode"] == "on"
        assert applied["first_labels"][node]["nvidia.com/gpu.workload.config"] == "vm-passthrough"
        assert "runtimeRequestTimeout: 20m" in applied["first_dropins"][node]
    # The key agent runs on the kernel-mode node alone; only TDX has KubeVirt in kernel mode: one policy.
    pod = applied["daemonset"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [term["matchFields"][0]["values"] for term in terms] == [["tdx-1"]]
    assert applied["policies"] == {"confidential-tee-key-pool-tdx"}
    overhead = applied["kata_tdx"]["overhead"]["podFixed"]
    assert overhead["tdx.intel.com/keys"] == "1", overhead
    # KubeVirt merge-patched: the gate someone set stays first, the TDX gate is added.
    gates = applied["kubevirt"]["spec"]["configuration"]["developerConfiguration"]["featureGates"]
    assert gates[0] == "Snapshot" and "WorkloadEncryptionTDX" in gates, gates


def test_a_second_run_changes_nothing_and_sends_no_write(applied):
    again = applied["again"]
    assert again.returncode == 0, again.stdout[-4000:]
    assert applied["again_changed"] == 0, again.stdout[-4000:]
    assert applied["again_writes"] == {}, "the second run sent writes"


def test_a_changed_label_drop_in_and_a_removed_label_are_written_and_nothing_else(applied):
    changed = applied["changed"]
    assert changed.returncode == 0, changed.stdout[-4000:]
    # One merge patch per Node (a dry run first, then the write); nothing else.
    assert applied["changed_writes"] == {"PATCH (dry run) nodes": 2, "PATCH nodes": 2}, applied["changed_writes"]
    for node in CONSUMERS:
        assert applied["changed_labels"][node]["example.com/team"] == "gpu"
        assert applied["changed_labels"][node]["nvidia.com/cc.mode"] == "on"
        assert applied["changed_dropins"][node]["runtimeRequestTimeout"] == "25m"
