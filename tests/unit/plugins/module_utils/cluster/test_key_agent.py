"""The kernel mode's cluster objects: the key agent's DaemonSet and RBAC, the admission policies (cluster/key_agent.py).

What the policies do to pods is proven on the real API server (tests/live/test_kernel_key_pool_live.py); here the
rendering, its inputs and the schemas.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.confidential.tee.plugins.module_utils.cluster import key_agent
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import file_name

VALIDATE = Path(sys.executable).parent / "kubernetes-validate"
IMAGE = "localhost/confidential-tee/key-agent:0.1.0"
TDX = {"resource": "tdx.intel.com/keys", "kubevirt_resource": "devices.kubevirt.io/tdx", "nodes": ["tdx-2", "tdx-1"]}
SNP = {"resource": "sev-snp.amd.com/esids", "nodes": ["snp-1"]}
PLAN = {"kernel": {"tdx": TDX, "snp": SNP}}


def _render(plan=None, **options):
    return key_agent.render(PLAN if plan is None else plan, {"image": IMAGE, **options})


def _by_kind(objects):
    return {obj["kind"]: obj for obj in objects}


def test_no_kernel_mode_node_renders_nothing_and_needs_no_image():
    assert key_agent.render({"kata": {}}, None) == {"objects": [], "nodes": [], "policies": []}
    assert key_agent.render({"kernel": {}}, None)["objects"] == []


def test_the_objects_in_apply_order():
    rendered = _render()
    kinds = [obj["kind"] for obj in rendered["objects"]]
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DaemonSet",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    assert rendered["nodes"] == ["snp-1", "tdx-1", "tdx-2"]
    # Only TDX has KubeVirt nodes in kernel mode: no SEV policy.
    assert rendered["policies"] == ["confidential-tee-key-pool-tdx"]


def test_the_daemonset_runs_only_on_the_kernel_nodes_reading_the_host_trees_read_only():
    ds = _by_kind(_render(reserve={"tdx": 2, "sev_es": 0})["objects"])["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        for name in ("snp-1", "tdx-1", "tdx-2")
    ]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"] == [
        "--host-root=/host",
        "--interval=0.5",
        "--log-format=json",
        "--reserve=sev_es=0",
        "--reserve=tdx=2",
    ]
    assert container["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert container["volumeMounts"] == [
        {"name": "cgroup", "mountPath": "/host/sys/fs/cgroup", "readOnly": True},
        {"name": "modules", "mountPath": "/host/sys/module", "readOnly": True},
    ]
    assert pod["volumes"] == [
        {"name": "cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}},
        {"name": "modules", "hostPath": {"path": "/sys/module", "type": "Directory"}},
    ]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["serviceAccountName"] == "tee-key-agent"
    assert ds["metadata"]["namespace"] == "confidential-tee"


def test_rbac_grants_exactly_the_verbs_the_agent_uses_and_no_wildcard():
    objects = _by_kind(_render(namespace="tee-agents")["objects"])
    rules = objects["ClusterRole"]["rules"]
    granted = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in rules}
    assert granted == {("", "pods"): {"list"}, ("", "nodes"): {"get"}, ("", "nodes/status"): {"patch"}}
    assert all(len(r["apiGroups"]) == len(r["resources"]) == 1 for r in rules)
    # Events only where the agent posts them (kube.py: namespace default, as the kubelet's node events).
    assert objects["Role"]["metadata"]["namespace"] == "default"
    assert objects["Role"]["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    assert objects["RoleBinding"]["subjects"] == objects["ClusterRoleBinding"]["subjects"]
    assert objects["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "tee-key-agent", "namespace": "tee-agents"}
    ]
    assert objects["ServiceAccount"]["metadata"]["namespace"] == "tee-agents"
    # Every permission has its reason (docs/cluster.md's RBAC table).
    assert all(len(reason) > 20 for *_rule, reason in key_agent.RBAC_RULES + key_agent.EVENT_RULES)


def test_the_admission_policy_matches_virt_launcher_pod_creation_and_names_both_resources():
    policy = _by_kind(_render()["objects"])["MutatingAdmissionPolicy"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert '"kubevirt.io"' in conditions["virt-launcher"] and '"virt-launcher"' in conditions["virt-launcher"]
    assert '"devices.kubevirt.io/tdx"' in conditions["requests-kubevirt-tee-device"]
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    assert '{"tdx.intel.com/keys": "1"}' in mutation["applyConfiguration"]["expression"]


def test_without_the_own_node_policy_it_is_left_out():
    kinds = [o["kind"] for o in _render(own_node_policy=False)["objects"]]
    assert "ValidatingAdmissionPolicy" not in kinds


@pytest.mark.parametrize(
    ("options", "option", "wanted"),
    [
        ({"image": "localhost/x:1\nkind: Secret"}, "image", "not an image reference"),
        ({"image": None}, "image", "not an image reference"),
        ({"namespace": "Bad_NS"}, "namespace", "not a namespace name"),
        ({"interval": "0"}, "interval", "positive number"),
        ({"interval": "1; rm"}, "interval", "positive number"),
        ({"reserve": {"tdx": -1}}, "reserve", "whole number"),
        ({"reserve": {"tdx": True}}, "reserve", "whole number"),
        ({"reserve": {"tdx x": 1}}, "reserve", "not a resource name"),
        ({"reserve": "tdx=1"}, "reserve", "a mapping"),
        ({"log_format": "xml"}, "log_format", "text or json"),
        ({"tolerations": "all"}, "tolerations", "list of toleration"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options, option, wanted):
    with pytest.raises(key_agent.KeyAgentError, match=wanted) as refused:
        key_agent.render(PLAN, {"image": IMAGE, **options})
    assert refused.value.option == option


@pytest.mark.parametrize(
    "pool",
    [
        {**TDX, "resource": 'tdx.intel.com/keys" || true || "'},
        {**TDX, "kubevirt_resource": "devices.kubevirt.io/tdx\n"},
        {**TDX, "nodes": []},
        {**TDX, "nodes": ["Not_A_Node"]},
        "tdx",
    ],
)
def test_a_plan_entry_that_could_change_the_policies_meaning_is_refused(pool):
    with pytest.raises(key_agent.KeyAgentError):
        _render({"kernel": {"tdx": pool}})


def test_every_object_passes_the_real_schemas_strictly(tmp_path):
    if not VALIDATE.exists():
        pytest.skip("kubernetes-validate is not installed (make venv installs the dev extra)")
    objects = _render(tolerations=[{"key": "tee", "operator": "Exists", "effect": "NoSchedule"}])["objects"]
    for obj in objects:
        (tmp_path / file_name(obj)).write_text(yaml.safe_dump(obj, sort_keys=False))
    files = sorted(str(path) for path in tmp_path.iterdir())
    done = subprocess.run(
        [str(VALIDATE), "--strict", "-k", "1.37.0", *files], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == len(objects)


def test_the_docs_rbac_table_is_the_rules():
    text = (Path(__file__).resolve().parents[5] / "docs" / "cluster.md").read_text()
    table = text.split("<!-- rbac-table -->", 1)[1].split("<!-- /rbac-table -->", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    documented = [(row[1].split()[0].strip("`"), row[2], row[3]) for row in rows]
    rules = [(res, ", ".join(verbs), why) for _g, res, verbs, why in key_agent.RBAC_RULES + key_agent.EVENT_RULES]
    assert documented == rules
