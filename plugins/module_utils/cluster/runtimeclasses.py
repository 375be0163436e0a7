# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kata RuntimeClasses whose ``overhead.podFixed`` charges one TEE key from the node's single pool.

Names, handlers and CPU/memory overheads follow the kata-deploy chart 4.1.0 (``templates/runtimeclasses.yaml``:
``qemu-tdx``/``qemu-snp`` 2048Mi and 1 CPU, the ``qemu-nvidia-gpu-*`` shims 10240Mi and 1 CPU; node
selector ``katacontainers.io/kata-runtime: "true"`` plus the TEE's NFD label). The key resource is the
one :mod:`key_pools` chose for the TEE's Kata nodes. On OpenShift the sandboxed-containers operator
creates RuntimeClasses only when they are missing and never updates them (``createRuntimeClass``,
sandboxed-containers-operator @d0632e5), so ``kata-cc`` is rendered as a partial object for server-side
apply: the handler and the key entry of ``overhead.podFixed``, nothing the operator sets.

The RuntimeClass admission controller copies ``overhead`` into each pod when it is created: changing a
RuntimeClass moves new pods to the new pool, while running pods keep charging the old one.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import KeyPoolError
from ansible_collections.confidential.tee.plugins.module_utils.common import tee_registry

KATA_RUNTIME_LABEL = "katacontainers.io/kata-runtime"
# The NFD label of each TEE's nodes (the TEE registry's rule), keyed as the plan keys its Kata pools.
TEE_LABELS = {tech.short: tech.nfd["label"] for tech in tee_registry.REGISTRY}
DEFAULT_OVERHEAD = {"cpu": {"memory": "2048Mi", "cpu": "1"}, "gpu": {"memory": "10240Mi", "cpu": "1"}}
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?\Z")
MANAGED_BY = "confidential.tee"


def class_name(tee: str, gpu: bool) -> str:
    """Kata's RuntimeClass for a TEE of the registry (``short`` name), with or without the GPU."""
    return tee_registry.by_short(tee).runtime_classes[1 if gpu else 0]


def _quantity(value, where: str) -> str:
    text = str(value)
    if not QUANTITY.match(text):
        raise KeyPoolError(
            "%s %r is not a Kubernetes quantity such as 2048Mi or 1" % (where, value), option="overheads"
        )
    return text


def runtime_class(name: str, handler: str, overhead: dict, key_resource, node_selector: dict) -> dict:
    pod_fixed = {k: _quantity(v, "%s overhead %s" % (name, k)) for k, v in sorted((overhead or {}).items())}
    if key_resource:
        pod_fixed[key_resource] = "1"
    obj = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "handler": handler,
    }
    if pod_fixed:
        obj["overhead"] = {"podFixed": pod_fixed}
    if node_selector:
        obj["scheduling"] = {"nodeSelector": dict(sorted(node_selector.items()))}
    return obj


def kata_classes(plan: dict, gpu: bool = False, overheads=None, node_selector=None) -> list:
    """``kata-qemu-<tee>`` (and ``kata-qemu-nvidia-gpu-<tee>`` with ``gpu``) for each TEE with Kata nodes."""
    overheads = overheads or {}
    if not isinstance(overheads, dict) or not all(isinstance(v, dict) for v in overheads.values()):
        raise KeyPoolError(
            "overheads must map a RuntimeClass name to its overhead, such as {kata-qemu-tdx: {memory: 2048Mi, cpu: "
            "'1'}}, got %r" % (overheads,),
            option="overheads",
        )
    if node_selector is not None and (
        not isinstance(node_selector, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in node_selector.items())
    ):
        raise KeyPoolError(
            "node_selector must map label keys to string values, such as {katacontainers.io/kata-runtime: 'true'}, "
            "got %r" % (node_selector,),
            option="node_selector",
        )
    base_selector = {KATA_RUNTIME_LABEL: "true"} if node_selector is None else dict(node_selector)
    out = []
    for tee in sorted(plan["kata"]):
        resource = plan["kata"][tee]["resource"]
        for is_gpu in (False, True) if gpu else (False,):
            name = class_name(tee, is_gpu)
            overhead = overheads.get(name, DEFAULT_OVERHEAD["gpu" if is_gpu else "cpu"])
            selector = dict(base_selector, **{TEE_LABELS[tee]: "true"})
            out.append(runtime_class(name, name, overhead, resource, selector))
    return out


def openshift_kata_cc(plan: dict, name: str = "kata-cc") -> list:
    """The partial ``kata-cc`` RuntimeClass carrying the key charge (none without Kata nodes)."""
    if not plan["kata"]:
        return []
    if len(plan["kata"]) > 1:
        raise KeyPoolError(
            "kata-cc can charge one key resource; the plan has Kata on %s" % ", ".join(sorted(plan["kata"]))
        )
    (tee,) = plan["kata"]
    obj = runtime_class(name, name, {}, plan["kata"][tee]["resource"], {})
    return [obj]
