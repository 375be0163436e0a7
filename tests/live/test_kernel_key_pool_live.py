"""The kernel key-pool mode's objects on the real v1.37.2 API server (issue 45): the key agent's DaemonSet and RBAC,
its own-node ValidatingAdmissionPolicy and the MutatingAdmissionPolicy that charges virt-launcher pods.

Proven here: the objects are accepted; ``--check`` writes nothing; a second apply sends no write; the admission
policy adds ``<pool>: 1`` to the requests and limits of a virt-launcher pod's TEE container and changes nothing else
of it, nor of a plain pod, a Kata pod or a virt-launcher pod without the TEE device; the agent's service account can
patch the status of its own Node's pool entry and of nothing else.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request

import pytest
import yaml
from teesim.fixtures import k8s_objects

pytestmark = pytest.mark.slow

NAMESPACE = "tee-kernel-live"
TDX_POOL, SNP_POOL = "tdx.intel.com/keys", "sev-snp.amd.com/esids"
PLAN = {
    "kernel": {
        "tdx": {"resource": TDX_POOL, "kubevirt_resource": "devices.kubevirt.io/tdx", "nodes": ["tdx-1"]},
        "snp": {"resource": SNP_POOL, "kubevirt_resource": "devices.kubevirt.io/sev", "nodes": ["snp-1"]},
    }
}
CLUSTER_KINDS = (
    "mutatingadmissionpolicybindings,mutatingadmissionpolicies,validatingadmissionpolicybindings,"
    "validatingadmissionpolicies,clusterrolebindings.rbac.authorization.k8s.io,clusterroles.rbac.authorization.k8s.io"
)


def _playbook(tmp_path, check: bool = False):
    """The kernel_key_pool role applying the plan's objects through the collection's one apply path."""
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "tasks": [
                {
                    "name": "Kernel mode objects",
                    "ansible.builtin.include_role": {"name": "confidential.tee.kernel_key_pool"},
                    "vars": {
                        "kernel_key_pool_key_pools": PLAN,
                        "kernel_key_pool_output": "apply",
                        "kernel_key_pool_namespace": NAMESPACE,
                    },
                }
            ],
        }
    ]
    path = tmp_path / "kernel.yml"
    path.write_text(yaml.safe_dump(play))
    return path


def _new(obj: dict) -> dict:
    """A fixture object as a client would create it (no server-set fields, no status, no overhead)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in {"uid", "resourceVersion", "creationTimestamp"}}
    meta.pop("ownerReferences", None)
    new = {k: v for k, v in obj.items() if k != "status"}
    new["metadata"] = meta
    if obj["kind"] == "Pod":
        # No token volume: its name is random (kube-api-access-xxxxx), and two admissions of one pod must compare.
        new["spec"] = {k: v for k, v in obj["spec"].items() if k != "overhead"} | {
            "automountServiceAccountToken": False
        }
    return new


def _pods() -> dict:
    kata_class = k8s_objects.runtime_class("kata-qemu-tdx", "kata-qemu-tdx", {TDX_POOL: "1"}, {})
    plain = k8s_objects.kata_pod("plain-app-1", "tdx-1", kata_class)
    plain["spec"].pop("runtimeClassName")
    plain["spec"].pop("overhead")
    return {
        "tdx-launcher": _new(k8s_objects.virt_launcher_pod("vm-tdx", "tdx-1", "devices.kubevirt.io/tdx")),
        "snp-launcher": _new(k8s_objects.virt_launcher_pod("vm-snp", "snp-1", "devices.kubevirt.io/sev")),
        "plain-launcher": _new(k8s_objects.virt_launcher_pod("vm-plain", "tdx-1", "devices.kubevirt.io/kvm")),
        "kata": _new(k8s_objects.kata_pod("kata-app-1", "tdx-1", kata_class)),
        "plain": _new(plain),
    }


def _admitted(cluster, pod: dict) -> dict:
    """The pod as the API server would store it (server-side dry run: admission runs, nothing is kept)."""
    done = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
    return json.loads(done.stdout)["spec"]


def _wait_charged(cluster, pod: dict, timeout: float = 60) -> dict:
    """A newly bound admission policy takes a moment to load: the admitted pod once it is charged."""
    deadline = time.monotonic() + timeout
    while True:
        spec = _admitted(cluster, pod)
        if TDX_POOL in spec["containers"][0]["resources"].get("limits", {}):
            return spec
        if time.monotonic() > deadline:
            raise AssertionError(f"the policy did not charge the TDX virt-launcher pod after {timeout:.0f} s: {spec}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def kernel_cluster(live_cluster, tmp_path_factory, ansible_playbook_cli, recap_changed):
    """The cluster before and after the role applied the kernel mode's objects, with every run's outcome."""
    live_cluster.require_private("registers Nodes, installs admission policies and counts write requests")
    live_cluster.register_simulated_nodes()
    tmp_path = tmp_path_factory.mktemp("kernel")
    pods = _pods()
    setup = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in ("vms", "confidential")]
    setup += [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}
        for ns in ("vms", "confidential")
    ]
    setup.append(_new(k8s_objects.runtime_class("kata-qemu-tdx", "kata-qemu-tdx", {TDX_POOL: "1"}, {})))
    live_cluster.apply(setup, manager="tee-live-setup")
    env = {"KUBECONFIG": "/nonexistent"}
    access = ["-e", f"tee_kubeconfig={live_cluster.kubeconfig}"]
    outcome = {"before": {name: _admitted(live_cluster, pod) for name, pod in pods.items()}, "pods": pods}
    writes = live_cluster.write_requests()
    outcome["check"] = ansible_playbook_cli(_playbook(tmp_path), "--check", *access, env=env)
    outcome["check_writes"] = +(live_cluster.write_requests() - writes)
    outcome["after_check"] = live_cluster.get("mutatingadmissionpolicies")["items"]
    outcome["apply"] = ansible_playbook_cli(_playbook(tmp_path), *access, env=env)
    writes = live_cluster.write_requests()
    outcome["again"] = ansible_playbook_cli(_playbook(tmp_path), *access, env=env)
    outcome["again_writes"] = +(live_cluster.write_requests() - writes)
    outcome["again_changed"] = recap_changed(outcome["again"].stdout) if "PLAY RECAP" in outcome["again"].stdout else -1
    try:
        yield live_cluster, outcome
    finally:
        owned = "app.kubernetes.io/managed-by=confidential.tee"
        live_cluster.kubectl("delete", CLUSTER_KINDS, "-l", owned, check=False)
        live_cluster.kubectl("delete", "roles,rolebindings", "-n", "default", "-l", owned, check=False)
        live_cluster.kubectl("delete", "runtimeclasses.node.k8s.io", "kata-qemu-tdx", "--ignore-not-found", check=False)
        live_cluster.kubectl("delete", "pods", "-n", NAMESPACE, "--all", "--wait=false", check=False)
        # No controller-manager here finalizes a Namespace: deleted, it stays Terminating; the name is this file's own.
        live_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        live_cluster.kubectl("delete", "nodes", "--all", check=False)


def test_check_writes_nothing_apply_is_accepted_and_a_second_apply_sends_no_write(kernel_cluster):
    cluster, outcome = kernel_cluster
    assert outcome["check"].returncode == 0, outcome["check"].stdout[-4000:]
    assert outcome["after_check"] == [], "--check created admission policies"
    assert all("(dry run)" in write for write in outcome["check_writes"]), outcome["check_writes"]
    assert outcome["apply"].returncode == 0, outcome["apply"].stdout[-4000:]
    assert "Key agent (localhost/confidential-tee/key-agent:" in outcome["apply"].flat
    assert outcome["again"].returncode == 0, outcome["again"].stdout[-4000:]
    assert outcome["again_changed"] == 0, outcome["again"].stdout[-4000:]
    assert outcome["again_writes"] == {}, "the second run sent writes"
    ds = cluster.get("daemonsets.apps", "tee-key-agent", NAMESPACE)
    assert ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] is True
    names = {p["metadata"]["name"] for p in cluster.get("mutatingadmissionpolicies")["items"]}
    assert names == {"confidential-tee-key-pool-tdx", "confidential-tee-key-pool-snp"}
    # No controller-manager here makes the DaemonSet's pods: its template, bound to a node as the DaemonSet controller
    # binds it, passes admission (Pod Security for the hostPaths, the PriorityClass, the ServiceAccount).
    template = ds["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "tee-key-agent-",
            "namespace": NAMESPACE,
            "labels": template["metadata"]["labels"],
        },
        "spec": {**template["spec"], "nodeName": "tdx-1"},
    }
    admitted = _admitted(cluster, pod)
    assert admitted["priorityClassName"] == "system-node-critical" and admitted["priority"] > 0, admitted


def test_the_policy_charges_the_tee_container_of_virt_launcher_pods_and_nothing_else(kernel_cluster):
    cluster, outcome = kernel_cluster
    pods, before = outcome["pods"], outcome["before"]
    charged = _wait_charged(cluster, pods["tdx-launcher"])
    expected = json.loads(json.dumps(before["tdx-launcher"]))
    for key in ("requests", "limits"):
        assert TDX_POOL not in expected["containers"][0]["resources"][key]
        expected["containers"][0]["resources"][key][TDX_POOL] = "1"
    assert charged == expected

    snp = _admitted(cluster, pods["snp-launcher"])
    expected = json.loads(json.dumps(before["snp-launcher"]))
    for key in ("requests", "limits"):
        expected["containers"][0]["resources"][key][SNP_POOL] = "1"
    assert snp == expected

    for name in ("plain-launcher", "kata", "plain"):
        assert _admitted(cluster, pods[name]) == before[name], f"the policy changed the {name} pod"


def test_a_container_that_already_charges_the_pool_keeps_its_count(kernel_cluster):
    cluster, outcome = kernel_cluster
    pod = json.loads(json.dumps(outcome["pods"]["tdx-launcher"]))
    _wait_charged(cluster, pod)
    for key in ("requests", "limits"):
        pod["spec"]["containers"][0]["resources"][key][TDX_POOL] = "2"
    spec = _admitted(cluster, pod)
    assert spec["containers"][0]["resources"]["limits"][TDX_POOL] == "2"


def _agent_token(cluster, pod_name: str) -> str:
    """A token of the agent's service account bound to ``pod_name`` (what the kubelet mounts into the agent's pod)."""
    bound = ("--bound-object-kind=Pod", f"--bound-object-name={pod_name}")
    return cluster.kubectl("create", "token", "tee-key-agent", "-n", NAMESPACE, *bound).stdout.strip()


def _agent_kubeconfig(cluster, tmp_path, token: str) -> str:
    plane = cluster.plane
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "live",
                "cluster": {
                    "server": plane.server,
                    "certificate-authority-data": base64.b64encode(plane.ca.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "agent", "context": {"cluster": "live", "user": "agent"}}],
        "current-context": "agent",
    }
    path = tmp_path / "agent.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return str(path)


def _patch_status(cluster, token: str, node: str, capacity: dict, dry_run: bool = False) -> tuple[int, str]:
    """The agent's own request (plugins/module_utils/agent/kube.py): one strategic-merge PATCH of the Node's status,
    no GET first (kubectl patch --subresource=status would GET nodes/status, which the agent is not granted)."""
    body = json.dumps({"status": {"capacity": capacity, "allocatable": capacity}}).encode()
    url = f"{cluster.plane.server}/api/v1/nodes/{node}/status" + ("?dryRun=All" if dry_run else "")
    request = urllib.request.Request(url, data=body, method="PATCH")
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/strategic-merge-patch+json")
    context = ssl.create_default_context(cafile=str(cluster.plane.ca))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_the_agent_may_patch_only_its_own_nodes_pool_entry(kernel_cluster, tmp_path):
    cluster, _outcome = kernel_cluster
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent-probe", "namespace": NAMESPACE},
        "spec": {
            "nodeName": "tdx-1",
            "serviceAccountName": "tee-key-agent",
            "containers": [{"name": "agent", "image": "localhost/confidential-tee/key-agent:probe"}],
        },
    }
    cluster.apply([probe], manager="tee-live-setup")
    token = _agent_token(cluster, "agent-probe")
    kubeconfig = _agent_kubeconfig(cluster, tmp_path, token)

    def as_agent(*args: str):
        return cluster.kubectl(*args, kubeconfig=kubeconfig, check=False)

    def refused(node: str, capacity: dict) -> str:
        """The refusal of a (dry-run) patch, once the just-applied policy is loaded."""
        deadline = time.monotonic() + 60
        while (answer := _patch_status(cluster, token, node, capacity, dry_run=True))[0] == 200:
            assert time.monotonic() < deadline, f"the agent may still patch {node} with {capacity}"
            time.sleep(0.5)
        return answer[1]

    assert as_agent("get", "node", "tdx-1").returncode == 0
    assert as_agent("get", "pods", "-A", "--field-selector=spec.nodeName=tdx-1").returncode == 0
    own = _patch_status(cluster, token, "tdx-1", {TDX_POOL: "5"})
    assert own[0] == 200, own
    assert cluster.get("nodes", "tdx-1")["status"]["allocatable"][TDX_POOL] == "5"

    other = refused("snp-1", {SNP_POOL: "5"})
    assert "only the Node its pod runs on" in other, other
    memory = refused("tdx-1", {"memory": "1Ti"})
    assert "only its pool's entry" in memory, memory
    for forbidden in (
        ("delete", "node", "tdx-1", "--dry-run=server"),
        ("get", "secrets", "-A"),
        ("patch", "node", "tdx-1", "--type=merge", "-p", '{"metadata":{"labels":{"x":"y"}}}'),
    ):
        refused = as_agent(*forbidden)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (forbidden, refused.stderr)
