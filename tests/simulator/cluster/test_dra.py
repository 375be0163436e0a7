"""A DRA ResourceSlice with the scheduler's allocations from it."""

from __future__ import annotations

import pytest
from teesim.cluster.dra import DRAPool


def test_free_devices_are_in_the_slice_and_in_no_claim() -> None:
    pool = DRAPool("tee-keys.teesim.dev", "tdx.intel.com/keys")
    assert pool.publish(["k0", "k1", "k2"])
    assert not pool.publish(["k0", "k1", "k2"]), "same slice, no new generation"
    assert pool.generation == 1
    assert pool.allocate("pod-a", 2) == ["k0", "k1"]
    assert pool.free() == 1 and pool.claimed() == {"k0", "k1"}
    # The driver shrinks the slice (a VM outside Kubernetes took a key) but keeps claimed devices.
    pool.publish(["k0", "k1"])
    assert pool.free() == 0
    with pytest.raises(ValueError, match="1 devices requested, 0 free"):
        pool.allocate("pod-b", 1)
    assert pool.release("pod-a") == ["k0", "k1"]
    assert pool.free() == 2
