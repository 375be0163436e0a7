# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Which cluster an apply would write to, read the way the Kubernetes client reads it, before any API call.

Controller side only (the filter ``kube_target``): it reads kubeconfig YAML, so it lives here and not in
module_utils, which stays standard-library-only for the modules that run on the hosts.

The client (kubernetes.config.load_kube_config, which kubernetes.core uses) takes ``kubeconfig`` if given,
else the files in ``KUBECONFIG`` (colon-separated, merged: the first file to define a name wins, as kubectl
does), else ``~/.kube/config``; the context is the one named, else the merged ``current-context``. Without any
file, a pod's service account (``KUBERNETES_SERVICE_HOST``) is used. A bearer token (``tee_k8s_host``) bypasses
all of this.
"""

from __future__ import annotations

import os

import yaml

FIX = "set tee_kubeconfig and tee_k8s_context to the cluster to change, or tee_output: manifests to write files instead"


def _load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except OSError as exc:
        return None, f"cannot read the kubeconfig {path}: {exc.strerror}"
    except yaml.YAMLError as exc:
        return None, f"the kubeconfig {path} is not YAML: {str(exc).splitlines()[0]}"
    if not isinstance(config, dict):
        return None, f"the kubeconfig {path} is not a kubeconfig (no mapping at the top)"
    return config, None


def _named(config, key):
    entries = config.get(key) or []
    return {entry["name"]: entry for entry in entries if isinstance(entry, dict) and isinstance(entry.get("name"), str)}


def _files(kubeconfig, env):
    if kubeconfig:
        return [os.path.expanduser(str(kubeconfig))], "tee_kubeconfig"
    if env.get("KUBECONFIG"):
        return [path for path in env["KUBECONFIG"].split(os.pathsep) if path], "KUBECONFIG"
    return [os.path.expanduser("~/.kube/config")], "the default ~/.kube/config"


def kube_target(kubeconfig=None, context=None, host=None, env=None):
    """``{kubeconfig, context, server, describe, error}``: where an apply goes, or why it cannot go anywhere."""
    env = os.environ if env is None else env
    target = {"kubeconfig": None, "context": None, "server": None, "describe": None, "error": None}
    if host:
        return {**target, "server": host, "describe": f"the API server {host} (tee_k8s_host, with tee_k8s_api_key)"}
    paths, source = _files(kubeconfig, env)
    existing = [path for path in paths if os.path.isfile(path)]
    if not existing:
        if not kubeconfig and env.get("KUBERNETES_SERVICE_HOST"):
            server = f"https://{env['KUBERNETES_SERVICE_HOST']}:{env.get('KUBERNETES_SERVICE_PORT', '443')}"
            return {**target, "server": server, "describe": f"this pod's cluster {server} (in-cluster service account)"}
        return {**target, "error": f"no kubeconfig: {source} names {', '.join(paths)}, which does not exist; {FIX}"}
    contexts, clusters, current = {}, {}, None
    for path in existing:
        config, error = _load(path)
        if error:
            return {**target, "error": f"{error}; {FIX}"}
        contexts = {**_named(config, "contexts"), **contexts}
        clusters = {**_named(config, "clusters"), **clusters}
        current = current or config.get("current-context") or None
    shown = ":".join(existing)
    wanted = context or current
    if not wanted:
        return {
            **target,
            "error": f"the kubeconfig {shown} ({source}) has no current-context and tee_k8s_context is not set; {FIX}",
        }
    if wanted not in contexts:
        named_by = "tee_k8s_context" if context else "its current-context"
        known = ", ".join(sorted(contexts)) or "none"
        return {
            **target,
            "error": f"context {wanted} ({named_by}) is not in the kubeconfig {shown} (its contexts: {known}); {FIX}",
        }
    cluster_name = (contexts[wanted].get("context") or {}).get("cluster")
    server = ((clusters.get(cluster_name) or {}).get("cluster") or {}).get("server")
    if not server:
        return {
            **target,
            "error": f"context {wanted} in {shown} names cluster {cluster_name!s}, which has no server; {FIX}",
        }
    describe = f"context {wanted} (server {server}) of the kubeconfig {shown}"
    return {"kubeconfig": shown, "context": wanted, "server": server, "describe": describe, "error": None}
