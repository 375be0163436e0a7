# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The object the kubevirt_cc role writes or applies: a KubeVirt CR fragment, or the HyperConverged CR
when HCO manages KubeVirt. Joins :mod:`key_pools` (gates, placement), :mod:`kubevirt_cc` (attestation,
merges) and :mod:`hyperconverged` (fields and jsonpatch)."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.cluster import hyperconverged as hco
from ansible_collections.confidential.tee.plugins.module_utils.cluster import kubevirt_cc as kv

MANAGERS = ("kubevirt", "hco")


def qgs_facts(nodes) -> dict:
    """``{node name: tee_host_info host.qgs fact or None}`` from the node list the roles share."""
    return {n.get("name"): n.get("qgs") for n in nodes or [] if isinstance(n, dict)}


def render(plan: dict, nodes, options: dict) -> dict:
    manager = options.get("manager", "kubevirt")
    if manager not in MANAGERS:
        raise kv.KubeVirtConfigError("manager must be kubevirt or hco, got %r" % (manager,))
    attestation = kv.tdx_attestation(
        plan["kubevirt"]["tdx_nodes"],
        qgs_facts(nodes),
        options.get("attestation_mode", "auto"),
        options.get("qgs_socket_path") or kv.DEFAULT_QGS_SOCKET,
    )
    version_warnings = kv.tdx_version(plan["kubevirt"]["tdx_nodes"], options.get("kubevirt_version"))
    want = kv.desired(plan, attestation, kv.gpu_devices(options.get("gpu_devices")), options.get("vsock", True))
    warnings = list(plan.get("warnings", [])) + attestation["warnings"] + version_warnings
    if manager == "kubevirt":
        spec, more = kv.kubevirt_spec(want, options.get("base_spec"))
        obj = kv.kubevirt_object(options["name"], options["namespace"], spec)
    else:
        previous = hco.parse_jsonpatch(options.get("existing_annotation"))
        disabled = options.get("hco_disabled_feature_gates")
        if disabled is None:
            disabled = hco.hco_generated_disabled(options.get("live_kubevirt_disabled"), previous)
        ops = hco.jsonpatch_ops(want, disabled)
        annotation = hco.merged_annotation(options.get("existing_annotation"), ops)
        api_version = options.get("hco_api_version", "v1beta1")
        spec = hco.hco_spec(want, options.get("base_spec"), api_version)
        obj = hco.hco_object(options["name"], options["namespace"], api_version, spec, annotation)
        more = []
    return {
        "objects": [obj],
        "manager": manager,
        "feature_gates": want["feature_gates"],
        "excluded_nodes": want["excluded_nodes"],
        "confidential_compute": want.get("confidential_compute"),
        "attestation": attestation,
        "disabled_feature_gates": want["disabled_gates"] if manager == "kubevirt" else [],
        "kubevirt_version": options.get("kubevirt_version"),
        "warnings": warnings + more,
    }
