"""gpu_unprobed: the unprobed ``gpu`` fact is the probed one's shape, every value unknown."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.host import gpu_facts, gpu_unprobed


def test_the_probe_fills_in_the_same_fact() -> None:
    assert gpu_facts.empty_gpu is gpu_unprobed.empty_gpu
    probed, _ = gpu_facts.summarize_gpu("/usr/bin/nvidia-smi", {})
    assert set(probed) == set(gpu_unprobed.empty_gpu())


def test_unknown_is_none_with_the_reason() -> None:
    fact = gpu_unprobed.empty_gpu("not gathered: gather_gpu is false")
    assert fact["probed"] is False and fact["present"] is None and fact["cc_enabled"] is None
    assert fact["reasons"] == ["not gathered: gather_gpu is false"]
    assert gpu_unprobed.empty_gpu()["reasons"] == []
    # A fresh dict each time: a caller filling one in never changes the next.
    assert gpu_unprobed.empty_gpu()["gpus"] is not gpu_unprobed.empty_gpu()["gpus"]
