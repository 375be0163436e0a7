"""The unified reconciling device plugin: one kernel-reconciled pool for every consumer.

It advertises the resource name Kata's RuntimeClass overhead already asks for
(``tdx.intel.com/keys``, ``sev-snp.amd.com/esids``; the NFD rule that advertised it as a fixed
count is turned off), and KubeVirt maps its VMIs to the same name, so the scheduler counts Kata pods
(through ``spec.overhead``) and VMIs (through container requests) against one pool. Every poll:

* ``misc.current`` from the kernel: every key in use, whoever holds it;
* its own devices, allocated to VMIs: pod-resources ``List`` plus the ``Allocate`` calls since
  (as :mod:`teesim.plugins.reconciling`), counted as charged only while the pod holding one has
  started its guest (a VMI admitted but not started, or failed, holds a device and no key);
* the keys of pods that hold no device but whose ``spec.overhead`` names this resource and whose
  sandbox exists (condition ``PodReadyToStartContainers`` True; phase Running when the condition is
  absent): the pods bound to the node (the kubelet's ``/pods``; an informer on ``spec.nodeName`` in
  production). A Kata VM is created with its sandbox, so exactly those keys are charged; the
  scheduler already counts them, so they must not be hidden a second time. A pod still waiting for
  its sandbox (just bound, or retrying after EBUSY) charges nothing yet: counting it would hide too
  little for as long as it retries. Between a VM's creation and the condition reaching the plugin the
  key is hidden once: too careful for a moment, never too few;
* the rest is keys held outside Kubernetes: that many free devices are advertised Unhealthy, and at
  least ``--reserve`` of them when the operator keeps keys for VMs started outside Kubernetes.

    python -m teesim.plugins.unified --host-root DIR --resource-name tdx.intel.com/keys \\
        --misc-resource tdx --pods-url http://127.0.0.1:10255/pods --poll-interval 0.1
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from teesim._args import integer
from teesim.plugins.reconcile import sandbox_ready
from teesim.plugins.reconciling import Reconciler, add_reconciler_arguments, serve_reconciler

log = logging.getLogger(__name__)


def parse_count(quantity: Any) -> int | None:
    """An integer Kubernetes quantity (``"1"``, ``1``, ``"2000m"``); None when it is not a whole count."""
    text = str(quantity).strip()
    try:
        if text.endswith("m"):
            milli = int(text[:-1])
            return milli // 1000 if milli % 1000 == 0 else None
        return int(text)
    except ValueError:
        return None


def overhead_keys(pods: Iterable[Mapping[str, Any]], resource_name: str) -> int:
    """Keys of ``resource_name`` that pods with a sandbox take through ``spec.overhead``."""
    total = 0
    for pod in pods:
        if not sandbox_ready(pod):
            continue
        overhead = pod.get("spec", {}).get("overhead") or {}
        if resource_name in overhead:
            count = parse_count(overhead[resource_name])
            if count is None or count < 0:
                name = pod.get("metadata", {}).get("name", "?")
                log.warning("pod %s: overhead %s=%r is not a whole count; ignored", name, resource_name, overhead)
                continue
            total += count
    return total


class UnifiedReconciler(Reconciler):
    """A :class:`Reconciler` that also subtracts the keys RuntimeClass overhead already accounts for
    (its pod list is required: ``pods_url``)."""

    def __init__(self, *args: Any, pods_url: str, **kwargs: Any):
        super().__init__(*args, pods_url=pods_url, **kwargs)
        self._overhead = 0

    def _take_pods(self, pods: list[Mapping[str, Any]]) -> None:
        super()._take_pods(pods)
        self._overhead = overhead_keys(pods, self.service.resource_name)

    def accounted_elsewhere(self) -> int:
        return self._overhead


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m teesim.plugins.unified", description=__doc__.splitlines()[0])
    add_reconciler_arguments(parser)
    parser.add_argument(
        "--reserve", type=integer(0, 1 << 20), default=0, help="keys kept out of the pool for VMs outside Kubernetes"
    )
    args = parser.parse_args(argv)
    if not args.pods_url:
        parser.error("--pods-url is required: the keys of Kata pods come from the node's pod list")
    return serve_reconciler(args, UnifiedReconciler, reserve=args.reserve)


if __name__ == "__main__":
    sys.exit(main())
