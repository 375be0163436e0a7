"""teesim: a TEE node without TEE hardware.

Models the pieces that decide whether a confidential guest can start on a Kubernetes node: the
kernel's misc cgroup (TDX KeyIDs, SEV/SEV-ES ASIDs), the kubelet's device manager, NFD, the scheduler,
and the Kata / KubeVirt / libvirt consumers that share the keys. Layers (rooms) import strictly downward:
``engine`` (the clock) → ``_collection`` → ``kernel`` → ``fixtures`` → ``kubelet`` → ``cluster`` →
``plugins`` → ``strategies`` → ``sim`` → ``report`` → ``cli`` (``tests/simulator/test_layers.py``).
"""

from __future__ import annotations

__version__ = "0.1.0"

from teesim import _native

# The compiled hot modules when `make native` built them from these very sources; else the source.
_native.select()
