# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The capacity report as plain data: what ``tee_capacity_info`` returns and ``tee_host_info`` embeds."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader, Problem
from ansible_collections.confidential.tee.plugins.module_utils.common.results import PROBLEMS
from ansible_collections.confidential.tee.plugins.module_utils.host.misc_cgroup import (
    KNOWN_RESOURCES,
    RESOURCE_ALIASES,
    MiscLayout,
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
    host: HostReader,
    resources: list[str] | tuple[str, ...] = KNOWN_RESOURCES,
    cgroups: bool = False,
    cgroup_depth: int = 3,
) -> dict:
    """Capacity, usage and controller facts of the host, as plain data (never raises on bad files)."""
    state = read_misc_state(host, include_cgroups=cgroups, cgroup_depth=cgroup_depth)
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
        # Where the files were read, so that tee_capacity_check given this result reads the same host.
        "host_root": host.host_root,
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
        "notes": list(state.notes),
    }
    # The one name of a problem list; "issues" is the same list, deprecated (returned until release 0.3.0).
    result[PROBLEMS] = result["issues"] = [issue.as_dict() for issue in state.issues]
    if cgroups:
        result["cgroups"] = [cgroup.as_dict() for cgroup in state.cgroups]
    return result


def state_from_facts(facts: dict) -> MiscState:
    """The :class:`MiscState` a ``tee_capacity_info`` result describes, so a check can use a registered result.

    Raises ``ValueError`` naming what is missing when ``facts`` is not such a result. A resource the result did
    not read (its ``resources`` option) is unknown here, never 0.
    """
    if not isinstance(facts, dict) or not isinstance(facts.get("misc_controller"), dict):
        raise ValueError("is not a registered tee_capacity_info result (it has no misc_controller)")
    controller = facts["misc_controller"]
    layout = MiscLayout(
        str(facts.get("host_root") or "/"),
        controller.get("cgroup_version"),
        controller.get("path") if controller.get("present") else None,
        reason=controller.get("reason"),
        not_root=bool(controller.get("not_root_cgroup")),
    )
    resources = {}
    for name, entry in (facts.get("resources") or {}).items():
        if not isinstance(entry, dict):
            raise ValueError(f"has no mapping for the resource {name!r}")
        resources[name] = ResourceState(
            name,
            entry.get("capacity"),
            entry.get("current"),
            str(entry.get("current_source") or "unknown"),
            peak=entry.get("peak"),
            known=bool(entry.get("known", True)),
        )
    issues = [
        Problem(str(issue.get("path", "")), str(issue.get("problem", "")), issue.get("line_number"), issue.get("line"))
        for issue in facts.get(PROBLEMS, facts.get("issues")) or []
        if isinstance(issue, dict)
    ]
    # Only the resources the result carries are known; a missing one was not read, so it stays unknown.
    return MiscState(layout=layout, resources=resources, issues=issues, capacity_complete=False)
