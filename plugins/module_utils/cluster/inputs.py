# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The cluster playbook's inventory checked as a whole, before anything is read, rendered or written.

Every message names the inventory variable and, for a per-node variable, the node (inventory host and Kubernetes
node name), and says how to write it. Ansible itself would read ``"maybe"`` as false through ``| bool``, split a
string where a list belongs on commas, and print a list where a string belongs: each is refused here instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import (
    DNS1123_SUBDOMAIN_MAX,
    is_dns1123_subdomain,
)

OUTPUTS = ("apply", "manifests", "machineconfig")
FLAVORS = ("kubernetes", "openshift")
VENDORS = ("auto", *tee_registry.VENDORS)
# The vendors a key pool can be planned for (``auto`` resolved from host facts, else ``unknown``).
PLANNED_VENDORS = tee_registry.VENDORS
# The per-node inventory variables playbooks/cluster.yml reads; the cluster-wide ones it reads.
NODE_VARS = (
    "tee_cpu_vendor",
    "tee_node_consumers",
    "tee_key_pool_mode",
    "tee_node_gpu",
    "tee_k8s_node_name",
    "tee_host_root",
    "tee_kubernetes_version",
    "kubevirt_cc_qgs_socket_path",
)
CLUSTER_VARS = (
    "tee_output",
    "tee_cluster_flavor",
    "tee_manifest_dir",
    "tee_cluster_gather_host_facts",
    "kubevirt_cc_version",
    "kubevirt_cc_qgs_socket_path",
)
CONSUMERS = (tee.KATA, tee.KUBEVIRT)
MODES = pool_policy.mode_names()
# The strings ansible-core's boolean() reads (module_utils/parsing/convert_bool.py, 2.19); anything else is an error.
_TRUE = ("y", "yes", "on", "1", "true", "t")
_FALSE = ("n", "no", "off", "0", "false", "f")
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+][0-9A-Za-z.+-]*)?\Z")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def bool_problem(name: str, value) -> str | None:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return None
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return None
    return "%s must be true or false, got %s" % (name, _shown(value))


def string_problem(name: str, value, choices=None) -> str | None:
    if not isinstance(value, str):
        kind = "a list" if isinstance(value, (list, tuple)) else type(value).__name__
        return "%s must be a string%s, got %s %s" % (
            name,
            " (one of %s)" % ", ".join(choices) if choices else "",
            kind,
            _shown(value),
        )
    if choices and value not in choices:
        return "%s must be one of %s, got %s" % (name, ", ".join(choices), _shown(value))
    return None


def list_problem(name: str, value, choices) -> str | None:
    if isinstance(value, str):
        return "%s must be a YAML list such as [%s], got the string %s (Ansible would split it on commas)" % (
            name,
            ", ".join(choices),
            _shown(value),
        )
    if not isinstance(value, (list, tuple)):
        return "%s must be a list such as [%s], got %s %s" % (
            name,
            ", ".join(choices),
            type(value).__name__,
            _shown(value),
        )
    unknown = [item for item in value if item not in choices]
    if unknown:
        return "%s may hold only %s, got %s" % (name, ", ".join(choices), _shown(unknown[0]))
    return None


def version_problem(name: str, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _VERSION.match(value):
        return "%s must be a version such as v1.9.0, got %s" % (name, _shown(value))
    return None


def absolute_path_problem(name: str, value, example: str) -> str | None:
    if isinstance(value, str) and value.startswith("/") and "\0" not in value:
        return None
    return "%s must be an absolute path on the nodes, such as %s, got %s" % (name, example, _shown(value))


def parse_version(value) -> tuple | None:
    """``(major, minor, patch)`` of ``v1.9.0``-like text; ``None`` when it is not one."""
    match = _VERSION.match(value) if isinstance(value, str) else None
    return tuple(int(part or 0) for part in match.groups()) if match else None


def _node_problems(host: str, hv: dict) -> list[str]:
    """Problems of one inventory host's cluster variables, each naming the variable and the node."""
    name = hv.get("tee_k8s_node_name", host)
    where = "for node %s" % host if name == host or not isinstance(name, str) else "for node %s (%s)" % (host, name)
    checks = [
        ("tee_cpu_vendor", lambda v: string_problem("tee_cpu_vendor", v, VENDORS)),
        ("tee_node_consumers", lambda v: list_problem("tee_node_consumers", v, CONSUMERS)),
        ("tee_key_pool_mode", lambda v: string_problem("tee_key_pool_mode", v, MODES)),
        ("tee_node_gpu", lambda v: bool_problem("tee_node_gpu", v)),
        ("tee_host_root", lambda v: None if isinstance(v, str) and v else "tee_host_root must be a non-empty path"),
        ("tee_kubernetes_version", lambda v: version_problem("tee_kubernetes_version", v)),
        (
            "kubevirt_cc_qgs_socket_path",
            lambda v: absolute_path_problem("kubevirt_cc_qgs_socket_path", v, tee.QGS_SOCKET),
        ),
    ]
    out = ["%s %s" % (problem, where) for var, check in checks if var in hv for problem in [check(hv[var])] if problem]
    if not is_dns1123_subdomain(name):
        source = "tee_k8s_node_name" if "tee_k8s_node_name" in hv else "the inventory name (no tee_k8s_node_name)"
        out.append(
            "%s %s is not a Kubernetes node name (%s): at most %d characters, dot-separated labels of a-z, 0-9 and "
            "'-' that start and end with a letter or digit; set tee_k8s_node_name for that host"
            % (source, _shown(name), where, DNS1123_SUBDOMAIN_MAX)
        )
    return out


def input_problems(cluster: dict, nodes: dict) -> list[str]:
    """Every problem of the cluster-wide variables (``cluster``) and the per-node ones (``{host: hostvars}``)."""
    out = []
    if "tee_output" in cluster:
        problem = string_problem("tee_output", cluster["tee_output"], OUTPUTS)
        if problem:
            out.append(problem + " (anything else used to mean apply, which touches a cluster)")
    if "tee_cluster_flavor" in cluster:
        out.append(string_problem("tee_cluster_flavor", cluster["tee_cluster_flavor"], FLAVORS))
    if "tee_manifest_dir" in cluster:
        out.append(manifest_dir_problem(cluster["tee_manifest_dir"]))
    if "tee_cluster_gather_host_facts" in cluster:
        out.append(bool_problem("tee_cluster_gather_host_facts", cluster["tee_cluster_gather_host_facts"]))
    if "kubevirt_cc_version" in cluster:
        out.append(version_problem("kubevirt_cc_version", cluster["kubevirt_cc_version"]))
    if "kubevirt_cc_qgs_socket_path" in cluster:
        socket_path = cluster["kubevirt_cc_qgs_socket_path"]
        out.append(absolute_path_problem("kubevirt_cc_qgs_socket_path", socket_path, tee.QGS_SOCKET))
    if not nodes:
        out.append(
            "the node group (tee_cluster_group, default tee_nodes) must list at least one node: an empty group would "
            "plan no key pool and prune every manifest"
        )
    seen: dict = {}
    for host in sorted(nodes):
        hv = nodes[host] if isinstance(nodes[host], Mapping) else {}
        out.extend(_node_problems(host, hv))
        name = hv.get("tee_k8s_node_name", host)
        if isinstance(name, str) and name in seen:
            out.append(
                "nodes %s and %s have one Kubernetes node name %s: set tee_k8s_node_name" % (seen[name], host, name)
            )
        elif isinstance(name, str):
            seen[name] = host
    return [problem for problem in out if problem]


def cluster_node(host: str, hv: Mapping) -> dict:
    """One node as the key-pool plan reads it, from an inventory host's variables and its ``tee_host`` facts.

    The vendor is ``tee_cpu_vendor`` unless that is ``auto`` (or unset), then what tee_host_info read, else
    ``unknown`` (the playbook refuses those by name). ``qgs`` and ``sev_asids`` are null without facts.
    """
    facts = hv.get("tee_host")
    facts = facts if isinstance(facts, Mapping) else {}
    vendor = hv.get("tee_cpu_vendor", "auto")
    if vendor == "auto":
        vendor = facts.get("tee_vendor") or "unknown"
    consumers = hv.get("tee_node_consumers", [tee.KATA])
    return {
        # Plain strings: ansible-core 2.19 tags inventory strings with their origin, and every later task that carries
        # the nodes or the plan copies each tagged string as an object (ten times the cost at 5,000 nodes, issue 31).
        "name": _plain(hv.get("tee_k8s_node_name", host)),
        "vendor": _plain(vendor),
        "consumers": [_plain(c) for c in consumers] if isinstance(consumers, (list, tuple)) else consumers,
        "mode": _plain(hv.get("tee_key_pool_mode", "auto")),
        "qgs": facts.get("qgs"),
        # AMD ciphertext hiding: the SNP range NFD must advertise instead of the joint sev_es count.
        "sev_asids": facts.get("sev_asids"),
    }


def _plain(value):
    """``value`` as a plain ``str`` when it is a string (of a subclass: a tagged one), else unchanged."""
    return str(value) if isinstance(value, str) else value


def unfinished_nodes(gpu_hosts, fact_hosts, variables) -> list:
    """The nodes the cluster playbook must not commit without: a GPU node that never set ``tee_cluster_node_done``,
    then a node whose ``tee_cluster_host_facts`` result failed or is missing, then one that was unreachable.

    ``variables(host)`` is the host's variables as stored (registered results and set facts): only their flags are
    read, never the facts themselves.
    """
    facts = {host: variables(host).get("tee_cluster_host_facts", {"failed": True}) for host in fact_hosts or []}
    return (
        [host for host in gpu_hosts or [] if not variables(host).get("tee_cluster_node_done", False)]
        + [host for host, result in facts.items() if _flag(result, "failed")]
        + [host for host, result in facts.items() if _flag(result, "unreachable")]
    )


def _flag(result, name: str) -> bool:
    return bool(result.get(name)) if isinstance(result, Mapping) else False


def manifest_dir_problem(value, name: str = "tee_manifest_dir") -> str | None:
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        return "%s must be a non-empty path string, got %s" % (name, _shown(value))
    return None


def resolve_output_dir(value, cwd: str, default: str = "manifests", name: str = "tee_manifest_dir") -> str:
    """The collection's one rule for every output path: a relative one is read against ``cwd``, the directory
    ansible-playbook was started from; unset (``None``) means ``default`` there.

    Never the playbook's directory: a role default of ``playbook_dir``, or a relative path handed to a module on
    ``ansible.builtin.local`` (which runs modules in the playbook's directory), would write into the installed
    collection's ``playbooks/``.
    """
    if value is None:
        value = default
    problem = manifest_dir_problem(value, name)
    if problem:
        raise ValueError(problem)
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(value)))
