# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Key drift: where the scheduler's view of TEE keys (Kubernetes objects) disagrees with the kernel's.

Pure functions over the facts ``tee_host_info`` returns with ``preflight: true`` (misc capacity and usage,
top-level cgroups, hardware key counts, KVM parameters) and the Kubernetes objects of the same node: the
Node (``status.capacity``/``allocatable``), the pods bound to it (requests and ``spec.overhead``, see
:mod:`kube_objects`), RuntimeClasses and NFD NodeFeatureRules.

Which extended resource counts which kernel key pool (:data:`KEY_POOLS`, extendable with ``resource_map``):

* ``tdx.intel.com/keys``: NFD, from ``@cpu.security.tdx.total_keys`` (``misc.capacity`` ``tdx``), requested
  by Kata's RuntimeClass overhead; ``devices.kubevirt.io/tdx``: KubeVirt's TDX device plugin.
* ``sev-snp.amd.com/esids``: NFD, from ``@cpu.security.sev.encrypted_state_ids`` (``sev_es``);
  ``devices.kubevirt.io/sev-esids``: a KubeVirt SEV-ES ASID pool.
* A NodeFeatureRule's ``extendedResources`` name whose value is one of the NFD features above counts that
  pool, whatever the name. ``devices.kubevirt.io/sev`` is KubeVirt's ``/dev/sev`` device: every SEV,
  SEV-ES and SNP VM requests one, and it counts no ASID.

NFD's prefix quirk (``source/cpu/security_amd64.go`` in node-feature-discovery): ``getCgroupMiscCapacity``
returns the first ``misc.capacity`` line that *starts with* the resource name, so when the kernel prints no
``sev`` line (every ASID given to SEV-ES) the ``sev`` lookup matches ``sev_es N`` and ``sev.asids`` becomes N.

Every finding has ``id``, ``node``, ``resource``, ``severity`` (``critical``: guests will fail to start;
``warning``: keys stranded or uncounted; ``info``), ``title``, ``numbers``, ``detail`` and ``fix``.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common import pool_policy, tee, tee_registry
from ansible_collections.confidential.tee.plugins.module_utils.fleet.kube_objects import (
    is_running,
    items,
    labels_of,
    name_of,
    object_ref,
    pod_requests,
    pods_by_node,
    resource_list,
    selector_matches,
    unique_objects,
)
from ansible_collections.confidential.tee.plugins.module_utils.host.capacity_check import EXHAUSTION_SIGNATURES

MISC_RESOURCES = tee.MISC_REPORT_ORDER
# The mutable, per-report form ``resource_map`` extends.
KEY_POOLS = {
    pool.resource: {"misc": pool.misc, "advertiser": pool.advertiser, "kind": pool.kind} for pool in tee.KEY_POOLS
}
NFD_FEATURES = tee.NFD_FEATURES
SEV_DEVICE = tee.KUBEVIRT_SEV
CRITICAL, WARNING, INFO = "critical", "warning", "info"


# ---------------------------------------------------------------------------------------------------
# Who advertises what
# ---------------------------------------------------------------------------------------------------


def nfd_advertisers(rules, problems=None) -> dict[str, list[dict]]:
    """``{extended resource: [{rule, value, misc, static}]}`` from NodeFeatureRules' ``extendedResources``.

    A rule object whose fields have the wrong type (what a corrupted or hand-made object can hold) adds a
    problem naming the object and the field to ``problems`` and advertises nothing."""
    problems = [] if problems is None else problems
    found: dict[str, list[dict]] = {}
    for rule_object in items(rules):
        ref = object_ref(rule_object, "NodeFeatureRule")
        spec = rule_object.get("spec")
        if not isinstance(spec, dict):
            problems.append("%s spec: must be an object, got %s" % (ref, type_name(spec)))
            continue
        listed = spec.get("rules")
        if not isinstance(listed, list):
            if listed is not None:
                problems.append("%s spec.rules: must be a list, got %s" % (ref, type_name(listed)))
            continue
        for index, rule in enumerate(listed):
            for name, value in _extended_resources(ref, index, rule, problems):
                feature = NFD_FEATURES.get(value)
                found.setdefault(name, []).append(
                    {
                        "rule": "NodeFeatureRule %s/%s" % (name_of(rule_object), rule.get("name")),
                        "value": value,
                        "misc": feature or (KEY_POOLS.get(name) or {}).get("misc"),
                        "static": not value.startswith("@"),
                    }
                )
    return found


def _extended_resources(ref, index, rule, problems) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs of ``spec.rules[index].extendedResources`` that are strings, as NFD reads them."""
    where = "%s spec.rules[%d]" % (ref, index)
    if not isinstance(rule, dict):
        problems.append("%s: must be an object, got %s" % (where, type_name(rule)))
        return []
    resources = rule.get("extendedResources")
    if resources is None:
        return []
    if not isinstance(resources, dict):
        problems.append("%s.extendedResources: must be an object, got %s" % (where, type_name(resources)))
        return []
    pairs = []
    for name, value in resources.items():
        if isinstance(value, str):
            pairs.append((name, value))
        else:
            problems.append("%s.extendedResources[%s]: must be a string, got %s" % (where, name, type_name(value)))
    return pairs


def type_name(value) -> str:
    """How a problem names a JSON value's type (the API server's words: object, list, string, number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean %s" % str(value).lower()
    if isinstance(value, (int, float)):
        return "number %r" % value
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def pool_catalog(nfd, resource_map=None) -> dict[str, dict]:
    """Every extended resource known to count a misc pool: defaults, NFD rules, then ``resource_map``."""
    catalog = {name: dict(entry, rules=[]) for name, entry in KEY_POOLS.items()}
    for name, rules in nfd.items():
        misc = next((r["misc"] for r in rules if r["misc"]), None)
        if misc is None:
            continue
        entry = catalog.setdefault(name, {"misc": misc, "advertiser": "NFD", "kind": "nfd"})
        entry["misc"] = misc
        entry["rules"] = rules
        entry["kind"] = "nfd-static" if all(r["static"] for r in rules) else "nfd"
        entry["advertiser"] = "; ".join(r["rule"] + " = " + r["value"] for r in rules)
    for name, misc in (resource_map or {}).items():
        known = catalog.get(name, {"advertiser": "resource_map", "kind": "plugin", "rules": []})
        catalog[name] = dict(known, misc=misc)
    return catalog


# ---------------------------------------------------------------------------------------------------
# The kernel's side
# ---------------------------------------------------------------------------------------------------


def kernel_pool(host, resource) -> dict:
    """Capacity, usage and where the keys are charged, for one misc resource of one host (``None``: unknown)."""
    capacity = (host or {}).get("capacity") or {}
    entry = (capacity.get("resources") or {}).get(resource) or {}
    present = bool((capacity.get("misc_controller") or {}).get("present"))
    pool = {
        "capacity": entry.get("capacity") if present else None,
        "in_use": entry.get("current") if present else None,
        "free": entry.get("free") if present else None,
        "peak": entry.get("peak") if present else None,
        "in_use_is_lower_bound": bool(entry.get("current_is_lower_bound")),
        "source": "misc" if present and entry.get("capacity") is not None else None,
        "events": None,
        "by_cgroup": {},
    }
    registers = (host or {}).get("hardware_keys") or {}
    if resource == "tdx" and registers.get("tdx_misc_resource") is False:
        # This kernel does not count TDX keys: the capacity can only come from the hardware, usage is unknown.
        msr = registers.get("tdx") or {}
        readable = bool(msr.get("readable"))
        pool.update(
            capacity=msr.get("tdx_guest_keyids") if readable else None,
            source="hardware" if readable else None,
            in_use=None,
            free=None,
            peak=None,
        )
    cgroups = [c for c in capacity.get("cgroups") or [] if "/" not in c.get("path", "/")]
    for cgroup in cgroups:
        used = (cgroup.get("current") or {}).get(resource)
        if used:
            pool["by_cgroup"][cgroup["path"]] = used
    pool["events_unknown"] = None
    if cgroups:
        counts = [(c.get("events") or {}).get(resource) for c in cgroups]
        pool["events"] = None if None in counts else sum(counts)
        missing = [c.get("path") for c in cgroups if (c.get("events") or {}).get(resource) is None]
        # kernel/cgroup/misc.c lists a resource in misc.events only while it has capacity (or events): with
        # capacity, a missing count means the file was missing, unreadable or garbled (the host's problems say which).
        if missing and pool["capacity"]:
            pool["events_unknown"] = (
                "misc.events of %s has no readable %s.max count: tee_misc_events_total left out"
                % (
                    ", ".join(sorted(missing)[:5]) + (" and %d more" % (len(missing) - 5) if len(missing) > 5 else ""),
                    resource,
                )
            )
    return pool


def outside_kubepods(pool) -> dict[str, int]:
    """Keys charged in top-level cgroups other than Kubernetes' ``kubepods`` (libvirt's ``machine.slice``...)."""
    return {path: used for path, used in pool["by_cgroup"].items() if not path.startswith("kubepods")}


# ---------------------------------------------------------------------------------------------------
# The scheduler's side
# ---------------------------------------------------------------------------------------------------


def advertised_pools(node, catalog, pods, problems) -> dict[str, list[dict]]:
    """Per misc resource, the extended resources the Node advertises for it, with what pods request."""
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    names = set(catalog) | {SEV_DEVICE}
    where = object_ref(node, "Node")
    first_problem = len(problems)
    capacity = resource_list(status.get("capacity"), names, problems, where + " status.capacity")
    allocatable = resource_list(status.get("allocatable"), names, problems, where + " status.allocatable")
    requests = [(pod, pod_requests(pod, names, problems)) for pod in pods]
    new_problems = problems[first_problem:]
    pools: dict[str, list[dict]] = {misc: [] for misc in MISC_RESOURCES}
    for name in sorted(set(capacity) | set(allocatable)):
        entry = catalog.get(name)
        if entry is None:
            continue
        pools.setdefault(entry["misc"], []).append(
            {
                "name": name,
                "advertiser": entry["advertiser"],
                "kind": entry["kind"],
                "rules": entry.get("rules") or [],
                "capacity": capacity.get(name),
                "allocatable": allocatable.get(name, capacity.get(name)),
                "requested": _total(r.get(name, 0) for _pod, r in requests),
                "held_by_running_pods": _total(r.get(name, 0) for pod, r in requests if is_running(pod)),
                # Why a number above is null (or capped at 2^63-1): the problems naming this resource's quantities.
                "unknown": [p for p in new_problems if p.split(": ", 1)[0].endswith("[%s]" % name)],
            }
        )
    return pools


def _total(counts):
    """A sum of counts that is unknown (``None``) when one of them is."""
    counts = list(counts)
    return None if None in counts else sum(counts)


# What this collection does about each finding (docs/cluster.md, docs/key-pools.md), added to the finding's fix.
# ``{node}`` is the node (``these nodes`` for fleet findings). Where the collection has no remedy, it says so.
# The modes each remedy names come from the key-pool policy (common/pool_policy.py), never from prose here.
_ONE_POOL = "run confidential.tee.cluster with tee_key_pool_mode set for {node}: "


def _double_pool_remedies() -> dict:
    """Per misc resource of a vendor where Kata and KubeVirt can share a pool, that mode; one remedy for the rest."""
    remedies = {}
    for vendor, res in sorted(pool_policy.TEE_RESOURCES.items()):
        shared = pool_policy.shared_modes(vendor)
        if shared:
            # Every mode in which the two share one pool, in the policy's order.
            choices = ", or ".join(
                "%s (Kata's RuntimeClass overhead then requests %s's %s and NFD publishes labels only)"
                % (name, pool_policy.advertiser_of(name).owner, pool_policy.advertiser_of(name).resources[vendor])
                for name in shared
            )
            remedies[("double_pool", res.misc)] = _ONE_POOL + (
                "%s, or %s where KubeVirt does not run; it refuses any plan with two pools for the same keys"
                % (choices, pool_policy.apart_modes(vendor)[0])
            )
        else:
            remedies[("double_pool", None)] = (
                "on %s, Kata and KubeVirt cannot share one pool (KubeVirt's SEV device counts no ASIDs): run "
                "confidential.tee.cluster with tee_node_consumers: [kata] and tee_key_pool_mode: %s for {node} "
                "(virt-handler kept off), KubeVirt VMs on other nodes"
                % (vendor.upper(), pool_policy.apart_modes(vendor)[0])
            )
    return remedies


def _external_remedy() -> str:
    counting = pool_policy.modes_drawing(pool_policy.EXTERNAL)
    if counting:
        return (
            "run confidential.tee.cluster with tee_key_pool_mode: %s for {node}: its pool counts the keys of guests "
            "outside Kubernetes" % counting[0]
        )
    return (
        "confidential.tee.cluster has no reservation for guests outside Kubernetes (no pool mode counts them): keep "
        "such VMs off the nodes in tee_nodes or run them as KubeVirt VMs, and gate on free keys with "
        "confidential.tee.tee_capacity_check (min_free)"
    )


def _stale_remedy() -> str:
    """A mode whose advertiser counts usage, else one the collection deploys, which re-reads the capacity."""
    modes = pool_policy.MODES
    usage = [m for m in modes if pool_policy.ADVERTISERS[m.advertiser].counts_usage]
    if usage:
        return (
            "with confidential.tee.cluster, tee_key_pool_mode: %s for {node} makes %s the only pool, which counts "
            "keys in use; no role restarts a device plugin"
            % (usage[0].name, pool_policy.advertiser_of(usage[0].name).owner)
        )
    chosen = next(m for m in modes if pool_policy.ADVERTISERS[m.advertiser].brought_by is None)
    where = " (where KubeVirt does not run)" if pool_policy.KUBEVIRT in chosen.refuses else ""
    return (
        "with confidential.tee.cluster, tee_key_pool_mode: %s for {node}%s makes %s the only pool, re-read every "
        "sleepInterval; no role restarts a device plugin"
        % (chosen.name, where, pool_policy.ADVERTISERS[chosen.advertiser].owner)
    )


def _snp_remedies() -> dict:
    """Remedies for the findings on the SEV-ES/SNP ASID pool, for the TEE whose guests charge it (SEV-SNP)."""
    snp = tee_registry.of_misc(tee.SEV_ES)
    amd = pool_policy.TEE_RESOURCES[snp.vendor]
    nfd_mode = next(m.name for m in pool_policy.MODES if m.advertiser == "nfd")
    default = (
        ", the default on %s" % snp.vendor_name if pool_policy.auto_mode(snp.vendor, (tee.KATA,)) == nfd_mode else ""
    )
    kata_pool = next(
        m.name
        for m in pool_policy.MODES
        if tee.KATA in m.draws and not pool_policy.problems_of(m.name, snp.vendor, (tee.KATA,))
    )
    return {
        ("snp_pool_exceeds_snp_range", None): "confidential.tee.cluster (role nfd_tee_rules) publishes the SNP range "
        "as a fixed count on nodes with ciphertext hiding (tee_key_pool_mode: %s%s)" % (nfd_mode, default),
        ("sev_es_uncounted", None): "run confidential.tee.cluster with tee_key_pool_mode: %s for {node}: it "
        "advertises %s and its kata-qemu-%s RuntimeClass requests it"
        % (kata_pool, pool_policy.advertiser_of(kata_pool).resources[snp.vendor], amd.tee),
    }


def collection_remedies() -> dict:
    """(finding id, resource or ``None``) -> this collection's remedy, from the key-pool policy."""
    return {
        **_double_pool_remedies(),
        ("external_usage", None): _external_remedy(),
        ("nfd_sev_prefix", None): "confidential.tee.cluster (role nfd_tee_rules) advertises AMD keys only as "
        "sev-snp.amd.com/esids, never the sev prefix match; it does not delete rules it did not write: remove this one",
        ("stale_advertiser", None): _stale_remedy(),
        **_snp_remedies(),
        ("runtimeclass_unadvertised", None): "confidential.tee.cluster renders each node's advertiser and the "
        "RuntimeClass overhead from one plan (tee_key_pool_mode per node), so the two cannot disagree",
        ("gpu_operator_key_pool", None): "confidential.tee.cluster refuses such a foreign advertiser of the node's "
        "keys until it is gone",
    }


COLLECTION_REMEDY = collection_remedies()


def collection_remedy(finding_id, node, resource) -> str | None:
    """This collection's own remedy for a finding (``None`` for a finding it has nothing to add to)."""
    text = COLLECTION_REMEDY.get((finding_id, resource)) or COLLECTION_REMEDY.get((finding_id, None))
    return text.format(node=node or "these nodes") if text else None


def _finding(node, resource, finding_id, severity, title, numbers, detail, fix) -> dict:
    remedy = collection_remedy(finding_id, node, resource)
    if remedy:
        fix = "%s. With confidential.tee: %s." % (fix.rstrip(". "), remedy)
    if severity == CRITICAL and resource in EXHAUSTION_SIGNATURES:
        # Guests will fail to start: say what that failure looks like, as the kernel and QEMU report it.
        detail = "%s How it shows: %s." % (detail.rstrip(), EXHAUSTION_SIGNATURES[resource])
    return {
        "id": finding_id,
        "node": node,
        "resource": resource,
        "severity": severity,
        "title": title,
        "numbers": numbers,
        "detail": detail,
        "fix": fix,
    }


def _active(pools) -> list[dict]:
    return [pool for pool in pools if pool["allocatable"]]


def double_pool(node, resource, kernel, pools) -> list[dict]:
    """Two or more extended resources advertise the same kernel keys: the scheduler sees them twice."""
    active = _active(pools)
    if len(active) < 2:
        return []
    schedulable = sum(p["allocatable"] for p in active)
    capacity = kernel["capacity"]
    basis = capacity if capacity is not None else max(p["allocatable"] for p in active)
    numbers = {
        "kernel_capacity": capacity,
        "kernel_capacity_source": kernel["source"],
        "advertised": {p["name"]: p["allocatable"] for p in active},
        "schedulable": schedulable,
        "worst_case_overcommit": max(schedulable - basis, 0),
    }
    if kernel["free"] is not None and all(p["requested"] is not None for p in active):
        scheduler_free = sum(max(p["allocatable"] - p["requested"], 0) for p in active)
        numbers.update(kernel_free=kernel["free"], scheduler_free=scheduler_free)
        numbers["overcommit_now"] = max(scheduler_free - kernel["free"], 0)
    listed = " and ".join("%s %d (%s)" % (p["name"], p["allocatable"], p["advertiser"]) for p in active)
    detail = "%s keys are advertised %d times: %s. The scheduler can place %d guests on %s keys: up to %d fail." % (
        resource,
        len(active),
        listed,
        schedulable,
        capacity if capacity is not None else "an unknown number of",
        numbers["worst_case_overcommit"],
    )
    if "overcommit_now" in numbers:
        detail += " Right now it sees %d free where the kernel has %d." % (numbers["scheduler_free"], kernel["free"])
    nfd = [p["name"] for p in active if p["kind"].startswith("nfd")]
    plugins = [p["name"] for p in active if not p["kind"].startswith("nfd")]
    share = "most %s" % capacity if capacity is not None else "most the kernel's capacity"
    if nfd and plugins:
        fix = (
            "keep one pool for %s: make KubeVirt VMs request %s, the resource Kata's RuntimeClass overhead already "
            "uses (one count for both), and stop the device plugin advertising %s; or the reverse: point the "
            "RuntimeClass overhead at %s and drop %s from the NodeFeatureRule. If both must stay, give each a fixed "
            "share (a static NFD value, the plugin's limit) that sum to at %s"
            % (resource, nfd[0], ", ".join(plugins), plugins[0], nfd[0], share)
        )
    else:
        fix = (
            "advertise %s keys through one resource only (now: %s), or split them into fixed shares summing to at %s"
            % (
                resource,
                ", ".join(p["name"] for p in active),
                share,
            )
        )
    if capacity is not None and numbers["worst_case_overcommit"] == 0:
        # Fixed shares that sum to at most the capacity: two pools, but no guest can be placed on a missing key.
        detail = "%s keys are split into %d fixed shares: %s, %d in all of %d: no overcommit." % (
            resource,
            len(active),
            listed,
            schedulable,
            capacity,
        )
        fix = "nothing to fix; a share's unused keys are idle while the other runs out (one pool would share them)"
        return [_finding(node, resource, "double_pool", INFO, "split key pool", numbers, detail, fix)]
    return [_finding(node, resource, "double_pool", CRITICAL, "double pool", numbers, detail, fix)]


def external_usage(node, resource, kernel, pools) -> list[dict]:
    """Keys the kernel has handed out that no running pod accounts for: guests outside Kubernetes."""
    if kernel["in_use"] is None or not _active(pools):
        return []
    held = _total(p["held_by_running_pods"] for p in pools)
    if held is None:
        return []  # a running pod's request cannot be read: listed in problems
    outside = kernel["in_use"] - held
    if outside <= 0:
        return []
    cgroups = outside_kubepods(kernel)
    numbers = {
        "kernel_in_use": kernel["in_use"],
        "in_use_is_lower_bound": kernel["in_use_is_lower_bound"],
        "held_by_running_pods": held,
        "outside_kubernetes": outside,
        "charged_outside_kubepods": cgroups,
    }
    where = (
        "; the kernel charges them to %s" % ", ".join("%s (%d)" % item for item in sorted(cgroups.items()))
        if cgroups
        else ""
    )
    detail = "the kernel has %d %s keys in use%s, running pods account for %d: %d are used outside Kubernetes%s." % (
        kernel["in_use"],
        resource,
        " (at least)" if kernel["in_use_is_lower_bound"] else "",
        held,
        outside,
        where,
    )
    fix = (
        "reserve them from the scheduler: lower the advertised count by %d (a static value in the NFD rule, or "
        "the device plugin's reservation), or run a reconciling device plugin that subtracts misc.current; "
        "find the guests with `systemd-cgls` under the cgroups named above (libvirt puts its VMs in machine.slice)"
        % outside
    )
    severity = CRITICAL
    if kernel["capacity"] is not None:
        # Keys the advertisers leave out of Kubernetes' pool are a reservation; guests outside Kubernetes that fit
        # in it never take a key the scheduler counts on.
        numbers["reserved"] = max(kernel["capacity"] - sum(p["allocatable"] for p in _active(pools)), 0)
        if numbers["reserved"] >= outside:
            severity = INFO
            detail += (
                " The advertisers leave %d keys out of Kubernetes' pool: the reservation covers them."
                % (numbers["reserved"])
            )
            fix = "nothing to fix while they stay within the reservation of %d keys" % numbers["reserved"]
    return [_finding(node, resource, "external_usage", severity, "keys used outside Kubernetes", numbers, detail, fix)]


def _nfd_sev_quirk(node, pool, kernel_sev, kernel_sev_es) -> list[dict]:
    """NFD matched ``sev_es N`` for ``sev``: an SEV ASID count where the kernel has none."""
    advertised = pool["capacity"] if pool["capacity"] is not None else pool["allocatable"]
    if kernel_sev["capacity"] != 0 or not kernel_sev_es["capacity"] or advertised != kernel_sev_es["capacity"]:
        return []
    rules = [r["rule"] for r in pool["rules"] if r["value"] == tee.NFD_FEATURE_SEV_ASIDS]
    numbers = {"advertised": advertised, "kernel_sev_capacity": 0, "kernel_sev_es_capacity": kernel_sev_es["capacity"]}
    detail = (
        "%s advertises %d SEV ASIDs, but the kernel has no sev line in misc.capacity (every ASID is an SEV-ES/SNP "
        "ASID): %d is the sev_es count. NFD's cpu source looks for the first misc.capacity line starting with 'sev', "
        "and 'sev_es %d' matches. Plain SEV guests placed on this node fail to start (misc charge refused)."
        % (pool["name"], advertised, kernel_sev_es["capacity"], kernel_sev_es["capacity"])
    )
    fix = (
        "remove %s from %s (this node has no plain-SEV ASIDs), or advertise it from a static value; SEV-ES/SNP "
        "guests belong on %s (%s)"
        % (
            pool["name"],
            ", ".join(rules) or "the NodeFeatureRule that advertises it",
            tee.NFD_SNP_ESIDS,
            tee.NFD_FEATURE_SEV_ESIDS,
        )
    )
    return [_finding(node, "sev", "nfd_sev_prefix", CRITICAL, "NFD sev prefix quirk", numbers, detail, fix)]


def _restart_hint(pool, node) -> str:
    if pool["kind"] == "plugin":
        return (
            "restart the device plugin on %s so it reads misc.capacity again (for KubeVirt: delete the virt-handler "
            "pod on that node); a plugin that started before TDX/SEV was initialised latched its count" % node
        )
    return (
        "NFD re-reads misc.capacity every sleepInterval (60 s): a lasting difference means nfd-worker is not running "
        "on %s or cannot read /sys/fs/cgroup; check `kubectl -n node-feature-discovery get pods -o wide`" % node
    )


def stale_advertisers(node, resource, kernel, pools, kernels) -> list[dict]:
    """Advertised capacity that differs from the kernel's (``kernels`` holds every misc resource's pool)."""
    findings = []
    capacity = kernel["capacity"]
    for pool in pools:
        advertised = pool["capacity"] if pool["capacity"] is not None else pool["allocatable"]
        if advertised is None or capacity is None:
            continue
        if resource == "sev":
            quirk = _nfd_sev_quirk(node, pool, kernels["sev"], kernels["sev_es"])
            if quirk:
                findings += quirk
                continue
        if advertised == capacity or (pool["kind"] == "nfd-static" and advertised < capacity):
            continue
        numbers = {
            "advertised": advertised,
            "kernel_capacity": capacity,
            "kernel_capacity_source": kernel["source"],
            "difference": advertised - capacity,
        }
        source = "misc.capacity" if kernel["source"] == "misc" else "the hardware (MSR 0x87; the kernel does not count)"
        if advertised > capacity:
            severity, effect = CRITICAL, "%d guests more than there are keys can be scheduled" % (advertised - capacity)
        elif advertised == 0:
            severity, effect = WARNING, "the advertiser latched 0: no guest can be scheduled on these keys"
        else:
            severity, effect = (
                WARNING,
                "%d keys are stranded (never offered to the scheduler)" % (capacity - advertised),
            )
        detail = "%s (%s) advertises %d %s keys, %s gives %d: %s." % (
            pool["name"],
            pool["advertiser"],
            advertised,
            resource,
            source,
            capacity,
            effect,
        )
        if pool["kind"] == "nfd-static":
            fix = "lower the static value of %s to at most %d (the BIOS key split changed?)" % (pool["name"], capacity)
        else:
            fix = _restart_hint(pool, node)
        findings.append(
            _finding(node, resource, "stale_advertiser", severity, "stale advertiser", numbers, detail, fix)
        )
    return findings


def snp_pool_exceeds_snp_range(node, host, pools) -> list[dict]:
    """With AMD ciphertext hiding, an SNP pool advertised from the joint ``sev_es`` count overstates SNP.

    Linux 6.18+ ``arch/x86/kvm/svm/sev.c``: ``kvm_amd.ciphertext_hiding_asids=N`` gives SNP guests ASIDs 1..N,
    while ``misc.capacity sev_es`` (what NFD's esids feature and KubeVirt's sev-esids plugin copy) still counts
    the joint range; the SNP launch past N fails with EBUSY while ``misc.current`` shows keys free.
    """
    split = (host or {}).get("sev_asids") or {}
    snp = (split.get("snp") or {}).get("capacity")
    if not split.get("ciphertext_hiding") or snp is None:
        return []
    findings = []
    for pool in pools:
        advertised = pool["capacity"] if pool["capacity"] is not None else pool["allocatable"]
        if advertised is None or advertised <= snp:
            continue
        numbers = {
            "advertised": advertised,
            "snp_asids": snp,
            "joint_sev_es_asids": (split.get("joint") or {}).get("capacity"),
            "difference": advertised - snp,
        }
        detail = (
            "%s (%s) advertises %d SNP keys, but ciphertext hiding (kvm_amd.ciphertext_hiding_asids=%d) gives SNP "
            "guests only ASIDs 1..%d: up to %d SNP guests can be scheduled that fail to launch with EBUSY while "
            "misc.current sev_es still shows keys free"
            % (pool["name"], pool["advertiser"], advertised, snp, snp, advertised - snp)
        )
        fix = (
            "advertise the SNP range, not the joint sev_es count: re-run confidential.tee.cluster (its NodeFeatureRule "
            'publishes %s: "%d" on this node), or raise kvm_amd.ciphertext_hiding_asids and reboot'
            % (pool["name"], snp)
        )
        title = "SNP pool larger than the SNP range"
        findings.append(_finding(node, "sev_es", "snp_pool_exceeds_snp_range", CRITICAL, title, numbers, detail, fix))
    return findings


def sev_es_uncounted(node, kernel, pools, sev_device_pods) -> list[dict]:
    """SEV-ES/SNP guests charge ``sev_es`` keys, and nothing the scheduler sees counts them."""
    if not kernel["in_use"] or _active(pools):
        return []
    cgroups = outside_kubepods(kernel)
    numbers = {
        "kernel_in_use": kernel["in_use"],
        "kernel_capacity": kernel["capacity"],
        "advertised_pools": [p["name"] for p in pools],
        "running_pods_with_kubevirt_sev_device": sev_device_pods,
        "charged_outside_kubepods": cgroups,
    }
    detail = (
        "the kernel has %d of %s sev_es ASIDs in use (SEV-ES and SEV-SNP guests), and no extended resource on this "
        "node counts them%s: the scheduler cannot know when they run out."
        % (
            kernel["in_use"],
            kernel["capacity"],
            "; %d running pods request %s, which is KubeVirt's /dev/sev device and counts no ASID"
            % (sev_device_pods, SEV_DEVICE)
            if sev_device_pods
            else "",
        )
    )
    fix = (
        "advertise the sev_es pool (a NodeFeatureRule with extendedResources %s: "
        "'%s') and make SEV-ES/SNP guests request it: Kata through the "
        "RuntimeClass overhead, KubeVirt VMs through a resource request"
        % (tee.NFD_SNP_ESIDS, tee.NFD_FEATURE_SEV_ESIDS)
    )
    return [_finding(node, "sev_es", "sev_es_uncounted", WARNING, "SEV-ES guests uncounted", numbers, detail, fix)]


# ---------------------------------------------------------------------------------------------------
# RuntimeClasses
# ---------------------------------------------------------------------------------------------------


def runtime_class_overheads(runtime_classes, problems) -> list[dict]:
    """RuntimeClasses whose ``overhead.podFixed`` requests extended resources, with their node selector."""
    found = []
    for runtime_class in items(runtime_classes):
        overhead = runtime_class.get("overhead") if isinstance(runtime_class.get("overhead"), dict) else {}
        where = object_ref(runtime_class, "RuntimeClass") + " overhead.podFixed"
        extended = resource_list(overhead.get("podFixed"), None, problems, where)
        if extended:
            scheduling = runtime_class.get("scheduling") if isinstance(runtime_class.get("scheduling"), dict) else {}
            found.append(
                {
                    "name": name_of(runtime_class),
                    "handler": runtime_class.get("handler"),
                    "requests": extended,
                    "node_selector": scheduling.get("nodeSelector") or {},
                }
            )
    return found


def _advertises(node, resource) -> int | None:
    """The node's allocatable count of ``resource`` (0 when absent, ``None`` when unreadable)."""
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    counts = resource_list(status.get("allocatable"), {resource}, [], "")
    return counts.get(resource, 0)


def _runtime_class_finding(node, severity, runtime_class, resource, numbers, detail) -> dict:
    fix = (
        "advertise %s on the nodes RuntimeClass %s selects (for TEE keys, a NodeFeatureRule extendedResources entry "
        "from the cpu.security feature), or remove it from the RuntimeClass's overhead.podFixed"
        % (resource, runtime_class["name"])
    )
    title = "RuntimeClass overhead on an unadvertised resource"
    return _finding(node, resource, "runtimeclass_unadvertised", severity, title, numbers, detail, fix)


def runtime_class_findings(overheads, nodes) -> tuple[list[dict], dict[str, list[dict]]]:
    """Fleet findings (no node it can land on advertises the resource) and per-node ones (a node it selects).

    ``nodes`` are Node objects; a RuntimeClass without ``scheduling.nodeSelector`` can land on every node.
    """
    fleet, per_node = [], {}
    for runtime_class in overheads:
        landing = [name_of(n) for n in nodes if selector_matches(runtime_class["node_selector"], labels_of(n))]
        by_name = {name_of(n): n for n in nodes}
        for resource, amount in runtime_class["requests"].items():
            # An unreadable count (a listed problem) is not taken for "advertises nothing".
            advertising = [name for name in landing if _advertises(by_name[name], resource) != 0]
            advertises = set(advertising)  # a set: a list here would make this quadratic in the fleet's size
            missing = [name for name in landing if name not in advertises]
            numbers = {
                "runtime_class": runtime_class["name"],
                "per_pod": amount,
                "nodes_it_can_land_on": landing,
                "nodes_advertising": advertising,
            }
            if not advertising:
                detail = (
                    "RuntimeClass %s adds %s: %s to every pod, and none of the %d nodes it can land on (%s) "
                    "advertises it: its pods stay Pending"
                    % (runtime_class["name"], resource, amount, len(landing), ", ".join(landing) or "none")
                )
                fleet.append(_runtime_class_finding(None, CRITICAL, runtime_class, resource, numbers, detail))
                for name in missing:
                    per_node.setdefault(name, []).append(dict(fleet[-1], node=name))
            elif runtime_class["node_selector"]:
                detail = "RuntimeClass %s selects this node but it does not advertise %s (per pod: %s)" % (
                    runtime_class["name"],
                    resource,
                    amount,
                )
                for name in missing:
                    finding = _runtime_class_finding(name, WARNING, runtime_class, resource, numbers, detail)
                    per_node.setdefault(name, []).append(finding)
    return fleet, per_node


# ---------------------------------------------------------------------------------------------------
# A node, and the fleet
# ---------------------------------------------------------------------------------------------------


def node_drift(node_name, host, node, bound, catalog) -> dict:
    """Pools and findings of one node. ``host`` is the ``tee_host_info`` result (``None``: unreachable),
    ``node`` its Node object (``None``: not in the Kubernetes objects), ``bound`` the pods bound to it and not
    terminated (``kube_objects.pods_by_node``)."""
    problems: list[str] = []
    kernels = {resource: kernel_pool(host, resource) for resource in MISC_RESOURCES}
    problems += ["%s %s" % (node_name, k["events_unknown"]) for k in kernels.values() if k["events_unknown"]]
    if node is None:
        pools = {resource: dict(kernels[resource], advertised=[]) for resource in MISC_RESOURCES}
        return {
            "node": node_name,
            "in_kubernetes": False,
            "reason": "no Node object named %s in the Kubernetes objects" % node_name,
            "pools": pools,
            "findings": [],
            "problems": problems,
        }
    advertised = advertised_pools(node, catalog, bound, problems)
    sev_device = sum(1 for pod in bound if is_running(pod) and pod_requests(pod, {SEV_DEVICE}, []).get(SEV_DEVICE))
    findings = []
    for resource in MISC_RESOURCES:
        kernel, pools = kernels[resource], advertised.get(resource, [])
        findings += double_pool(node_name, resource, kernel, pools)
        findings += stale_advertisers(node_name, resource, kernel, pools, kernels)
        if resource == "sev_es":
            findings += snp_pool_exceeds_snp_range(node_name, host, pools)
            findings += sev_es_uncounted(node_name, kernel, pools, sev_device)
        findings += external_usage(node_name, resource, kernel, pools)
    return {
        "node": node_name,
        "in_kubernetes": True,
        "reason": None,
        "bound_pods": len(bound),
        "running_pods": sum(1 for pod in bound if is_running(pod)),
        "pools": {resource: dict(kernels[resource], advertised=advertised.get(resource, [])) for resource in kernels},
        "findings": findings,
        "problems": problems,
    }


def renamed_advertisers(nfd) -> list[dict]:
    """Fleet findings for key advertisers whose names moved in 2026 (``tee.STALE_NFD_RULES``, the GPU Operator's
    ``feature.node.kubernetes.io/`` pool): each counts keys another advertiser already counts."""
    findings = []
    for resource, rules in sorted(nfd.items()):
        for rule in rules:
            if rule["misc"] is None:
                continue
            object_name = rule["rule"].split(" ", 1)[1].split("/", 1)[0]
            if object_name in tee.STALE_NFD_RULES:
                findings.append(
                    _finding(
                        None,
                        rule["misc"],
                        "stale_nfd_rule",
                        WARNING,
                        tee.STALE_NFD_RULES[object_name],
                        {"rule": rule["rule"], "extended_resource": resource, "value": rule["value"]},
                        "%s still advertises %s = %s next to the chart's %s: a second advertiser of the same keys"
                        % (rule["rule"], resource, rule["value"], tee.KATA_CHART_RULE),
                        "kubectl delete nodefeaturerule %s (confidential.tee.nfd_tee_rules deletes it when applying)"
                        % object_name,
                    )
                )
            elif resource.startswith(tee.GPU_OPERATOR_LEGACY_PREFIX):
                findings.append(
                    _finding(
                        None,
                        rule["misc"],
                        "gpu_operator_key_pool",
                        WARNING,
                        "third key pool from GPU Operator %s or older" % tee.GPU_OPERATOR_LEGACY_UNTIL,
                        {"rule": rule["rule"], "extended_resource": resource, "value": rule["value"]},
                        "%s advertises %s = %s: another count of the node's %s keys (GPU Operator up to %s added it)"
                        % (rule["rule"], resource, rule["value"], rule["misc"], tee.GPU_OPERATOR_LEGACY_UNTIL),
                        "upgrade the GPU Operator past %s, then remove that extendedResources entry (or the rule)"
                        % tee.GPU_OPERATOR_LEGACY_UNTIL,
                    )
                )
    return findings


def fleet_drift(hosts, kubernetes, resource_map=None) -> dict:
    """Drift of every host: ``hosts`` maps Kubernetes node names to ``tee_host_info`` results (or ``None``).

    ``kubernetes`` has ``nodes``, ``pods``, ``runtime_classes`` and ``node_feature_rules`` (lists or List
    documents). Returns ``{"nodes": {name: node_drift}, "findings": fleet findings, "problems": [...]}``.
    """
    problems: list[str] = []
    nodes = unique_objects(items(kubernetes.get("nodes")), "Node", problems)
    bound = pods_by_node(unique_objects(items(kubernetes.get("pods")), "Pod", problems, namespaced=True))
    nfd = nfd_advertisers(
        unique_objects(items(kubernetes.get("node_feature_rules")), "NodeFeatureRule", problems, namespaced=True),
        problems,
    )
    catalog = pool_catalog(nfd, resource_map)
    overheads = runtime_class_overheads(
        unique_objects(items(kubernetes.get("runtime_classes")), "RuntimeClass", problems), problems
    )
    fleet_findings, per_node = runtime_class_findings(overheads, nodes)
    fleet_findings += renamed_advertisers(nfd)
    by_name = {name_of(node): node for node in nodes}
    result = {}
    for name, host in hosts.items():
        result[name] = node_drift(name, host, by_name.get(name), bound.get(name, []), catalog)
        result[name]["findings"] += per_node.get(name, [])
    return {"nodes": result, "findings": fleet_findings, "problems": problems, "catalog": catalog}
