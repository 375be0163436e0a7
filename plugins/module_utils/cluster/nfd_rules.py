# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""NodeFeatureRules for TEE nodes, rendered from the key-pool plan (:mod:`key_pools`).

Upstream (node-feature-discovery @76e6cc8, openshift/cluster-nfd-operator @0e25cc1, kata-deploy chart
4.1.0, 2026-08): ``nfd.k8s-sigs.io/v1alpha1`` NodeFeatureRule is cluster-scoped; OpenShift's
``nfd.openshift.io/v1alpha1`` one is namespaced. A rule has ``labels``, ``extendedResources`` (values
``@<feature>.<element>`` copy a feature's value) and ``matchFeatures``. The ``cpu.security`` feature has
``tdx.enabled``/``tdx.total_keys`` and ``sev.snp.enabled``/``sev.encrypted_state_ids``; the
``system.name`` feature has ``nodename``, the Kubernetes node name, which is how the extended resource is
limited to the nodes whose pool it is.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import KeyPoolError

API_GROUPS = {"kubernetes": "nfd.k8s-sigs.io/v1alpha1", "openshift": "nfd.openshift.io/v1alpha1"}
MANAGED_BY = "confidential.tee"


def _match(feature_element: str) -> dict:
    return {"feature": "cpu.security", "matchExpressions": {feature_element: {"op": "Exists"}}}


def rules(plan: dict) -> list:
    """Per TEE present: a labels rule for every such node, and an extended-resource rule limited by node
    name to the nodes where NFD is the pool (none when KubeVirt is the pool everywhere)."""
    out = []
    for tee in sorted(plan["nfd"]):
        entry = plan["nfd"][tee]
        out.append(
            {"name": entry["rule"], "labels": {entry["label"]: "true"}, "matchFeatures": [_match(entry["match"])]}
        )
        static = entry.get("static_values") or {}
        dynamic = [name for name in entry["resource_nodes"] if name not in static]
        if dynamic:
            out.append(_keys_rule("%s.keys" % entry["rule"], entry, entry["value"], dynamic))
        # Ciphertext hiding: NFD's feature copies the joint sev_es count, so these nodes get their SNP range as
        # a static quantity, one rule per count (nfd-master pkg/nfd-master/nfd-master.go: only a value starting
        # with '@' is looked up as a feature, any other is published as written).
        for count in sorted(set(static.values())):
            names = [name for name, value in static.items() if value == count]
            out.append(_keys_rule("%s.keys.snp-asids-%d" % (entry["rule"], count), entry, str(count), names))
    return out


def _keys_rule(name: str, entry: dict, value: str, nodes: list) -> dict:
    return {
        "name": name,
        "extendedResources": {entry["resource"]: value},
        "matchFeatures": [
            _match(entry["match"]),
            {"feature": "system.name", "matchExpressions": {"nodename": {"op": "In", "value": sorted(nodes)}}},
        ],
    }


def node_feature_rule(plan: dict, name: str, flavor: str = "kubernetes", namespace=None) -> dict:
    """The NodeFeatureRule object; OpenShift's is namespaced (``namespace`` required there)."""
    if flavor not in API_GROUPS:
        raise KeyPoolError("cluster flavor must be kubernetes or openshift, got %r" % (flavor,), option="flavor")
    metadata = {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}}
    if flavor == "openshift":
        if not namespace:
            raise KeyPoolError(
                "OpenShift's nfd.openshift.io NodeFeatureRule is namespaced: set the NFD namespace", option="namespace"
            )
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_GROUPS[flavor],
        "kind": "NodeFeatureRule",
        "metadata": metadata,
        "spec": {"rules": rules(plan)},
    }
