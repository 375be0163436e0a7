# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The capacity report as plain data: what ``tee_capacity_info`` returns and ``tee_host_info`` embeds."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.host.misc_cgroup import (
    KNOWN_RESOURCES,
    RESOURCE_ALIASES,
    MiscState,
    ResourceState,
    canonical_resource,
    read_misc_state,
)

CONSUMERS = {
    "tdx": ["TDX guests (TDs)"],
    "sev": ["SEV guests"],
    "sev_es": ["SEV-ES guests", "SEV-SNP guests"],
}


def unknown_reasons(state: MiscState, entry: ResourceState) -> list[str]:
    """Why a value of ``entry`` is ``None``: the problems of the files it comes from (empty when known)."""
    reasons = []
    for value, files in ((entry.capacity, ("misc.capacity",)), (entry.current, ("misc.current",))):
        if value is not None:
            continue
        found = [issue.describe() for issue in state.issues if issue.path.rsplit("/", 1)[-1] in files]
        reasons += found or [f"{files[0]} gives no usable value for {entry.name}"]
    return list(dict.fromkeys(reasons))


def capacity_facts(
    host_root: str,
    resources: list[str] | tuple[str, ...] = KNOWN_RESOURCES,
    cgroups: bool = False,
    cgroup_depth: int = 3,
) -> dict:
    """Capacity, usage and controller facts for ``host_root``, as plain data (never raises on bad files)."""
    state = read_misc_state(host_root, include_cgroups=cgroups, cgroup_depth=cgroup_depth)
    layout = state.layout
    wanted = list(dict.fromkeys(canonical_resource(name) for name in resources))
    reported = {}
    if layout.present:
        for name in wanted:
            entry = state.entry(name)
            reported[name] = dict(
                entry.as_dict(), consumers=CONSUMERS.get(name, []), unknown=unknown_reasons(state, entry)
            )
    result = {
        "misc_controller": {
            "present": layout.present,
            "cgroup_version": layout.cgroup_version,
            "path": layout.directory,
            "reason": layout.reason,
            # A container's own cgroup was read: the controller exists, misc.capacity is only at the host's root.
            "not_root_cgroup": layout.not_root,
        },
        "resources": reported,
        "unknown_resources": {name: state.resources[name].as_dict() for name in state.unknown_resources},
        "resource_aliases": dict(RESOURCE_ALIASES),
        "issues": [issue.as_dict() for issue in state.issues],
        "notes": list(state.notes),
    }
    if cgroups:
        result["cgroups"] = [cgroup.as_dict() for cgroup in state.cgroups]
    return result
