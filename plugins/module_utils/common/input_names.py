# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Where a refused input came from, in the user's words: the inventory variable and the node.

A filter renders a role's variables into objects; when a module_utils function refuses a value, the filter knows
only its own argument (``qgs_socket_path``). The roles name their variables ``<role>_<argument>``
(``kubevirt_cc_qgs_socket_path``), with the few exceptions in :data:`ALIASES`, so the variable is found from the
role being run and checked against the variables really defined; the node is the inventory host the task runs
for, and its Kubernetes node name where ``tee_k8s_node_name`` sets another one.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable

# (role, argument) -> the role's variable, where it is not <role>_<argument>.
ALIASES = {
    ("kubevirt_cc", "attestation_mode"): "kubevirt_cc_tdx_attestation",
    ("kubevirt_cc", "kubevirt_version"): "kubevirt_cc_version",
}


def variable_for(role: str | None, option: str | None, defined: Callable[[str], bool]) -> str | None:
    """The inventory variable the refused argument ``option`` of a filter came from in ``role``, if one is defined."""
    if not role or not option:
        return None
    short = role.rsplit(".", 1)[-1]
    candidates = [ALIASES.get((short, option)), f"{short}_{option}", f"{short}_machineconfig_{option}"]
    return next((name for name in candidates if name and defined(name)), None)


def where(host, node_name=None) -> str:
    """``host tdx-1`` or ``host tdx-1 (Kubernetes node gpu-7)``; empty when the host is unknown."""
    if not isinstance(host, str) or not host:
        return ""
    if isinstance(node_name, str) and node_name and node_name != host:
        return f"host {host} (Kubernetes node {node_name})"
    return f"host {host}"


def refusal(filter_name: str, message: str, option, role, host, node_name, defined: Callable[[str], bool]) -> str:
    """The message of a filter's refusal: the filter, the node, the variable (or the filter's argument), the why."""
    variable = variable_for(role, option, defined)
    parts = [f"confidential.tee.{filter_name}"]
    place = where(host, node_name)
    if place:
        parts.append(f"on {place}")
    head = " ".join(parts)
    if variable:
        return f"{head}: inventory variable {variable}: {message}"
    if option:
        return f"{head}: argument {option}: {message}"
    return f"{head}: {message}"
