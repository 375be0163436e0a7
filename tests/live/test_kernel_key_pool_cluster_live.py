"""confidential.tee.cluster with nodes in tee_key_pool_mode kernel, against the real v1.37.2 API server: the kernel
mode's objects go with the other roles' (NodeFeatureRule, RuntimeClasses, KubeVirt) through the one apply, --check
writes nothing, and a second run changes nothing. What the objects do is tests/live/test_kernel_key_pool_live.py's."""

from __future__ import annotations

import pytest
import yaml
from kube_control_plane import kubevirt_crds

pytestmark = pytest.mark.slow
NAMESPACE = "tee-kernel-cluster"  # its own: no controller-manager here finalizes a deleted Namespace
CONSUMERS = {"tdx-1": ["kata", "kubevirt"], "snp-1": ["kata"]}
OWNED = "app.kubernetes.io/managed-by=confidential.tee"
KINDS = (
    "mutatingadmissionpolicybindings,mutatingadmissionpolicies,validatingadmissionpolicybindings,"
    "validatingadmissionpolicies,clusterrolebindings.rbac.authorization.k8s.io,clusterroles.rbac.authorization.k8s.io"
)


def test_the_cluster_playbook_applies_the_kernel_mode_with_the_other_roles(live, cluster_run, recap_changed):
    live.require_private("installs KubeVirt's CRD, a KubeVirt CR and admission policies")
    live.register_simulated_nodes()
    (crd,) = [yaml.safe_load(path.read_text()) for path in kubevirt_crds() if path.name == "kubevirts.kubevirt.io.yaml"]
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": []}}},
        "status": {"phase": "Deployed", "observedKubeVirtVersion": "v1.9.0"},
    }
    wanted = {"tee_key_pool_mode": "kernel", "kernel_key_pool_namespace": NAMESPACE}
    try:
        live.install_crd(crd)
        live.plane.load_objects([kubevirt])
        writes = live.write_requests()
        check = cluster_run(live, "--check", consumers=CONSUMERS, **wanted)
        assert check.returncode == 0, check.stdout[-4000:]
        assert all("(dry run)" in write for write in +(live.write_requests() - writes)), "--check wrote"
        assert live.get("daemonsets.apps", namespace=NAMESPACE)["items"] == []

        first = cluster_run(live, consumers=CONSUMERS, **wanted)
        assert first.returncode == 0, first.stdout[-4000:]
        pod = live.get("daemonsets.apps", "tee-key-agent", NAMESPACE)["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert [term["matchFields"][0]["values"] for term in terms] == [["snp-1"], ["tdx-1"]]
        # Only TDX has KubeVirt in kernel mode: one policy.
        policies = {p["metadata"]["name"] for p in live.get("mutatingadmissionpolicies")["items"]}
        assert policies == {"confidential-tee-key-pool-tdx"}
        overhead = live.get("runtimeclasses.node.k8s.io", "kata-qemu-tdx")["overhead"]["podFixed"]
        assert overhead["tdx.intel.com/keys"] == "1", overhead

        writes = live.write_requests()
        again = cluster_run(live, consumers=CONSUMERS, **wanted)
        assert again.returncode == 0, again.stdout[-4000:]
        assert recap_changed(again.stdout) == 0, again.stdout[-4000:]
        assert +(live.write_requests() - writes) == {}, "the second run sent writes"
    finally:
        live.kubectl("delete", KINDS, "-l", OWNED, check=False)
        live.kubectl("delete", "roles,rolebindings", "-n", "default", "-l", OWNED, check=False)
        live.kubectl("delete", "daemonsets,serviceaccounts", "-n", NAMESPACE, "-l", OWNED, check=False)
        live.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        live.kubectl(
            "delete", "kubevirts.kubevirt.io", "--all", "-n", "kubevirt", "--wait=true", "--timeout=60s", check=False
        )
        live.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=true", "--timeout=60s", check=False)
