# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""OpenShift sandboxed containers objects: the ``osc-feature-gates`` ConfigMap and the KataConfig.

Upstream (openshift/sandboxed-containers-operator @d0632e5; the KataConfig CRD in ../shared/reference
comes from the same commit): the operator reads ConfigMap ``osc-feature-gates`` in its namespace
``openshift-sandboxed-containers-operator``; a gate is on only for the exact string ``"true"``
(``controllers/fg_handler.go``), and the gates it knows are ``confidential`` and
``layeredImageDeployment``. KataConfig (``kataconfiguration.openshift.io/v1``, cluster-scoped) requires
``spec.checkNodeEligibility`` and selects nodes through ``kataConfigPoolSelector``.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

OPERATOR_NAMESPACE = "openshift-sandboxed-containers-operator"
FEATURE_GATES_CONFIGMAP = "osc-feature-gates"
KNOWN_GATES = ("confidential", "layeredImageDeployment")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class OpenShiftConfigError(TeeError):
    """Input the operator would misread; the message says what and how to fix it."""


def feature_gates(gates, namespace: str = OPERATOR_NAMESPACE):
    """``(ConfigMap, warnings)``; booleans become the exact strings the operator compares with."""
    if not isinstance(gates, dict):
        raise OpenShiftConfigError(
            "feature gates must be a mapping such as {confidential: true}, got %r" % (gates,), option="feature_gates"
        )
    data, warnings = {}, []
    for name, value in sorted(gates.items()):
        if isinstance(value, bool):
            value = "true" if value else "false"
        if value not in ("true", "false"):
            raise OpenShiftConfigError(
                "feature gate %s: %r is neither true nor false; the operator treats anything but the exact string "
                '"true" as off' % (name, value),
                option="feature_gates",
            )
        if name not in KNOWN_GATES:
            warnings.append(
                "feature gate %s is not one this collection knows (%s); check the spelling against your "
                "operator version" % (name, ", ".join(KNOWN_GATES))
            )
        data[name] = value
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": FEATURE_GATES_CONFIGMAP, "namespace": namespace},
        "data": data,
    }
    return configmap, warnings


def kata_config(name: str, check_node_eligibility: bool, pool_selector=None, log_level=None) -> dict:
    if not isinstance(check_node_eligibility, bool):
        raise OpenShiftConfigError(
            "checkNodeEligibility must be true or false, got %r" % (check_node_eligibility,),
            option="check_node_eligibility",
        )
    spec: dict = {"checkNodeEligibility": check_node_eligibility}
    if pool_selector:
        if not isinstance(pool_selector, dict):
            raise OpenShiftConfigError(
                "the KataConfig pool selector must map node labels to values", option="pool_selector"
            )
        for key, value in pool_selector.items():
            if not LABEL_KEY.match(str(key)) or not isinstance(value, str):
                raise OpenShiftConfigError(
                    "node selector %r: %r is not a label key with a string value" % (key, value),
                    option="pool_selector",
                )
        spec["kataConfigPoolSelector"] = {"matchLabels": dict(sorted(pool_selector.items()))}
    if log_level:
        spec["logLevel"] = log_level
    return {
        "apiVersion": "kataconfiguration.openshift.io/v1",
        "kind": "KataConfig",
        "metadata": {"name": name},
        "spec": spec,
    }
