"""The kubelet's resource predicate at pod admission (lifecycle/predicate.go)."""

from __future__ import annotations

from teesim.kubelet.admission import admission_need, check_fit, sanitize_allocatable

KV = "devices.kubevirt.io/tdx"
KEYS = "tdx.intel.com/keys"


def test_overhead_is_never_filtered_but_missing_container_requests_are():
    # A DRA-backed (cluster-level) name in a container request is dropped; the same in overhead stays.
    need = admission_need({KEYS: 1, "cpu": 1}, {KV: 1}, allocatable={KV: 4})
    assert need == {"cpu": 1, KV: 1}
    assert admission_need({KV: 1}, {KV: 1}, allocatable={KV: 4}) == {KV: 2}


def test_rejection_wording():
    rejection = check_fit({KV: 1}, {KV: 4}, {KV: 4})
    assert rejection is not None
    assert rejection.reason == f"OutOf{KV}"
    assert rejection.message == f"Node didn't have enough resource: {KV}, requested: 1, used: 4, capacity: 4"
    assert check_fit({KV: 1}, {KV: 5}, {KV: 4}) is None
    missing = check_fit({KV: 1}, {}, {})
    assert missing is not None and "capacity: 0" in missing.message


def test_sanitize_raises_allocatable_to_what_pods_hold_only_for_device_holders():
    assert sanitize_allocatable({KV: 0}, {KV: 3}, pod_holds_devices=True) == {KV: 3}
    assert sanitize_allocatable({KV: 0}, {KV: 3}, pod_holds_devices=False) == {KV: 0}
    assert sanitize_allocatable({KV: 5}, {KV: 3}, pod_holds_devices=True) == {KV: 5}
