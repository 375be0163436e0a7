"""teesim: a TEE node without TEE hardware.

Models the pieces that decide whether a confidential guest can start on a Kubernetes node: the
kernel's misc cgroup (TDX KeyIDs, SEV/SEV-ES ASIDs), the kubelet's device manager, NFD, the scheduler,
and the Kata / KubeVirt / libvirt consumers that share the keys. Layers import strictly downward:
``_collection`` → ``kernel`` → ``kubelet`` → ``plugins`` → ``cluster`` → ``strategies`` → ``report``
→ ``cli``.
"""

from __future__ import annotations

__version__ = "0.1.0"
