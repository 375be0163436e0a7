# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The HyperConverged (HCO) side of :mod:`kubevirt_cc`: HCO fields where they exist, the jsonpatch
annotation where they do not. See :mod:`kubevirt_cc` for the upstream facts."""

from __future__ import annotations

import json
import re

from ansible_collections.confidential.tee.plugins.module_utils.cluster.kubevirt_cc import (
    BETA_GATES,
    CC_PATH,
    DISABLED_PATH,
    FG_PATH,
    JSONPATCH_ANNOTATION,
    OWNED_GATES,
    KubeVirtConfigError,
    has_exclusion,
    merge_devices,
    merge_placement,
)

API_VERSIONS = ("v1beta1", "v1")
_DISABLED_INDEX = re.compile(r"^%s/(\d+)\Z" % re.escape(DISABLED_PATH))


def parse_jsonpatch(text) -> list:
    if text in (None, ""):
        return []
    try:
        ops = json.loads(text)
    except ValueError as exc:
        raise KubeVirtConfigError(
            "the HyperConverged annotation %s is not valid JSON (%s); HCO ignores it as it is. Fix or remove it "
            "by hand, then run again" % (JSONPATCH_ANNOTATION, exc)
        ) from exc
    if not isinstance(ops, list) or not all(isinstance(op, dict) and "op" in op and "path" in op for op in ops):
        raise KubeVirtConfigError(
            "the annotation %s must be a JSON array of RFC 6902 operations" % JSONPATCH_ANNOTATION
        )
    return ops


def _owned_indices(ops: list) -> set:
    """Positions of the operations this collection wrote (and may rewrite)."""
    owned = set()
    for i, op in enumerate(ops):
        path, value = op.get("path"), op.get("value")
        if (path == FG_PATH + "/-" and value in OWNED_GATES) or path == CC_PATH or str(path).startswith(CC_PATH + "/"):
            owned.add(i)
        elif _DISABLED_INDEX.match(str(path)) and op.get("op") == "test" and value in OWNED_GATES:
            owned.add(i)
            nxt = ops[i + 1] if i + 1 < len(ops) else {}
            if nxt.get("op") == "remove" and nxt.get("path") == path:
                owned.add(i + 1)
    return owned


def hco_generated_disabled(live_disabled, previous_ops: list):
    """HCO's own ``disabledFeatureGates`` before our patch, from the live KubeVirt CR.

    When the live list still holds a gate we remove, our previous patch was not applied (or never
    written) and the live list is HCO's own. Otherwise our earlier removals are undone, lowest index
    first, to get back HCO's list.
    """
    if live_disabled is None:
        return None
    live = list(live_disabled)
    removals = sorted(
        (int(_DISABLED_INDEX.match(op["path"]).group(1)), op["value"])
        for op in previous_ops
        if op.get("op") == "test" and _DISABLED_INDEX.match(str(op.get("path"))) and op.get("value") in OWNED_GATES
    )
    if any(removal[1] in live for removal in removals):
        return live
    for index, gate in removals:
        live.insert(min(index, len(live)), gate)
    return live


def jsonpatch_ops(want: dict, hco_disabled) -> list:
    """The RFC 6902 operations that set our gates and confidentialCompute on HCO's KubeVirt spec."""
    ops = [{"op": "add", "path": FG_PATH + "/-", "value": gate} for gate in want["feature_gates"]]
    if "confidential_compute" in want:
        ops.append({"op": "add", "path": CC_PATH, "value": want["confidential_compute"]})
    beta = [g for g in want["feature_gates"] if g in BETA_GATES]
    if not beta:
        return ops
    if hco_disabled is None:
        raise KubeVirtConfigError(
            "HCO lists every KubeVirt beta gate it does not enable in disabledFeatureGates, and virt-operator rejects "
            "a gate both enabled and disabled; to enable %s this role must know HCO's list. Run against the cluster "
            "(it reads the KubeVirt CR), or set kubevirt_cc_hco_disabled_feature_gates to the output of: kubectl get "
            "kubevirt -A -o jsonpath='{.items[0].spec.configuration.developerConfiguration.disabledFeatureGates}'"
            % ", ".join(beta)
        )
    # Highest index first, so the lower indices stay valid; each removal is guarded by a test.
    for index, gate in sorted(
        ((hco_disabled.index(g), g) for g in want["feature_gates"] if g in hco_disabled), reverse=True
    ):
        path = "%s/%d" % (DISABLED_PATH, index)
        ops += [{"op": "test", "path": path, "value": gate}, {"op": "remove", "path": path}]
    return ops


def merged_annotation(existing_text, ours: list) -> str:
    """The annotation value: the user's own operations, in order, then ours; canonical JSON."""
    existing = parse_jsonpatch(existing_text)
    owned = _owned_indices(existing)
    kept = [op for i, op in enumerate(existing) if i not in owned]
    return json.dumps(kept + ours, sort_keys=True, separators=(", ", ": "))


def _get(mapping: dict, *path):
    for key in path:
        mapping = (mapping or {}).get(key) or {}
    return mapping


def hco_spec(want: dict, base_spec, api_version: str) -> dict:
    """HCO spec fields (permitted host devices, workload placement) merged over ``base_spec``."""
    if api_version not in API_VERSIONS:
        raise KubeVirtConfigError("HyperConverged API version must be v1beta1 or v1, got %r" % (api_version,))
    base = base_spec or {}
    spec: dict = {}
    devices = [
        {("pciDeviceSelector" if k == "pciVendorSelector" else k): v for k, v in d.items()} for d in want["devices"]
    ]
    if api_version == "v1beta1":
        devices_at, placement_at = ("permittedHostDevices",), ("workloads", "nodePlacement")
    else:
        devices_at, placement_at = (
            ("virtualization", "permittedHostDevices"),
            ("deployment", "nodePlacements", "workload"),
        )
    if devices:
        merged = merge_devices(_get(base, *devices_at).get("pciHostDevices"), devices)
        _put(spec, (*devices_at, "pciHostDevices"), merged)
    placement = _get(base, *placement_at)
    if want["excluded_nodes"] or has_exclusion(placement):
        _put(spec, placement_at, merge_placement(placement, want["excluded_nodes"]))
    return spec


def _put(target: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def hco_object(name: str, namespace: str, api_version: str, spec: dict, annotation: str) -> dict:
    return {
        "apiVersion": "hco.kubevirt.io/%s" % api_version,
        "kind": "HyperConverged",
        "metadata": {"name": name, "namespace": namespace, "annotations": {JSONPATCH_ANNOTATION: annotation}},
        "spec": spec,
    }
