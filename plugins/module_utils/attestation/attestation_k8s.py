# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The attestation chain as Kubernetes objects, from the same request the host form uses.

Objects, in the project's apply order (:mod:`manifests`): the Namespace; Secrets (PCCS ``production.json``,
PCCS TLS, the PCK ID retrieval tool's ``network_setting.conf``); a ConfigMap (``qgs.conf``,
``sgx_default_qcnl.conf``); the PCCS Service and Deployment; the QGS DaemonSet (host network, node selector
on the TDX label NFD sets, ``intel.feature.node.kubernetes.io/tdx``, SGX device-plugin resources
``sgx.intel.com/enclave`` and ``sgx.intel.com/provision``, the host's ``/var/run/tdx-qgs`` mounted so KubeVirt
and Kata on the node find the socket); and a registration DaemonSet whose init container runs the PCK ID
retrieval tool once per node.

The file contents come from the same writers as the host form (:mod:`qgs_config`, :mod:`qcnl_config`,
:mod:`pccs_config`). Standard library only.
"""

from __future__ import annotations

import base64

from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    parse_dcap_version,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import (
    render_settings,
    update_production,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qcnl_config import update_qcnl
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    KUBEVIRT_QEMU,
    QgsConfigError,
    check_vsock_port,
    qgs_plan,
)
from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import keyvalue
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.manifests import file_name

TDX_NODE_LABEL = {"intel.feature.node.kubernetes.io/tdx": "true"}
SGX_RESOURCES = {tee.SGX_ENCLAVE: "1", tee.SGX_PROVISION: "1"}
PCCS_PATH = "/opt/intel/sgx-dcap-pccs"
PART_OF = "confidential-tee"


class ManifestError(TeeError):
    """A request that cannot be rendered."""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _meta(name: str, namespace: str | None, component: str) -> dict:
    meta = {
        "name": name,
        "labels": {
            "app.kubernetes.io/name": name,
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/part-of": PART_OF,
        },
    }
    if namespace:
        meta["namespace"] = namespace
    return meta


def _selector(name: str) -> dict:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": PART_OF}


def _secret(name: str, namespace: str, component: str, data: dict, kind: str = "Opaque") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(name, namespace, component),
        "type": kind,
        "data": {key: _b64(value) for key, value in data.items()},
    }


def _daemonset(name: str, namespace: str, component: str, pod: dict) -> dict:
    labels = _selector(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, namespace, component),
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def pccs_service_url(request: dict) -> str:
    """The in-cluster URL QCNL uses for the rendered PCCS (QGS pods resolve it with ClusterFirstWithHostNet)."""
    return f"https://pccs.{request['namespace']}.svc:{request['pccs_port']}/sgx/certification/v4/"


def render(request: dict) -> list[dict]:
    """Every object, sorted into apply order; ``request`` holds the role's variables without their prefix."""
    namespace = request["namespace"]
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace, None, "attestation")}]
    qcnl = dict(request.get("qcnl_settings") or {})
    if request.get("pccs_enabled"):
        objects += _pccs_objects(request)
        qcnl.setdefault("pccs_url", pccs_service_url(request))
    qcnl.setdefault("use_secure_cert", True)
    try:
        qcnl_text = update_qcnl(None, qcnl)
    except ValueError as exc:
        raise ManifestError(str(exc)) from None
    objects += _qgs_objects(request, qcnl_text)
    if request.get("registration") == "pck_retrieval":
        objects += _registration_objects(request, qcnl)
    # The project's manifest order (module_utils/common/manifests.py): file name order is apply order.
    return sorted(objects, key=file_name)


def _pccs_objects(request: dict) -> list[dict]:
    namespace, port = request["namespace"], int(request["pccs_port"])
    settings = dict(request.get("pccs_settings") or {})
    settings.update({"HTTPS_PORT": port, "hosts": "0.0.0.0"})
    try:
        members = render_settings(settings, request.get("pccs_secrets") or {})
        production = update_production(None, members)
    except ValueError as exc:
        raise ManifestError(str(exc)) from None
    if not request.get("pccs_tls_cert") or not request.get("pccs_tls_key"):
        raise ManifestError("the PCCS needs a TLS certificate and key (the role generates them when none are given)")
    labels = _selector("pccs")
    return [
        _secret("pccs-config", namespace, "pccs", {"production.json": production}),
        _secret(
            "pccs-tls",
            namespace,
            "pccs",
            {"tls.crt": request["pccs_tls_cert"], "tls.key": request["pccs_tls_key"]},
            "kubernetes.io/tls",
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("pccs", namespace, "pccs"),
            "spec": {"selector": labels, "ports": [{"name": "https", "port": port, "targetPort": port}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta("pccs", namespace, "pccs"),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": _pccs_pod(request, port)},
            },
        },
    ]


def _pccs_pod(request: dict, port: int) -> dict:
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "pccs",
                "image": request["pccs_image"],
                "imagePullPolicy": request["image_pull_policy"],
                "env": [{"name": "NODE_ENV", "value": "production"}],
                "ports": [{"name": "https", "containerPort": port}],
                "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 10},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [
                    {
                        "name": "config",
                        "mountPath": f"{PCCS_PATH}/config/production.json",
                        "subPath": "production.json",
                        "readOnly": True,
                    },
                    {"name": "tls", "mountPath": f"{PCCS_PATH}/ssl_key", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "config", "secret": {"secretName": "pccs-config", "defaultMode": 0o400}},
            {
                "name": "tls",
                "secret": {
                    "secretName": "pccs-tls",
                    "defaultMode": 0o400,
                    "items": [{"key": "tls.key", "path": "private.pem"}, {"key": "tls.crt", "path": "file.crt"}],
                },
            },
        ],
    }


def _socket_gid(request: dict) -> int:
    group = request.get("socket_group") or (str(KUBEVIRT_QEMU["gid"]) if "kubevirt" in request["consumers"] else "0")
    if not str(group).isdigit():
        raise ManifestError(f"in a cluster the QGS socket group must be a numeric gid, got {group!r}")
    return int(group)


def _qgs_objects(request: dict, qcnl_text: str) -> list[dict]:
    namespace = request["namespace"]
    try:
        behaviour = qgs_behaviour(parse_dcap_version(request["dcap_version"]))
        plan = qgs_plan(
            behaviour,
            request["transport"],
            request["consumers"],
            vsock_port=int(request["vsock_port"]),
            threads=request.get("number_threads"),
            kata_version=request.get("kata_version"),
        )
        transport = plan.transport  # "auto" resolved from the consumers
        if transport != "unix":
            check_vsock_port(behaviour, int(request["vsock_port"]))
    except (ValueError, QgsConfigError) as exc:
        raise ManifestError(f"{exc} (set tdx_attestation_dcap_version to the release in the QGS image)") from None
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta("qgs-config", namespace, "qgs"),
        "data": {"qgs.conf": plan.files["/etc/qgs.conf"], "sgx_default_qcnl.conf": qcnl_text},
    }
    containers = [_qgs_container(request, "qgs", [])]
    if transport == "both":
        containers.append(_qgs_container(request, "qgs-vsock", [f"-p={int(request['vsock_port'])}"]))
    elif transport == "vsock":
        containers = [_qgs_container(request, "qgs", [f"-p={int(request['vsock_port'])}"])]
    pod = {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "priorityClassName": "system-node-critical",
        "nodeSelector": dict(request.get("node_selector") or TDX_NODE_LABEL),
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": containers,
        "volumes": [
            {"name": "qgs-config", "configMap": {"name": "qgs-config"}},
            {"name": "socket-dir", "hostPath": {"path": "/var/run/tdx-qgs", "type": "DirectoryOrCreate"}},
            {"name": "cache", "emptyDir": {}},
        ],
    }
    return [config, _daemonset("qgs", namespace, "qgs", pod)]


def _qgs_container(request: dict, name: str, flags: list[str]) -> dict:
    threads = request.get("number_threads")
    args = ["--no-daemon", *flags] + ([f"-n={int(threads)}"] if threads else [])
    # umask 0007: the socket is group-writable on every release (before 1.26 its mode comes from the umask;
    # Kubernetes cannot set a umask, hence the shell); the gid below owns it, so KubeVirt's QEMU (gid 107) connects.
    command = " ".join(["umask 0007 &&", "exec", request["qgs_binary"], *args])
    return {
        "name": name,
        "image": request["qgs_image"],
        "imagePullPolicy": request["image_pull_policy"],
        "command": ["/bin/sh", "-c", command],
        "env": [{"name": "XDG_CACHE_HOME", "value": "/var/cache/qgs"}],
        "resources": {"requests": dict(SGX_RESOURCES), "limits": dict(SGX_RESOURCES)},
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": _socket_gid(request),
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        },
        "volumeMounts": [
            {"name": "qgs-config", "mountPath": "/etc/qgs.conf", "subPath": "qgs.conf", "readOnly": True},
            {
                "name": "qgs-config",
                "mountPath": "/etc/sgx_default_qcnl.conf",
                "subPath": "sgx_default_qcnl.conf",
                "readOnly": True,
            },
            {"name": "socket-dir", "mountPath": "/var/run/tdx-qgs"},
            {"name": "cache", "mountPath": "/var/cache/qgs"},
        ],
    }


def _registration_objects(request: dict, qcnl: dict) -> list[dict]:
    namespace = request["namespace"]
    token = (request.get("pccs_secrets") or {}).get("user_token")
    if not token:
        raise ManifestError("registration pck_retrieval needs the PCCS user token")
    url = qcnl.get("pccs_url") or pccs_service_url(request)
    setting = keyvalue.pck_network_setting(url, qcnl.get("use_secure_cert", True), token)
    tool = {
        "name": "register",
        "image": request["registration_image"],
        "imagePullPolicy": request["image_pull_policy"],
        "workingDir": "/run/pck",
        "command": [request["pck_retrieval_binary"]],
        "resources": {"requests": dict(SGX_RESOURCES), "limits": dict(SGX_RESOURCES)},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "setting", "mountPath": "/run/pck", "readOnly": True}],
    }
    return [
        _secret("pck-retrieval-setting", namespace, "registration", {"network_setting.conf": setting}),
        _daemonset(
            "pck-registration",
            namespace,
            "registration",
            {
                "nodeSelector": dict(request.get("node_selector") or TDX_NODE_LABEL),
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "initContainers": [tool],
                "containers": [
                    {
                        "name": "registered",
                        "image": request["registration_image"],
                        "imagePullPolicy": request["image_pull_policy"],
                        "command": ["/bin/sh", "-c", "exec sleep infinity"],
                        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ],
                "volumes": [
                    {"name": "setting", "secret": {"secretName": "pck-retrieval-setting", "defaultMode": 0o400}}
                ],
            },
        ),
    ]
