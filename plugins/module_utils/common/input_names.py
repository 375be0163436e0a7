# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Where a refused input came from, in the user's words: the inventory variable and the node.

A filter renders a role's variables into objects, a module takes them as options; when a module_utils function
refuses a value, the filter knows only its own argument (``qgs_socket_path``) and the module only its option
(``vsock_port``, or ``settings.pccs_url`` for a key of a dict option). The roles name their variables
``<role>_<argument>`` (``kubevirt_cc_qgs_socket_path``), with the exceptions in :data:`ALIASES`, so the variable is
found from the role being run and checked against the variables really defined; the node is the inventory host the
task runs for, and its Kubernetes node name where ``tee_k8s_node_name`` sets another one. Filters name it through
``plugin_utils.filter_refusal``, modules through ``plugin_utils.module_refusal`` (their action plugins): this table
is the one place an argument or option is tied to the variable a role fills it from.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

# (role, argument or option) -> the role's variable, where it is not <role>_<argument>. A dotted option is a key of
# a dict option (settings.pccs_url); ``component:`` in front names the option of one dcap_config component, whose
# settings the role fills from different variables per component (roles/tdx_attestation/tasks/*.yml).
ALIASES = {
    ("kubevirt_cc", "attestation_mode"): "kubevirt_cc_tdx_attestation",
    ("kubevirt_cc", "kubevirt_version"): "kubevirt_cc_version",
    ("tdx_attestation", "transport"): "tdx_attestation_qgs_transport",
    ("tdx_attestation", "vsock_port"): "tdx_attestation_qgs_vsock_port",
    ("tdx_attestation", "number_threads"): "tdx_attestation_qgs_threads",
    ("tdx_attestation", "socket_group"): "tdx_attestation_qgs_socket_group",
    ("tdx_attestation", "extra_clients"): "tdx_attestation_qgs_extra_clients",
    ("tdx_attestation", "qcnl:settings.pccs_url"): "tdx_attestation_pccs_url",
    ("tdx_attestation", "qcnl:settings.use_secure_cert"): "tdx_attestation_qcnl_use_secure_cert",
    ("tdx_attestation", "qcnl:settings"): "tdx_attestation_qcnl_settings",
    ("tdx_attestation", "pccs:settings.HTTPS_PORT"): "tdx_attestation_pccs_port",
    ("tdx_attestation", "pccs:settings.hosts"): "tdx_attestation_pccs_listen",
    ("tdx_attestation", "pccs:settings.CachingFillMode"): "tdx_attestation_pccs_caching_mode",
    ("tdx_attestation", "pccs:settings"): "tdx_attestation_pccs_settings",
    ("tdx_attestation", "pccs:secrets.api_key"): "tdx_attestation_pccs_api_key",
    ("tdx_attestation", "pccs:secrets.user_token"): "tdx_attestation_pccs_user_token",
    ("tdx_attestation", "pccs:secrets.admin_token"): "tdx_attestation_pccs_admin_token",
    ("tdx_attestation", "pccs:secrets.db_password"): "tdx_attestation_pccs_db_password",
    ("tdx_attestation", "mpa:settings"): "tdx_attestation_mpa_settings",
    ("tdx_attestation", "mpa:secrets.subscription_key"): "tdx_attestation_mpa_subscription_key",
}


# The one host root of every role and playbook (issue 44): the option host_root of every module comes from it. The
# roles' own names for it are still read, deprecated, for one release (0.2.0) and are gone in HOST_ROOT_REMOVED_IN.
HOST_ROOT = "tee_host_root"
DEPRECATED_HOST_ROOTS = (
    "tdx_host_host_root",
    "snp_host_host_root",
    "iommu_passthrough_host_root",
    "vsock_host_root",
    "tdx_attestation_host_root",
    "gpu_cc_node_host_root",
    "tee_key_agent_host_root",
)
HOST_ROOT_REMOVED_IN = "0.3.0"
# Options every role fills from one collection-level variable, whatever the role.
COLLECTION_VARIABLES = {"host_root": HOST_ROOT}


def one_host_root(root, deprecated: dict) -> tuple[str, list[str]]:
    """The host root, and the deprecated variables it was (also) given by.

    ``root`` is ``tee_host_root`` (``None``: not set); ``deprecated`` maps the roles' own names (from
    :data:`DEPRECATED_HOST_ROOTS`) to their values (``None``: not set). Every value given must name the same root:
    two roots for one host would have one play edit two trees. Without any, the host's own ``/``.
    """
    unknown = sorted(name for name in deprecated if name not in DEPRECATED_HOST_ROOTS)
    if unknown:
        raise TeeError(f"{', '.join(unknown)} is no name of the host root: give {', '.join(DEPRECATED_HOST_ROOTS)}")
    given = [(HOST_ROOT, root)] if root is not None else []
    given += [(name, value) for name, value in sorted(deprecated.items()) if value is not None]
    for name, value in given:
        if not isinstance(value, str) or not value:
            raise TeeError(f"{name} must be a non-empty path, got {value!r}")
    roots = list(dict.fromkeys(value for _name, value in given))
    if len(roots) > 1:
        shown = "; ".join(f"{name}: {value}" for name, value in given)
        raise TeeError(
            f"the host root is given twice, differently ({shown}): set {HOST_ROOT} alone, the one root of every role "
            f"and playbook (the roles' own *_host_root variables are deprecated and removed in {HOST_ROOT_REMOVED_IN})"
        )
    return (roots[0] if roots else "/"), [name for name, _value in given if name != HOST_ROOT]


def _keys(option: str, component: str | None) -> list[str]:
    """The table keys for ``option``, most particular first: ``qcnl:settings.pccs_url``, ``qcnl:settings``,
    ``settings.pccs_url``, ``settings``."""
    paths = [option]
    while "." in paths[-1]:
        paths.append(paths[-1].rsplit(".", 1)[0])
    scoped = [f"{component}:{path}" for path in paths] if component else []
    return scoped + paths


def variable_for(
    role: str | None, option: str | None, defined: Callable[[str], bool], component: str | None = None
) -> str | None:
    """The inventory variable the refused argument (or module option) ``option`` came from in ``role``, if one is
    defined; ``component`` tells apart the options of one module that serve several components (dcap_config)."""
    if not role or not option:
        return None
    short = role.rsplit(".", 1)[-1]
    candidates = [COLLECTION_VARIABLES.get(option)]
    candidates += [ALIASES.get((short, key)) for key in _keys(option, component)]
    if "." not in option:
        candidates += [f"{short}_{option}", f"{short}_machineconfig_{option}"]
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
    head = _head(filter_name, host, node_name)
    if variable:
        return f"{head}: inventory variable {variable}: {message}"
    if option:
        return f"{head}: argument {option}: {message}"
    return f"{head}: {message}"


def module_refusal(
    module_name: str, message: str, option, role, host, node_name, defined: Callable[[str], bool], component=None
) -> str:
    """The message of a module's refusal: the module, the node, the variable the role filled the option from (and the
    option, which the message may speak of), the why. Without a role (the module called directly) the option."""
    variable = variable_for(role, option, defined, component)
    head = _head(module_name, host, node_name)
    if variable:
        return f"{head}: inventory variable {variable} (option {option}): {message}"
    if option:
        return f"{head}: option {option}: {message}"
    return f"{head}: {message}"


def _head(plugin_name: str, host, node_name) -> str:
    place = where(host, node_name)
    return f"confidential.tee.{plugin_name}" + (f" on {place}" if place else "")
