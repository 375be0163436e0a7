# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError
from ansible_collections.confidential.tee.plugins.module_utils.attestation.attestation_k8s import render
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import resolve_transport
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import keyvalue
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.input_names import variable_for

# The role whose variables these filters render (roles/tdx_attestation): a refusal names the variable.
ROLE = "tdx_attestation"


def _named(exc: TeeError, default_option: str | None = None) -> str:
    """``exc``'s message after the role variable its option came from (``input_names``, the one table of argument to
    variable); a key of a dict argument (``settings.pccs_url``) is left to the message, which names it."""
    option = exc.option or default_option
    variable = variable_for(ROLE, option, lambda _name: True) if option and "." not in option else None
    return f"inventory variable {variable} (argument {option}): {exc}" if variable else str(exc)


def attestation_manifests(request):
    """The attestation chain's Kubernetes objects, in apply order (for confidential.tee.cluster_objects)."""
    if not isinstance(request, dict):
        raise AnsibleFilterError("confidential.tee.attestation_manifests expects a dict of the role's settings")
    try:
        return render(request)
    except (TeeError, KeyError) as exc:
        named = _named(exc) if isinstance(exc, TeeError) else str(exc)
        raise AnsibleFilterError(f"cannot render the attestation manifests: {named}") from None


def subject_alt_name(name):
    """``IP:<address>`` for an IP address, ``DNS:<name>`` for anything else (a certificate SAN entry)."""
    if not isinstance(name, str) or not name:
        raise AnsibleFilterError(f"confidential.tee.subject_alt_name expects a host name or address, got {name!r}")
    try:
        return f"IP:{ipaddress.ip_address(name)}"
    except ValueError:
        return f"DNS:{name}"


def pck_network_setting(pccs_url, use_secure_cert, user_token):
    """PCKIDRetrievalTool's ``network_setting.conf``, through the one emitter for its line rule."""
    try:
        return keyvalue.pck_network_setting(pccs_url, bool(use_secure_cert), user_token)
    except TeeError as exc:
        raise AnsibleFilterError(f"cannot write network_setting.conf: {exc}") from None


def qgs_transport(transport, consumers, kata_version=None):
    """The QGS transport the consumers need: ``auto`` resolved, an explicit one checked (qgs_config's rule)."""
    if not isinstance(consumers, list) or not all(isinstance(item, str) for item in consumers):
        raise AnsibleFilterError(f"confidential.tee.qgs_transport expects the consumers as a list, got {consumers!r}")
    try:
        return resolve_transport(transport, consumers, kata_version or None)[0]
    except TeeError as exc:
        raise AnsibleFilterError(_named(exc, "transport")) from None


class FilterModule:
    def filters(self):
        return {
            "attestation_manifests": attestation_manifests,
            "pck_network_setting": pck_network_setting,
            "qgs_transport": qgs_transport,
            "subject_alt_name": subject_alt_name,
        }
