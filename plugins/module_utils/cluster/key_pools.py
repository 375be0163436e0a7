# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""One pool per node: which extended resource advertises a node's TEE keys, and who charges it.

This is the only place the collection decides key accounting. Every cluster role renders from the plan
:func:`plan` returns; none re-derives it.

A node's TEE keys are one hardware pool (``misc.capacity`` ``tdx``, or ``sev_es`` which SEV-ES and
SEV-SNP guests charge). Two advertisers can turn it into two scheduler pools (verified upstream, 2026-08):

* NFD, through a NodeFeatureRule ``extendedResources`` entry: ``tdx.intel.com/keys`` =
  ``@cpu.security.tdx.total_keys``, ``sev-snp.amd.com/esids`` = ``@cpu.security.sev.encrypted_state_ids``
  (node-feature-discovery ``source/cpu/security_amd64.go``: capacity only, read once per scan). Kata's
  RuntimeClasses request one in ``overhead.podFixed`` (kata-deploy chart ``runtimeclasses.yaml``).
* KubeVirt's virt-handler: with ``WorkloadEncryptionTDX`` it serves ``devices.kubevirt.io/tdx`` with
  ``misc.capacity`` ``tdx`` devices (``pkg/virt-handler/device-manager/device_controller.go``); with
  ``WorkloadEncryptionSEV`` it serves ``devices.kubevirt.io/sev`` with ``--max-devices`` devices (1000 by
  default, or ``spec.configuration.virtualMachineInstancesPerNode``), which is not a key count at all.
  Every TDX/SEV VMI's launcher pod requests one (``pkg/virt-controller/services/renderresources.go``).

The scheduler and the kubelet's admission both add ``pod.spec.overhead`` to a pod's requests for every
resource, extended ones included (``k8s.io/component-helpers/resource`` ``PodRequests``; the kubelet's
``removeMissingExtendedResources`` strips only container requests), so a Kata RuntimeClass whose
overhead names the KubeVirt resource draws from the same pool as the VMIs. The device manager never
allocates device IDs for overhead; the TDX plugin's devices are interchangeable counters, so that loses
nothing.
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.confidential.tee.plugins.module_utils.common import tee
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.text import name_list
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import is_dns1123_subdomain

KATA = tee.KATA
KUBEVIRT = tee.KUBEVIRT
# The consumers a node may declare; external VMs request no extended resource, so there is nothing to plan.
CONSUMERS = (KATA, KUBEVIRT)
# How many node names a line of the plan's overview shows before it counts the rest.
OVERVIEW_NAMES_SHOWN = 5
MODES = ("auto", "kubevirt", "nfd", "kernel")
# kernel: one pool per node under NFD's (Kata's) resource name, written into the Node's status by the node agent
# (tee-key-agent, plugins/module_utils/agent) at what the kernel has free; VMIs request it through an admission policy.
KERNEL = "kernel"
AGENT = "agent"

# Per CPU vendor: the TEE, the misc resource its keys come from, and both advertisers.
VENDORS = {
    tee.INTEL: {
        "tee": "tdx",
        "misc": tee.TDX,
        "nfd_rule": "intel.tdx",
        "nfd_resource": tee.NFD_TDX_KEYS,
        "nfd_value": tee.NFD_FEATURE_TDX_KEYS,
        "nfd_label": "intel.feature.node.kubernetes.io/tdx",
        "nfd_match": "tdx.enabled",
        "kubevirt_resource": tee.KUBEVIRT_TDX,
        "kubevirt_counts_keys": True,
        "kubevirt_gate": "WorkloadEncryptionTDX",
    },
    tee.AMD: {
        "tee": "snp",
        "misc": tee.SEV_ES,
        "nfd_rule": "amd.sev-snp",
        "nfd_resource": tee.NFD_SNP_ESIDS,
        "nfd_value": tee.NFD_FEATURE_SEV_ESIDS,
        "nfd_label": "amd.feature.node.kubernetes.io/snp",
        "nfd_match": "sev.snp.enabled",
        "kubevirt_resource": tee.KUBEVIRT_SEV,
        "kubevirt_counts_keys": False,
        "kubevirt_gate": "WorkloadEncryptionSEV",
    },
}
KEY_RESOURCES = frozenset(v["nfd_resource"] for v in VENDORS.values())


class KeyPoolError(TeeError):
    """A plan that would give some hardware keys two pools, or input that cannot be planned."""


def _node_input(raw: object, index: int) -> dict:
    if not isinstance(raw, dict):
        raise KeyPoolError("nodes[%d] must be a mapping with name, vendor and consumers, got %r" % (index, raw))
    name = raw.get("name")
    if not is_dns1123_subdomain(name):
        raise KeyPoolError(
            "nodes[%d].name %r is not a Kubernetes node name: at most 253 characters, dot-separated labels of "
            "a-z, 0-9 and '-' that start and end with a letter or digit (set tee_k8s_node_name for that host)"
            % (index, name)
        )
    vendor = raw.get("vendor")
    if vendor not in VENDORS:
        raise KeyPoolError("node %s: vendor must be intel or amd, got %r (set tee_cpu_vendor)" % (name, vendor))
    consumers = raw.get("consumers", [])
    if isinstance(consumers, str) or not isinstance(consumers, (list, tuple)):
        raise KeyPoolError("node %s: consumers must be a list such as [kata, kubevirt], got %r" % (name, consumers))
    unknown = [c for c in consumers if c not in CONSUMERS]
    if unknown:
        raise KeyPoolError("node %s: unknown consumers %s; use kata and/or kubevirt" % (name, unknown))
    mode = raw.get("mode") or "auto"
    if mode not in MODES:
        raise KeyPoolError("node %s: mode must be one of %s, got %r" % (name, ", ".join(MODES), mode))
    return {
        "name": name,
        "vendor": vendor,
        "consumers": sorted(set(consumers)),
        "mode": mode,
        "snp_asids": _snp_asids(name, vendor, raw.get("sev_asids")),
    }


def _snp_asids(name: str, vendor: str, split: object) -> int | None:
    """The SNP ASID count when ciphertext hiding splits the node's ``sev_es`` range, else ``None``.

    ``split`` is the node's ``sev_asids`` fact from ``tee_host_info``. With ciphertext hiding (Linux 6.18+
    ``arch/x86/kvm/svm/sev.c``) SNP guests get ASIDs 1..N only, while NFD's ``@cpu.security.sev.encrypted_state_ids``
    copies the joint ``sev_es`` line of ``misc.capacity``: advertising it would overstate SNP capacity.
    """
    if vendor != tee.AMD or split is None:
        return None
    if not isinstance(split, dict):
        raise KeyPoolError(
            "node %s: sev_asids must be the sev_asids fact of confidential.tee.tee_host_info (a mapping), got %r"
            % (name, split)
        )
    if not split.get("ciphertext_hiding"):
        return None
    snp = (split.get("snp") or {}).get("capacity")
    if isinstance(snp, bool) or not isinstance(snp, int) or snp < 0:
        raise KeyPoolError(
            "node %s: ciphertext hiding splits its SEV-ES/SNP ASIDs but the SNP count is %r: re-read the node with "
            "confidential.tee.tee_host_info (host.sev_asids.snp.capacity) before planning its key pool" % (name, snp)
        )
    return snp


def _fix_both(node: dict, info: dict) -> str:
    kernel = (
        "set tee_key_pool_mode: kernel for %s (one pool %s kept by the node agent at the keys the kernel has free, "
        "which VMIs request too; it also sees VMs outside Kubernetes)" % (node["name"], info["nfd_resource"])
    )
    if info["kubevirt_counts_keys"]:
        return (
            "%s, or set tee_key_pool_mode: kubevirt for %s (Kata's RuntimeClass overhead then requests %s, and NFD "
            "publishes labels only), or remove kubevirt from its tee_node_consumers (virt-handler is then kept "
            "off the node and NFD's %s is the pool)"
            % (kernel, node["name"], info["kubevirt_resource"], info["nfd_resource"])
        )
    return (
        "%s, or run Kata and KubeVirt SEV-SNP guests on different nodes: remove kata or kubevirt from the "
        "tee_node_consumers of %s (KubeVirt's %s counts virt-handler --max-devices, not keys, so Kata's "
        "overhead cannot share it)" % (kernel, node["name"], info["kubevirt_resource"])
    )


def _double_pool(node: dict, info: dict, rule_name: str) -> str:
    return (
        "node %s: two pools for the same %s keys (misc.capacity %s): NodeFeatureRule %s (rule %s) advertises %s "
        "for Kata, and KubeVirt's %s device plugin in virt-handler (feature gate %s) advertises %s for VMIs; "
        "each counts the keys on its own, so the scheduler would admit more guests than the node has keys. Fix: %s"
        % (
            node["name"],
            info["tee"].upper(),
            info["misc"],
            rule_name,
            info["nfd_rule"],
            info["nfd_resource"],
            info["tee"].upper(),
            info["kubevirt_gate"],
            info["kubevirt_resource"],
            _fix_both(node, info),
        )
    )


def _resolve(node: dict, rule_name: str, problems: list, warnings: list) -> dict:
    """The node's pool: which advertiser, which resource, whether virt-handler runs there."""
    info = VENDORS[node["vendor"]]
    kata, kubevirt = KATA in node["consumers"], KUBEVIRT in node["consumers"]
    mode = node["mode"]
    if mode == "auto":
        mode = "kubevirt" if kubevirt and (info["kubevirt_counts_keys"] or not kata) else "nfd"
        if kata and kubevirt and not info["kubevirt_counts_keys"]:
            problems.append(_double_pool(node, info, rule_name))
    elif mode == "nfd" and kubevirt:
        problems.append(_double_pool(node, info, rule_name))
    elif mode == "kubevirt" and kata and not info["kubevirt_counts_keys"]:
        problems.append(
            "node %s: mode kubevirt would point Kata's overhead at %s, which KubeVirt sizes from virt-handler "
            "--max-devices (1000 by default), not from the node's %s keys: no key pool at all. Fix: %s"
            % (node["name"], info["kubevirt_resource"], info["misc"], _fix_both(node, info))
        )
    if mode == "kubevirt" and not info["kubevirt_counts_keys"] and kubevirt:
        warnings.append(
            "node %s: KubeVirt advertises %s with virt-handler --max-devices devices, not the node's %s keys; "
            "SEV-ES/SNP VMIs beyond the key count are scheduled and fail to start. KubeVirt's "
            "spec.configuration.virtualMachineInstancesPerNode caps every VMI on every node, so use it as a key "
            "limit only where all VMIs are confidential" % (node["name"], info["kubevirt_resource"], info["misc"])
        )
    if node["snp_asids"] is not None and kubevirt and mode == "kubevirt":
        warnings.append(
            "node %s: ciphertext hiding gives SNP guests only %d ASIDs, but KubeVirt's %s counts --max-devices; "
            "more SNP VMIs than that fail with EBUSY" % (node["name"], node["snp_asids"], info["kubevirt_resource"])
        )
    if not node["consumers"]:
        pool = None
    elif mode == KERNEL:
        pool = {"resource": info["nfd_resource"], "advertiser": AGENT, "counts_keys": True}
    elif mode == "kubevirt":
        pool = {
            "resource": info["kubevirt_resource"],
            "advertiser": "kubevirt",
            "counts_keys": info["kubevirt_counts_keys"],
        }
    else:
        pool = {"resource": info["nfd_resource"], "advertiser": "nfd", "counts_keys": True}
    return {
        "name": node["name"],
        "vendor": node["vendor"],
        "tee": info["tee"],
        "misc_resource": info["misc"],
        "consumers": node["consumers"],
        "mode": mode if node["consumers"] else "none",
        "pool": pool,
        # virt-handler must run where KubeVirt's plugin is the pool, and must not where NFD's is; in kernel mode it
        # runs for the node's VMIs (its plugin stays capacity-sized, the agent's pool binds).
        "virt_handler": bool(node["consumers"]) and (mode == "kubevirt" or (mode == KERNEL and kubevirt)),
        "nfd_extended_resource": bool(node["consumers"]) and mode == "nfd",
        "key_agent": bool(node["consumers"]) and mode == KERNEL,
        # Ciphertext hiding: the SNP range the NFD pool must advertise instead of the joint sev_es count.
        "snp_asids": node["snp_asids"],
    }


def _kata_pools(nodes: list, problems: list) -> dict:
    """Per TEE, the one resource Kata's RuntimeClasses can name in overhead.podFixed."""
    kata = {}
    for tee_name in ("tdx", "snp"):
        members = [n for n in nodes if n["tee"] == tee_name and KATA in n["consumers"]]
        resources = sorted({n["pool"]["resource"] for n in members})
        if len(resources) > 1:
            groups = "; ".join(
                "%s on %s" % (r, ", ".join(n["name"] for n in members if n["pool"]["resource"] == r)) for r in resources
            )
            problems.append(
                "RuntimeClasses kata-qemu-%s (and its GPU variant) put one resource in overhead.podFixed, but the "
                "Kata %s nodes use different pools: %s. Fix: give every Kata %s node the same tee_key_pool_mode"
                % (tee_name, tee_name.upper(), groups, tee_name.upper())
            )
        if members:
            kata[tee_name] = {"resource": resources[0], "nodes": [n["name"] for n in members]}
    return kata


def _kernel_plan(nodes: list, problems: list) -> dict:
    """Per TEE with kernel-mode nodes: the pool resource, the nodes the agent runs on, and KubeVirt's resource the
    admission policy keys on (only where a kernel-mode node runs VMIs).

    The policy cannot know where a launcher pod will land, so it adds the pool to every TDX (SEV) launcher pod:
    a VMI then fits only on nodes that advertise the pool, and every KubeVirt node of that TEE must be in kernel mode.
    """
    kernel = {}
    for vendor, info in sorted(VENDORS.items()):
        members = [n for n in nodes if n["vendor"] == vendor and n["key_agent"]]
        if not members:
            continue
        entry = {"resource": info["nfd_resource"], "nodes": [n["name"] for n in members]}
        if any(KUBEVIRT in n["consumers"] for n in members):
            entry["kubevirt_resource"] = info["kubevirt_resource"]
            others = [n["name"] for n in nodes if n["vendor"] == vendor and KUBEVIRT in n["consumers"]]
            outside = [name for name in others if name not in entry["nodes"]]
            if outside:
                problems.append(
                    "the admission policy of tee_key_pool_mode kernel adds %s to every %s VMI's launcher pod, but the "
                    "KubeVirt %s nodes %s are in another mode (their VMIs could no longer be scheduled). Fix: give "
                    "every KubeVirt %s node tee_key_pool_mode: kernel (now on %s)"
                    % (
                        info["nfd_resource"],
                        info["tee"].upper(),
                        info["tee"].upper(),
                        ", ".join(outside),
                        info["tee"].upper(),
                        ", ".join(entry["nodes"]),
                    )
                )
        kernel[info["tee"]] = entry
    return kernel


def plan(nodes, rule_name: str = "confidential-tee-keys", openshift: bool = False) -> dict:
    """The key-pool plan for ``nodes`` (dicts with name, vendor, consumers, mode), or :class:`KeyPoolError`.

    The error message lists every problem, each naming the objects involved and how to fix it.
    """
    if isinstance(nodes, dict) or not isinstance(nodes, (list, tuple)):
        raise KeyPoolError("nodes must be a list of node mappings, got %s" % type(nodes).__name__)
    parsed = [_node_input(raw, i) for i, raw in enumerate(nodes)]
    # Counted once: names.count() per node was quadratic (25 M comparisons at 5,000 nodes).
    duplicates = sorted(name for name, count in Counter(n["name"] for n in parsed).items() if count > 1)
    if duplicates:
        raise KeyPoolError("nodes listed twice: %s; each node has one plan" % ", ".join(duplicates))
    problems: list = []
    warnings: list = []
    resolved = [_resolve(n, rule_name, problems, warnings) for n in sorted(parsed, key=lambda n: n["name"])]
    kata = _kata_pools(resolved, problems)
    kernel = _kernel_plan(resolved, problems)
    if openshift and len(kata) > 1:
        problems.append(
            "OpenShift's kata-cc RuntimeClass serves TDX and SNP nodes alike but can request only one key "
            "resource; this plan has Kata on both (%s). Fix: run Kata only on one CPU vendor's nodes"
            % "; ".join("%s: %s" % (t, ", ".join(kata[t]["nodes"])) for t in sorted(kata))
        )
    if problems:
        raise KeyPoolError(" | ".join(problems))
    return {
        "nodes": {n["name"]: n for n in resolved},
        "kata": kata,
        "nfd": _nfd_plan(resolved),
        "kubevirt": _kubevirt_plan(resolved),
        "kernel": kernel,
        "summary": [summary_line(n) for n in resolved],
        "overview": overview_lines(resolved),
        "warnings": warnings,
    }


def _nfd_plan(nodes: list) -> dict:
    out = {}
    for vendor, info in sorted(VENDORS.items()):
        members = [n for n in nodes if n["vendor"] == vendor]
        if members:
            out[info["tee"]] = {
                "vendor": vendor,
                "rule": info["nfd_rule"],
                "label": info["nfd_label"],
                "match": info["nfd_match"],
                "resource": info["nfd_resource"],
                "value": info["nfd_value"],
                "resource_nodes": [n["name"] for n in members if n["nfd_extended_resource"]],
                # Per node, a fixed count NFD must publish instead of the feature (ciphertext hiding's SNP range).
                "static_values": {
                    n["name"]: n["snp_asids"]
                    for n in members
                    if n["nfd_extended_resource"] and n.get("snp_asids") is not None
                },
            }
    return out


def _kubevirt_plan(nodes: list) -> dict:
    handler = [n for n in nodes if n["virt_handler"]]
    return {
        # The gate starts the plugin; Kata-only nodes in kubevirt mode need it as much as VMI nodes.
        "feature_gates": sorted({VENDORS[n["vendor"]]["kubevirt_gate"] for n in handler}),
        "nodes": [n["name"] for n in handler],
        # Every node where the TDX plugin is the pool: with attestation enforced, a missing QGS socket
        # marks all its devices Unhealthy, which blocks Kata pods charging it as well as TDX VMIs.
        "tdx_nodes": [n["name"] for n in handler if n["tee"] == "tdx"],
        # Nodes where virt-handler would add a second pool: NFD advertises their keys for Kata. Only a
        # KubeVirt with a TEE gate on runs a TEE plugin, so without KubeVirt nodes nothing is excluded.
        "excluded_nodes": [n["name"] for n in nodes if n["nfd_extended_resource"]] if handler else [],
    }


def summary_line(node: dict) -> str:
    return "%s (%s): %s" % (node["name"], node["tee"].upper(), _decision(node))


def overview_lines(nodes: list, shown: int = OVERVIEW_NAMES_SHOWN) -> list:
    """The plan in one line per distinct decision, in the order of its first node, naming its nodes (the first
    ``shown`` of them and a count of the rest): what a person reads of a 5,000-node plan, where
    :func:`summary_line` gives one line per node."""
    groups: dict = {}
    order = []  # the decisions in the order of their first node
    for node in nodes:
        key = (node["tee"].upper(), _decision(node))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(node["name"])
    lines = []
    for tee_name, decision in order:
        names = groups[(tee_name, decision)]
        counted = "" if len(names) == 1 else "%s nodes, " % format(len(names), ",")
        lines.append("%s (%s%s): %s" % (name_list(names, shown), counted, tee_name, decision))
    return lines


def _decision(node: dict) -> str:
    """What the plan decided for one node, without its name."""
    if node["pool"] is None:
        return "no consumers, no key pool; NFD labels only"
    pool = node["pool"]
    who = " and ".join(node["consumers"])
    if pool["advertiser"] == AGENT:
        source = "the node agent tee-key-agent (Node status, at the keys the kernel has free for Kubernetes)"
        if KUBEVIRT in node["consumers"]:
            source += "; VMIs request it through the admission policy"
    elif pool["advertiser"] == "kubevirt":
        source = "KubeVirt's virt-handler device plugin"
    elif node.get("snp_asids") is not None:
        source = (
            "NFD (NodeFeatureRule extended resource, fixed at %d: the SNP range of ciphertext hiding, not the joint "
            "sev_es count); virt-handler kept off the node" % node["snp_asids"]
        )
    else:
        source = "NFD (NodeFeatureRule extended resource); virt-handler kept off the node"
    return "one pool %s advertised by %s, charged by %s" % (pool["resource"], source, who)


def _counts_keys(name, value) -> bool:
    """An extendedResources entry that counts TEE keys: a key resource name, or any name (the GPU Operator's
    ``feature.node.kubernetes.io/...`` up to v25.10) whose value is a TEE key feature."""
    return name in KEY_RESOURCES or (isinstance(value, str) and value in tee.NFD_FEATURES)


def stale_rules(rules) -> list:
    """Names of rules in the cluster left behind by a rename (``tee.STALE_NFD_RULES``): the cleanup deletes them."""
    names = []
    for rule in rules or []:
        meta = rule.get("metadata") if isinstance(rule, dict) else None
        if isinstance(meta, dict) and meta.get("name") in tee.STALE_NFD_RULES:
            names.append(meta["name"])
    return sorted(set(names))


def foreign_key_rules(rules, own_names=(), remove_names=()) -> list:
    """NodeFeatureRules (as read from the API) that advertise TEE key resources but are not ours.

    Returns ``[{"name", "namespace", "resources"}]``; rules listed in ``remove_names`` are left out (the
    caller deletes them). Such a rule adds a second advertiser on every node it matches.
    """
    found = []
    for rule in rules or []:
        if not isinstance(rule, dict):
            continue
        meta = rule.get("metadata") if isinstance(rule.get("metadata"), dict) else {}
        name = meta.get("name")
        if name in own_names or name in remove_names:
            continue
        spec = rule.get("spec") if isinstance(rule.get("spec"), dict) else {}
        listed = spec.get("rules") if isinstance(spec.get("rules"), list) else []
        resources = sorted(
            {
                res
                for item in listed
                if isinstance(item, dict) and isinstance(item.get("extendedResources"), dict)
                for res, value in item["extendedResources"].items()
                if _counts_keys(res, value)
            }
        )
        if resources:
            found.append({"name": name, "namespace": meta.get("namespace"), "resources": resources})
    return found
