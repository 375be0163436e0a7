# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The cluster objects of the ``kernel`` key-pool mode: the node agent's DaemonSet and RBAC, and the admission
policy that makes KubeVirt's virt-launcher pods draw from the kernel-sized pool.

On a kernel-mode node one extended resource is the pool for every consumer (``tdx.intel.com/keys`` for TDX,
``sev-snp.amd.com/esids`` for SEV-SNP): the agent keeps its value in the Node's ``status.capacity`` at
"capacity minus keys the scheduler cannot see" (``plugins/module_utils/agent``), Kata charges it through its
RuntimeClass ``overhead.podFixed`` (:mod:`runtimeclasses`), and virt-launcher pods charge it through the
MutatingAdmissionPolicy rendered here, which adds ``<pool>: 1`` to the requests and limits of the container that
requests KubeVirt's TEE device (``devices.kubevirt.io/tdx`` or ``devices.kubevirt.io/sev``: KubeVirt v1.9
``pkg/virt-controller/services/renderresources.go`` puts it on the ``compute`` container of every TDX or SEV VMI's
pod, labelled ``kubevirt.io: virt-launcher``, ``pkg/virt-controller/services/template.go``).

MutatingAdmissionPolicy is ``admissionregistration.k8s.io/v1`` since Kubernetes 1.36 (KEP-3962, GA and on by
default), which is why the mode needs 1.36 or later. Admission cannot know the node a pod will be bound to, so the
policy charges every TDX (SEV) virt-launcher pod: the plan refuses kernel mode on some KubeVirt nodes of a TEE and
not on others.

Input: ``plan["kernel"]`` of :func:`key_pools.plan` (per TEE ``{"resource", "nodes", "kubevirt_resource"?}``,
the shape the plan documents) and the deployment options. Standard library only.
"""

from __future__ import annotations

import json
import re

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import is_dns1123_subdomain

MANAGED_BY = "confidential.tee"
NAME = "tee-key-agent"
APP_LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "confidential-tee"}
POLICY_PREFIX = "confidential-tee-key-pool-"
OWN_NODE_POLICY = "confidential-tee-key-agent-own-node"
DEFAULT_NAMESPACE = "confidential-tee"
IMAGE_REPOSITORY = "localhost/confidential-tee/key-agent"
# Where the DaemonSet mounts the host's trees, read-only: the agent reads <host root>/sys/fs/cgroup/misc.* and, on AMD,
# <host root>/sys/module/kvm_amd/parameters/ciphertext_hiding_asids (the SNP range; /sys/module because kvm_amd's
# directory exists only on AMD hosts, and a hostPath of type Directory must exist).
HOST_ROOT = "/host"
HOST_MOUNTS = (("cgroup", "/sys/fs/cgroup"), ("modules", "/sys/module"))
# The image's non-root user (Containerfile): misc.capacity and misc.current are world-readable (0444).
AGENT_UID = 65532
# KubeVirt's label on every virt-launcher pod (kubevirt.io/api core/v1 AppLabel = "kubevirt.io").
LAUNCHER_LABEL = ("kubevirt.io", "virt-launcher")
# A pod-bound service account token names the node of its pod in the user's extra (ServiceAccountTokenPodNodeInfo,
# GA in Kubernetes 1.32): what lets an admission policy hold the agent to its own Node.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
# Extended resource names as the API server accepts them (a domain prefix, a slash, a name): nothing else may reach
# the CEL text the policies carry.
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*[a-z0-9]\Z")
_INTERVAL = re.compile(r"[0-9]+(\.[0-9]+)?\Z")
LOG_FORMATS = ("text", "json")

# Why each permission is there (docs/cluster.md's RBAC table is written from these reasons): exactly the requests of
# plugins/module_utils/agent/kube.py (GET /api/v1/pods?fieldSelector=spec.nodeName=..., GET and PATCH .../status of
# its Node, POST of an Event into "default", where the kubelet puts node events). A ClusterRole for the Nodes and
# pods (cluster-scoped, or every namespace); a Role in "default" only for the Events.
RBAC_RULES = (
    (
        "",
        "pods",
        ("list",),
        "count the keys of the guests bound to its node (Kata pods, virt-launchers), by a list "
        "filtered on spec.nodeName",
    ),
    ("", "nodes", ("get",), "read its Node's capacity, allocatable and conditions before changing them"),
    (
        "",
        "nodes/status",
        ("patch",),
        "write the pool's capacity and allocatable and its ConfidentialTeeKeyPool condition",
    ),
)
EVENT_RULES = (("", "events", ("create",), "say on its Node, in namespace default, when it shrinks the pool on doubt"),)
EVENTS_NAMESPACE = "default"


class KeyAgentError(TeeError):
    """Options the kernel-mode objects cannot be rendered from."""


def _resource(value, where: str) -> str:
    if not isinstance(value, str) or not _RESOURCE.match(value):
        raise KeyAgentError("%s %r is not an extended resource name such as tdx.intel.com/keys" % (where, value))
    return value


def kernel_pools(plan: dict) -> dict:
    """``plan["kernel"]`` checked: per TEE the pool resource, its nodes and KubeVirt's device resource (or None)."""
    raw = plan.get("kernel") if isinstance(plan, dict) else None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise KeyAgentError("the key-pool plan's kernel entry must be a mapping per TEE, got %r" % (raw,))
    pools = {}
    for tee_name, pool in sorted(raw.items()):
        if not isinstance(pool, dict) or not isinstance(pool.get("nodes"), list) or not pool["nodes"]:
            raise KeyAgentError(
                "plan kernel.%s must have resource and a non-empty nodes list, got %r" % (tee_name, pool)
            )
        bad = [n for n in pool["nodes"] if not is_dns1123_subdomain(n)]
        if bad:
            raise KeyAgentError("plan kernel.%s.nodes holds names that are not node names: %s" % (tee_name, bad))
        kubevirt = pool.get("kubevirt_resource")
        pools[tee_name] = {
            "resource": _resource(pool.get("resource"), "plan kernel.%s.resource" % tee_name),
            "nodes": sorted(set(pool["nodes"])),
            "kubevirt_resource": _resource(kubevirt, "plan kernel.%s.kubevirt_resource" % tee_name)
            if kubevirt
            else None,
        }
    return pools


def _options(options: dict | None) -> dict:
    options = dict(options or {})
    namespace = options.get("namespace") or DEFAULT_NAMESPACE
    if not is_dns1123_subdomain(namespace) or "." in namespace or len(namespace) > 63:
        raise KeyAgentError(
            "namespace %r is not a namespace name (a DNS-1123 label)" % (namespace,), option="namespace"
        )
    image = options.get("image")
    if not isinstance(image, str) or not _IMAGE.match(image):
        raise KeyAgentError(
            "image %r is not an image reference such as %s:0.1.0" % (image, IMAGE_REPOSITORY), option="image"
        )
    interval = str(options.get("interval", "0.5"))
    if not _INTERVAL.match(interval) or float(interval) <= 0:
        raise KeyAgentError("interval %r must be a positive number of seconds" % (interval,), option="interval")
    log_format = options.get("log_format", "json")
    if log_format not in LOG_FORMATS:
        raise KeyAgentError("log_format must be text or json, got %r" % (log_format,), option="log_format")
    return {
        "namespace": namespace,
        "image": image,
        "interval": interval,
        "log_format": log_format,
        "reserve": reserve_args(options.get("reserve")),
        "priority_class": options.get("priority_class") or None,
        "tolerations": _tolerations(options.get("tolerations")),
        "own_node_policy": bool(options.get("own_node_policy", True)),
    }


def reserve_args(reserve) -> list:
    """``--reserve RESOURCE=N`` arguments from ``{misc resource or pool resource: N}`` (keys held for VMs that
    Kubernetes does not start), in name order; the agent reads them (its CLI is the contract)."""
    if reserve is None:
        return []
    if not isinstance(reserve, dict):
        raise KeyAgentError(
            "reserve must be a mapping of resource to a key count, got %r" % (reserve,), option="reserve"
        )
    args = []
    for name, count in sorted(reserve.items()):
        if not isinstance(name, str) or not re.match(r"[A-Za-z0-9][-A-Za-z0-9_./]*\Z", name):
            raise KeyAgentError("reserve key %r is not a resource name such as tdx" % (name,), option="reserve")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise KeyAgentError(
                "reserve %s must be a whole number of keys >= 0, got %r" % (name, count), option="reserve"
            )
        args.append("--reserve=%s=%d" % (name, count))
    return args


def _tolerations(value) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise KeyAgentError(
            "tolerations must be a list of toleration mappings, got %r" % (value,), option="tolerations"
        )
    return [dict(t) for t in value]


def _meta(name: str, namespace: str | None = None) -> dict:
    meta = {"name": name, "labels": {**APP_LABELS, "app.kubernetes.io/managed-by": MANAGED_BY}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _rules(table) -> list:
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)} for group, resource, verbs, _why in table
    ]


def _role_pair(kind: str, namespace: str | None, rules: list, subject: dict) -> list:
    """A (Cluster)Role and its (Cluster)RoleBinding, both named :data:`NAME`."""
    api = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": api, "kind": kind, "metadata": _meta(NAME, namespace), "rules": rules},
        {
            "apiVersion": api,
            "kind": kind + "Binding",
            "metadata": _meta(NAME, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": NAME},
            "subjects": [subject],
        },
    ]


def rbac_objects(namespace: str) -> list:
    """The agent's ServiceAccount, a ClusterRole with :data:`RBAC_RULES` and a Role in ``default`` with
    :data:`EVENT_RULES` (nothing else), and their bindings."""
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace)},
        *_role_pair("ClusterRole", None, _rules(RBAC_RULES), subject),
        *_role_pair("Role", EVENTS_NAMESPACE, _rules(EVENT_RULES), subject),
    ]


def namespace_object(namespace: str) -> dict:
    meta = _meta(namespace)
    # The agent mounts a hostPath (the cgroup tree, read-only), which Pod Security's baseline level forbids: the
    # namespace holds nothing but the agent, so it is labelled for what its one pod does.
    meta["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _agent_container(opts: dict) -> dict:
    args = ["--host-root=%s" % HOST_ROOT, "--interval=%s" % opts["interval"], "--log-format=%s" % opts["log_format"]]
    return {
        "name": "agent",
        "image": opts["image"],
        # Built locally (make image) and loaded on each node: no registry to pull from.
        "imagePullPolicy": "IfNotPresent",
        "args": args + opts["reserve"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": name, "mountPath": HOST_ROOT + path, "readOnly": True} for name, path in HOST_MOUNTS],
    }


def daemonset(nodes: list, opts: dict) -> dict:
    """The agent on exactly the kernel-mode ``nodes`` (node affinity on their names: no label to keep in step).

    One term per node: the terms are ORed, and a node field selector takes one value per requirement (the API server
    refuses more: ``must be only one value when operator is 'In' or 'NotIn' for node field selector``, v1.37.2).
    """
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]} for node in sorted(nodes)]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    pod_spec = {
        "serviceAccountName": NAME,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": affinity,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": AGENT_UID,
            "runAsGroup": AGENT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_agent_container(opts)],
        "volumes": [{"name": name, "hostPath": {"path": path, "type": "Directory"}} for name, path in HOST_MOUNTS],
        "terminationGracePeriodSeconds": 10,
    }
    if opts["priority_class"]:
        pod_spec["priorityClassName"] = opts["priority_class"]
    if opts["tolerations"]:
        pod_spec["tolerations"] = opts["tolerations"]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(NAME, opts["namespace"]),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {"metadata": {"labels": dict(APP_LABELS)}, "spec": pod_spec},
        },
    }


def _cel(text: str) -> str:
    """A CEL string literal (JSON's escapes are CEL's for the names :data:`_RESOURCE` admits)."""
    return json.dumps(text)


def _holds(container: str, resource: str) -> str:
    """CEL: the container requests or limits ``resource``."""
    return "(%s in %s.?resources.?requests.orValue({}) || %s in %s.?resources.?limits.orValue({}))" % (
        _cel(resource),
        container,
        _cel(resource),
        container,
    )


def _charged(device: str, pool: str) -> str:
    """CEL: a container ``c`` that requests KubeVirt's TEE device and does not yet charge the pool."""
    return "%s && !%s" % (_holds("c", device), _holds("c", pool))


def admission_policy(tee_name: str, device: str, pool: str) -> list:
    """The MutatingAdmissionPolicy and binding that add ``pool: 1`` to the virt-launcher containers holding ``device``.

    Only pod CREATE of virt-launcher pods with such a container matches; the mutation names only those containers
    (merged by name, as server-side apply merges the containers list), so nothing else of the pod changes, and a
    container that already charges the pool keeps its own count.
    """
    name = POLICY_PREFIX + tee_name
    quantity = {pool: "1"}
    mutation = (
        "Object{spec: Object.spec{containers: object.spec.containers.filter(c, %s).map(c, "
        "Object.spec.containers{name: c.name, resources: Object.spec.containers.resources{"
        "requests: %s, limits: %s}})}}" % (_charged(device, pool), json.dumps(quantity), json.dumps(quantity))
    )
    label, value = LAUNCHER_LABEL
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": _meta(name),
        "spec": {
            # A pod the policy cannot charge is refused, never admitted uncharged (it could overrun the node's keys).
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ]
            },
            "matchConditions": [
                {
                    "name": "virt-launcher",
                    "expression": "has(object.metadata.labels) && %s in object.metadata.labels && "
                    "object.metadata.labels[%s] == %s" % (_cel(label), _cel(label), _cel(value)),
                },
                {
                    "name": "requests-kubevirt-tee-device",
                    "expression": "object.spec.containers.exists(c, %s)" % _charged(device, pool),
                },
            ],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": mutation}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": _meta(name),
        "spec": {"policyName": name},
    }
    return [policy, binding]


def _only_pool_entries(field: str, allowed: str) -> str:
    """CEL: every entry of ``status.<field>`` but the ``allowed`` resources is as it was (none added or removed)."""
    new, old = "object.status.?%s.orValue({})" % field, "oldObject.status.?%s.orValue({})" % field
    return "%s.all(k, k in %s || (k in %s && %s[k] == %s[k])) && %s.all(k, k in %s || k in %s)" % (
        new,
        allowed,
        old,
        old,
        new,
        old,
        allowed,
        new,
    )


def own_node_policy(namespace: str, pools: dict) -> list:
    """A ValidatingAdmissionPolicy (and binding) holding the agent to its own Node and to the pool's entries: RBAC
    cannot name the object a DaemonSet pod may patch, the pod's token can (:data:`NODE_NAME_EXTRA`)."""
    user = "system:serviceaccount:%s:%s" % (namespace, NAME)
    resources = sorted({pool["resource"] for pool in pools.values()})
    allowed = "[%s]" % ", ".join(_cel(r) for r in resources)
    validations = [
        {
            "expression": "%s in request.userInfo.extra && request.userInfo.extra[%s] == [object.metadata.name]"
            % (_cel(NODE_NAME_EXTRA), _cel(NODE_NAME_EXTRA)),
            "message": "the key agent may change only the Node its pod runs on",
        },
        *(
            {
                "expression": _only_pool_entries(field, allowed),
                "message": "the key agent may change only its pool's entry of status.%s" % field,
            }
            for field in ("capacity", "allocatable")
        ),
    ]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(OWN_NODE_POLICY),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes/status"]}
                ]
            },
            "matchConditions": [
                {"name": "the-key-agent", "expression": "request.userInfo.username == %s" % _cel(user)}
            ],
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(OWN_NODE_POLICY),
        "spec": {"policyName": OWN_NODE_POLICY, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def render(plan: dict, options: dict | None = None) -> dict:
    """Every object of the kernel mode, in apply order (none when no node is in kernel mode), and a summary."""
    pools = kernel_pools(plan)
    if not pools:
        return {"objects": [], "nodes": [], "policies": []}
    opts = _options(options)
    nodes = sorted({n for pool in pools.values() for n in pool["nodes"]})
    objects = [namespace_object(opts["namespace"]), *rbac_objects(opts["namespace"])]
    if opts["own_node_policy"]:
        objects += own_node_policy(opts["namespace"], pools)
    # The DaemonSet before the policy that makes VMIs request the pool: the apply writes in this order, so a refused
    # DaemonSet never leaves VMIs asking for a pool no agent advertises.
    objects.append(daemonset(nodes, opts))
    policies = []
    for tee_name, pool in pools.items():
        if pool["kubevirt_resource"]:
            objects += admission_policy(tee_name, pool["kubevirt_resource"], pool["resource"])
            policies.append(POLICY_PREFIX + tee_name)
    return {"objects": objects, "nodes": nodes, "policies": policies}
