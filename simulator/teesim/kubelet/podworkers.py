"""How the kubelet retries a pod whose sandbox could not be created.

A Kata confidential pod's VM is started inside ``RunPodSandbox``; when KVM refuses the key (EBUSY),
``kuberuntime``'s ``SyncPod`` records ``FailedCreatePodSandBox`` and returns the error. The pod
worker then requeues the pod (``completeWork`` in ``pkg/kubelet/pod_workers.go``) after
``wait.Jitter(backOffPeriod, workerBackOffPeriodJitterFactor)``: ``backOffPeriod`` is 10 s
(``pkg/kubelet/kubelet.go``) and the jitter factor 0.5, i.e. uniformly 10 to 15 s, *every time*:
there is no doubling for sandbox creation. (The 10 s doubling to 300 s back-off,
``flowcontrol.NewBackOff(backOffPeriod, MaxContainerBackOff)``, is the per-container crash-loop
back-off applied to containers that exited, not to a sandbox that never started.) The queued pod is
picked up by the sync loop, which ticks once a second. Each retry is another ``RunPodSandbox``,
i.e. another launch that can fail.
"""

from __future__ import annotations

import math
import random

BACKOFF_PERIOD = 10.0
JITTER_FACTOR = 0.5
SYNC_LOOP_TICK = 1.0


def sandbox_retry_at(now: float, rng: random.Random) -> float:
    """When the kubelet next tries to create the sandbox of a pod whose creation failed at ``now``."""
    ready = now + BACKOFF_PERIOD + rng.random() * JITTER_FACTOR * BACKOFF_PERIOD
    return math.ceil(ready / SYNC_LOOP_TICK) * SYNC_LOOP_TICK
