# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The ``gpu`` fact before (or without) ``nvidia-smi``: its shape, every value unknown.

Its own small module so that a host gathered without the GPU probe (``gather_gpu: false``, or a ``host_root``
that is not ``/``, as in the fleet report) never imports the probe: AnsiballZ and mitogen compile every imported
module from source on each host, and ``gpu_facts`` with ``common/process`` is about 500 lines of it.
``gpu_facts.summarize_gpu`` fills in this same dict when nvidia-smi did run.
"""

from __future__ import annotations


def empty_gpu(reason=None):
    """The ``gpu`` fact when nvidia-smi was not run."""
    return {
        "probed": False,
        "nvidia_smi": None,
        "present": None,
        "driver_version": None,
        "cuda_version": None,
        "cc_capable": None,
        "cc_state": None,
        "cc_enabled": None,
        "devtools": None,
        "cc_features": {},
        "cpu_cc_capabilities": None,
        "multi_gpu_mode": None,
        "ready_state": None,
        "ready": False,
        "gpus": [],
        "reasons": [reason] if reason else [],
    }
