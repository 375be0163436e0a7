# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""One pool per node: which extended resource advertises a node's TEE keys, and who charges it.

This is the only place the collection plans key accounting, by the rules of the key-pool policy
(``common/pool_policy.py``: the TEE resources, the advertisers, and per mode who draws from which and what it
refuses). Every cluster role renders from the plan :func:`plan` returns; none re-derives it.

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

from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.text import name_list
from ansible_collections.confidential.tee.plugins.module_utils.common.validation import is_dns1123_subdomain

KATA = tee.KATA
KUBEVIRT = tee.KUBEVIRT
# The consumers a node may declare; external VMs request no extended resource, so there is nothing to plan.
CONSUMERS = (KATA, KUBEVIRT)
# How many node names a line of the plan's overview shows before it counts the rest.
OVERVIEW_NAMES_SHOWN = 5
# The TEE resources, advertisers and modes: the one key-pool policy (common/pool_policy.py).
TEE_RESOURCES = pool_policy.TEE_RESOURCES
NFD = pool_policy.ADVERTISERS["nfd"]
KUBEVIRT_PLUGIN = pool_policy.ADVERTISERS["kubevirt"]
AGENT = pool_policy.ADVERTISERS["agent"]
KEY_RESOURCES = frozenset(NFD.resources.values())


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
    if vendor not in TEE_RESOURCES:
        raise KeyPoolError(
            "node %s: vendor must be %s, got %r (set tee_cpu_vendor)" % (name, tee_registry.vendor_choices(), vendor)
        )
    consumers = raw.get("consumers", [])
    if isinstance(consumers, str) or not isinstance(consumers, (list, tuple)):
        raise KeyPoolError("node %s: consumers must be a list such as [kata, kubevirt], got %r" % (name, consumers))
    unknown = [c for c in consumers if c not in CONSUMERS]
    if unknown:
        raise KeyPoolError("node %s: unknown consumers %s; use kata and/or kubevirt" % (name, unknown))
    mode = raw.get("mode") or pool_policy.AUTO
    if mode not in pool_policy.mode_names():
        raise KeyPoolError(
            "node %s: mode must be one of %s, got %r" % (name, ", ".join(pool_policy.mode_names()), mode)
        )
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
    if tee_registry.by_vendor(vendor).misc != tee.SEV_ES or split is None:
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


def _fix_both(node: dict) -> str:
    vendor = node["vendor"]
    shared = pool_policy.shared_modes(vendor)
    if shared:
        choices = " or ".join(
            "tee_key_pool_mode: %s (%s: Kata's RuntimeClass overhead then requests %s, and NFD publishes labels only)"
            % (name, pool_policy.mode(name).summary, pool_policy.advertiser_of(name).resources[vendor])
            for name in shared
        )
        slots = (
            ""
            if KUBEVIRT_PLUGIN.counts_keys[vendor]
            else " (KubeVirt's own %s counts virt-handler --max-devices, not keys: Kata's overhead cannot share that)"
            % KUBEVIRT_PLUGIN.resources[vendor]
        )
        return (
            "set %s for %s%s, or remove kubevirt from its tee_node_consumers (virt-handler is then kept off the node "
            "and NFD's %s is the pool)" % (choices, node["name"], slots, NFD.resources[vendor])
        )
    return (
        "run Kata and KubeVirt SEV-SNP guests on different nodes: remove kata or kubevirt from the "
        "tee_node_consumers of %s (KubeVirt's %s counts virt-handler --max-devices, not keys, so Kata's "
        "overhead cannot share it)" % (node["name"], KUBEVIRT_PLUGIN.resources[vendor])
    )


def _double_pool(node: dict, rule_name: str) -> str:
    res = TEE_RESOURCES[node["vendor"]]
    return (
        "node %s: two pools for the same %s keys (misc.capacity %s): NodeFeatureRule %s (rule %s) advertises %s "
        "for Kata, and KubeVirt's %s device plugin in virt-handler (feature gate %s) advertises %s for VMIs; "
        "each counts the keys on its own, so the scheduler would admit more guests than the node has keys. Fix: %s"
        % (
            node["name"],
            res.tee.upper(),
            res.misc,
            rule_name,
            res.nfd_rule,
            NFD.resources[res.vendor],
            res.tee.upper(),
            KUBEVIRT_PLUGIN.gates[res.vendor],
            KUBEVIRT_PLUGIN.resources[res.vendor],
            _fix_both(node),
        )
    )


def _refusals(node: dict, mode: str, rule_name: str) -> list:
    """The policy's reasons ``mode`` cannot serve ``node``, as messages naming the objects and the fix."""
    found = []
    for kind, _consumer in pool_policy.problems_of(mode, node["vendor"], node["consumers"]):
        if kind == "second_pool":
            found.append(_double_pool(node, rule_name))
        else:
            advertiser = pool_policy.advertiser_of(mode)
            found.append(
                "node %s: mode %s would point Kata's overhead at %s, which KubeVirt sizes from virt-handler "
                "--max-devices (1000 by default), not from the node's %s keys: no key pool at all. Fix: %s"
                % (
                    node["name"],
                    mode,
                    advertiser.resources[node["vendor"]],
                    TEE_RESOURCES[node["vendor"]].misc,
                    _fix_both(node),
                )
            )
    return found


def _uncounted_vmis(node: dict, mode: str) -> list:
    """Warnings for VMIs drawing from a pool whose size is not the key count (KubeVirt's AMD slots)."""
    advertiser = pool_policy.advertiser_of(mode)
    vendor = node["vendor"]
    drawn = KUBEVIRT in node["consumers"] and KUBEVIRT in pool_policy.mode(mode).draws
    if not drawn or advertiser.counts_keys[vendor]:
        return []
    resource, misc = advertiser.resources[vendor], TEE_RESOURCES[vendor].misc
    warnings = [
        "node %s: KubeVirt advertises %s with virt-handler --max-devices devices, not the node's %s keys; "
        "SEV-ES/SNP VMIs beyond the key count are scheduled and fail to start. KubeVirt's "
        "spec.configuration.virtualMachineInstancesPerNode caps every VMI on every node, so use it as a key "
        "limit only where all VMIs are confidential" % (node["name"], resource, misc)
    ]
    if node["snp_asids"] is not None:
        warnings.append(
            "node %s: ciphertext hiding gives SNP guests only %d ASIDs, but KubeVirt's %s counts --max-devices; "
            "more SNP VMIs than that fail with EBUSY" % (node["name"], node["snp_asids"], resource)
        )
    return warnings


def _resolve(node: dict, rule_name: str, problems: list, warnings: list) -> dict:
    """The node's pool: which advertiser, which resource, whether virt-handler runs there."""
    res = TEE_RESOURCES[node["vendor"]]
    mode = node["mode"]
    if mode == pool_policy.AUTO:
        mode = pool_policy.auto_mode(node["vendor"], node["consumers"])
    problems.extend(_refusals(node, mode, rule_name))
    warnings.extend(_uncounted_vmis(node, mode))
    advertiser = pool_policy.advertiser_of(mode)
    pool = None
    if node["consumers"]:
        pool = {
            "resource": advertiser.resources[res.vendor],
            "advertiser": advertiser.name,
            "counts_keys": advertiser.counts_keys[res.vendor],
        }
    return {
        "name": node["name"],
        "vendor": node["vendor"],
        "tee": res.tee,
        "misc_resource": res.misc,
        "consumers": node["consumers"],
        "mode": mode if node["consumers"] else "none",
        "pool": pool,
        # virt-handler must run where KubeVirt's plugin is the pool and where the node's VMIs draw from the agent's
        # (its plugin then stays capacity-sized, the agent's pool binds); never where NFD's is.
        "virt_handler": pool is not None and (advertiser is KUBEVIRT_PLUGIN or KUBEVIRT in node["consumers"]),
        "nfd_extended_resource": pool is not None and advertiser is NFD,
        # The node agent writes the pool into the Node's status (role tee_key_agent or the DaemonSet).
        "key_agent": pool is not None and advertiser is AGENT,
        # Ciphertext hiding: the SNP range the NFD pool must advertise instead of the joint sev_es count.
        "snp_asids": node["snp_asids"],
    }


def _kata_pools(nodes: list, problems: list) -> dict:
    """Per TEE, the one resource Kata's RuntimeClasses can name in overhead.podFixed."""
    kata = {}
    for tee_name in tee_registry.SHORT_NAMES:
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


def _agent_plan(nodes: list, problems: list) -> dict:
    """Per TEE with nodes whose pool the node agent keeps: the pool resource, those nodes, and KubeVirt's resource
    the admission policy keys on where such a node runs VMIs.

    The policy cannot know where a launcher pod will land, so it adds the pool to every TDX (SEV) launcher pod: a
    VMI then fits only on nodes advertising the pool, and every KubeVirt node of that TEE must be such a node.
    """
    kept = {}
    for vendor, res in sorted(TEE_RESOURCES.items()):
        members = [n for n in nodes if n["vendor"] == vendor and n["key_agent"]]
        if not members:
            continue
        entry = {"resource": AGENT.resources[vendor], "nodes": [n["name"] for n in members]}
        if any(KUBEVIRT in n["consumers"] for n in members):
            entry["kubevirt_resource"] = KUBEVIRT_PLUGIN.resources[vendor]
            outside = [
                n["name"]
                for n in nodes
                if n["vendor"] == vendor and KUBEVIRT in n["consumers"] and n["name"] not in entry["nodes"]
            ]
            if outside:
                modes = [m.name for m in pool_policy.MODES if m.advertiser == AGENT.name]
                problems.append(
                    "the admission policy adds %s to every %s VMI's launcher pod (tee_key_pool_mode %s on %s), but "
                    "the KubeVirt %s nodes %s are in another mode: their VMIs could no longer be scheduled. Fix: give "
                    "every KubeVirt %s node tee_key_pool_mode: %s"
                    % (
                        entry["resource"],
                        res.tee.upper(),
                        modes[0],
                        name_list(entry["nodes"], OVERVIEW_NAMES_SHOWN),
                        res.tee.upper(),
                        name_list(outside, OVERVIEW_NAMES_SHOWN),
                        res.tee.upper(),
                        modes[0],
                    )
                )
        kept[res.tee] = entry
    return kept


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
    agent = _agent_plan(resolved, problems)
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
        # Read by the agent's renderer (DaemonSet, RBAC, admission policy): key "kernel", as in the mode's name.
        "kernel": agent,
        "summary": [summary_line(n) for n in resolved],
        "overview": overview_lines(resolved),
        "warnings": warnings,
    }


def _nfd_plan(nodes: list) -> dict:
    out = {}
    for vendor, res in sorted(TEE_RESOURCES.items()):
        members = [n for n in nodes if n["vendor"] == vendor]
        if members:
            out[res.tee] = {
                "vendor": vendor,
                "rule": res.nfd_rule,
                "label": res.nfd_label,
                "match": res.nfd_match,
                "resource": NFD.resources[vendor],
                "value": NFD.reads[vendor],
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
        "feature_gates": sorted({KUBEVIRT_PLUGIN.gates[n["vendor"]] for n in handler}),
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
    advertiser = pool_policy.ADVERTISERS[pool["advertiser"]]
    kept_off = "; virt-handler kept off the node" if KUBEVIRT in pool_policy.mode(node["mode"]).refuses else ""
    if advertiser is NFD and node.get("snp_asids") is not None:
        source = (
            "NFD (NodeFeatureRule extended resource, fixed at %d: the SNP range of ciphertext hiding, not the joint "
            "sev_es count)%s" % (node["snp_asids"], kept_off)
        )
    else:
        source = advertiser.who + kept_off
    if advertiser is AGENT and KUBEVIRT in node["consumers"]:
        source += "; VMIs request it through the admission policy"
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
