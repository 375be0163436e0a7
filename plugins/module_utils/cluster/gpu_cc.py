# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""NVIDIA GPU confidential-computing node prerequisites: kubelet and containerd drop-ins, CC mode changes.

Upstream facts (read 2026-08):

* NVIDIA Confidential Containers prerequisites (NVIDIA/cloud-native-docs @52dcb7b,
  ``confidential-containers/prerequisites.rst``): kubelet feature gates ``KubeletPodResourcesGet``
  (needed before Kubernetes 1.34) and ``RuntimeClassInImageCriApi``, ``runtimeRequestTimeout: 20m``; no
  NVIDIA driver loaded on the host; node label ``nvidia.com/gpu.workload.config=vm-passthrough``;
  ``nvidia.com/cc.mode`` ``on``/``off``/``ppcie``; the CC manager "does not drain user workloads"
  (``configure-cc-mode.rst``).
* Kubernetes feature gate names and versions (``pkg/features/kube_features.go``): the Go constant is
  ``RuntimeClassInImageCriAPI`` but the gate string is ``RuntimeClassInImageCriApi`` (alpha 1.29);
  ``KubeletPodResourcesGet`` alpha 1.27, beta and on by default from 1.34. The kubelet refuses to start
  with a gate it does not know, so a misspelled gate takes the node down.
* Kubelet drop-ins: ``--config-dir`` (KEP-3983, beta 1.30, GA 1.35), ``*.conf`` files merged in
  alphanumeric order, maps merged key by key.
* containerd (@301026e): the default config imports ``/etc/containerd/conf.d/*.toml`` (since 2.2), but
  imports are resolved only from the ``imports`` of files that are loaded, so the node's config.toml must
  list the directory; an imported file with a lower ``version`` is migrated, so a drop-in states
  ``version = 3``. The CRI images plugin's ``image_pull_progress_timeout`` (default 5m) cancels a pull
  that reads no byte for that long.
"""

from __future__ import annotations

import difflib
import fnmatch
import posixpath
import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit.toml import TomlError, dumps
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

# name: (first Kubernetes minor that knows it, first minor where it is on by default or None, why)
KUBELET_GATES = {
    "KubeletPodResourcesGet": ((1, 27), (1, 34), "Kata's runtime reads a sandbox's GPUs through PodResources Get"),
    "RuntimeClassInImageCriApi": ((1, 29), None, "images are pulled per RuntimeClass (snapshotter per runtime)"),
    "KubeletPodResourcesDynamicResources": ((1, 27), (1, 34), "PodResources reports DRA-allocated devices"),
}
CC_MODES = ("on", "off", "ppcie")
CC_MODE_LABEL = "nvidia.com/cc.mode"
GO_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+\Z")
CONTAINERD_CONFIG_VERSION = 3


class GpuCcError(TeeError):
    """A node setting that would break the kubelet, containerd or running GPU workloads."""


def parse_version(text):
    """``(major, minor, patch)`` from text such as ``v1.33.2`` or ``containerd ... v2.2.1 sha``; else ``None``."""
    match = re.search(r"\bv?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def default_kubelet_gates(kubernetes_version=None) -> dict:
    """The gates NVIDIA's prerequisites ask for, for this kubelet version (all of them when unknown)."""
    version = parse_version(kubernetes_version)
    gates = {"RuntimeClassInImageCriApi": True}
    if version is None or version[:2] < KUBELET_GATES["KubeletPodResourcesGet"][1]:
        gates["KubeletPodResourcesGet"] = True
    return gates


def kubelet_gates(requested, kubernetes_version=None, extra_known=()) -> dict:
    """``requested`` validated against the known gate names (case-sensitive) and the kubelet version."""
    if not isinstance(requested, dict):
        raise GpuCcError(
            "kubelet feature gates must be a mapping of gate name to true/false, got %r" % (requested,),
            option="kubelet_feature_gates",
        )
    known = set(KUBELET_GATES) | set(extra_known or ())
    version = parse_version(kubernetes_version)
    for name, value in requested.items():
        if not isinstance(value, bool):
            raise GpuCcError(
                "kubelet feature gate %s must be true or false, got %r" % (name, value), option="kubelet_feature_gates"
            )
        if name not in known:
            close = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=0.6)
            hint = " Did you mean %s?" % close[0] if close else ""
            raise GpuCcError(
                "unknown kubelet feature gate %r: the kubelet refuses to start with a gate it does not know.%s If the "
                "gate is real, add it to gpu_cc_node_kubelet_extra_known_gates" % (name, hint),
                option="kubelet_feature_gates",
            )
        if version and name in KUBELET_GATES and version[:2] < KUBELET_GATES[name][0]:
            raise GpuCcError(
                "kubelet %d.%d does not know feature gate %s (added in %d.%d) and would not start; upgrade the node "
                "or drop the gate" % (version[0], version[1], name, *KUBELET_GATES[name][0]),
                option="kubelet_feature_gates",
            )
    return dict(sorted(requested.items()))


def kubelet_dropin(gates: dict, runtime_request_timeout) -> dict:
    """A KubeletConfiguration drop-in (for ``--config-dir``) with the gates and the CRI timeout."""
    config = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
    if gates:
        config["featureGates"] = dict(sorted(gates.items()))
    if runtime_request_timeout is not None:
        if not isinstance(runtime_request_timeout, str) or not GO_DURATION.match(runtime_request_timeout):
            raise GpuCcError(
                "runtimeRequestTimeout %r must be a Go duration such as 20m" % (runtime_request_timeout,),
                option="runtime_request_timeout",
            )
        config["runtimeRequestTimeout"] = runtime_request_timeout
    return config


def containerd_dropin(settings) -> str:
    """The TOML text of a containerd drop-in (``version = 3`` stated, so containerd does not migrate it)."""
    if not isinstance(settings, dict):
        raise GpuCcError(
            "containerd drop-in settings must be a mapping of TOML tables, got %r" % (settings,),
            option="containerd_settings",
        )
    if settings.get("version", CONTAINERD_CONFIG_VERSION) != CONTAINERD_CONFIG_VERSION:
        raise GpuCcError(
            "containerd 2.x drop-ins are config version 3; remove 'version' from the settings",
            option="containerd_settings",
        )
    data = dict(settings, version=CONTAINERD_CONFIG_VERSION)
    try:
        return "# Managed by confidential.tee.gpu_cc_node\n" + dumps(data)
    except TomlError as exc:
        raise GpuCcError("containerd drop-in: %s" % exc, option="containerd_settings") from exc


def check_containerd_version(version_output, minimum: str) -> tuple:
    """``(version, None)`` when ``containerd --version`` is at least ``minimum``, else raise."""
    found, wanted = parse_version(version_output), parse_version(minimum)
    if wanted is None:
        raise GpuCcError(
            "minimum containerd version %r is not a version such as 2.2" % (minimum,), option="containerd_min_version"
        )
    if found is None:
        raise GpuCcError("could not read a version from 'containerd --version' output %r" % (version_output,))
    if found < wanted:
        raise GpuCcError(
            "containerd %d.%d.%d is older than %s, which GPU confidential containers need; upgrade containerd"
            % (found[0], found[1], found[2], minimum)
        )
    return found, None


_IMPORTS = re.compile(r"^\s*imports\s*=\s*\[(?P<body>[^\]]*)\]", re.MULTILINE | re.DOTALL)


def containerd_imports(config_text: str) -> list:
    """The ``imports`` list of a containerd config.toml (top-level key only)."""
    try:
        import tomllib  # Python 3.11+

        try:
            return list(tomllib.loads(config_text).get("imports", []))
        except tomllib.TOMLDecodeError as exc:
            raise GpuCcError("containerd config is not valid TOML: %s" % exc) from exc
    except ImportError:
        match = _IMPORTS.search(config_text.split("\n[", 1)[0])
        return re.findall(r"[\"']([^\"']+)[\"']", match.group("body")) if match else []


def imports_cover(config_text: str, config_path: str, dropin_path: str) -> bool:
    """Whether containerd, loading ``config_path``, also loads ``dropin_path`` (same glob rules)."""
    base = posixpath.dirname(config_path)
    for pattern in containerd_imports(config_text):
        pattern = posixpath.normpath(pattern if pattern.startswith("/") else posixpath.join(base, pattern))
        if pattern == dropin_path or (
            posixpath.dirname(pattern) == posixpath.dirname(dropin_path)
            and fnmatch.fnmatchcase(posixpath.basename(dropin_path), posixpath.basename(pattern))
        ):
            return True
    return False


def gpu_workloads(pods, node_name: str, resource_prefixes=("nvidia.com/",)) -> list:
    """``namespace/name`` of running or pending pods on ``node_name`` that use a GPU."""
    found = []
    for pod in pods or []:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") != node_name or status.get("phase") in ("Succeeded", "Failed"):
            continue
        containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
        names = [
            res
            for c in containers
            for section in ("requests", "limits")
            for res in ((c.get("resources") or {}).get(section) or {})
        ]
        uses_gpu = any(n.startswith(resource_prefixes) for n in names) or "nvidia-gpu" in str(
            spec.get("runtimeClassName") or ""
        )
        if uses_gpu:
            meta = pod.get("metadata") or {}
            found.append("%s/%s" % (meta.get("namespace", "default"), meta.get("name")))
    return sorted(found)


def cc_mode_plan(node: str, labels, desired: str, workloads: list, drain: bool) -> dict:
    """What to do about ``nvidia.com/cc.mode`` on ``node``: ``none``, ``label``, ``drain`` (then label) or fail.

    NVIDIA's CC manager resets the GPU on a mode change and does not drain user workloads, so the change
    is made only on a node without GPU workloads, after draining it when that is allowed.
    """
    if desired not in CC_MODES:
        raise GpuCcError("CC mode must be one of %s, got %r" % (", ".join(CC_MODES), desired), option="cc_mode")
    current = (labels or {}).get(CC_MODE_LABEL)
    if current == desired:
        return {
            "action": "none",
            "current": current,
            "workloads": workloads,
            "message": "%s already %s" % (node, desired),
        }
    change = "%s: %s %s -> %s" % (node, CC_MODE_LABEL, current or "(unset)", desired)
    if not workloads:
        return {"action": "label", "current": current, "workloads": [], "message": change}
    if drain:
        return {
            "action": "drain",
            "current": current,
            "workloads": workloads,
            "message": "%s after draining %s" % (change, ", ".join(workloads)),
        }
    raise GpuCcError(
        "refusing %s: the GPU is reset on a mode change and these GPU workloads run there: %s. Move them, or set "
        "gpu_cc_node_drain: true to drain the node first" % (change, ", ".join(workloads)),
        option="drain",
    )


def cc_mode_plans(requests, nodes, pods=None, label: str = CC_MODE_LABEL) -> dict:
    """:func:`cc_mode_plan` for many nodes at once, from one LIST of Nodes (and one of Pods): the cluster playbook's
    API pass over every GPU node.

    ``requests``: ``[{node, mode, drain, labels}]``. ``pods``: None before the pods are read (a changing node is
    then planned as having no workload; the caller reads the pods when ``changing`` is not empty and plans again).
    ``label``: the label read as the current mode (``nvidia.com/cc.mode.state``: whether the CC manager reports it).
    Returns ``plans`` (each node's plan, with ``node``), ``changing`` (the nodes whose mode changes), ``missing``
    (nodes the API server does not know), ``refused`` (each refusal's message: nothing is raised, so that one
    message can name every node) and ``objects`` (each known node's labels as a partial Node, to merge-patch).
    """
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes or []}
    pods_by_node: dict = {}
    for pod in pods or []:
        pods_by_node.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(pod)
    plans, missing, refused = [], [], []
    for request in requests or []:
        name = request["node"]
        if name not in by_name:
            missing.append(name)
            continue
        labels = (by_name[name].get("metadata") or {}).get("labels") or {}
        labels = {CC_MODE_LABEL: labels[label]} if label in labels else {}
        workloads = gpu_workloads(pods_by_node.get(name, []), name)
        try:
            plans.append({"node": name, **cc_mode_plan(name, labels, request["mode"], workloads, request["drain"])})
        except GpuCcError as exc:
            refused.append(str(exc))
    changing = [p["node"] for p in plans if p["action"] != "none"]
    objects = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": r["node"], "labels": r.get("labels") or {}}}
        for r in requests or []
        if r["node"] in by_name
    ]
    return {"plans": plans, "changing": changing, "missing": missing, "refused": refused, "objects": objects}
