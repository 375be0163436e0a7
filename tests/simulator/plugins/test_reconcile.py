"""The reconciling plugin's pure decision."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from teesim.plugins.reconcile import (
    capacity_from_misc,
    device_ids,
    next_unhealthy,
    own_charged,
    reconcile,
    sandbox_ready,
    started_pods,
    unhealthy_devices,
)

IDS = device_ids("tdx", 8)


def test_device_ids_are_padded_and_sorted():
    assert IDS[:2] == ("tdx-000", "tdx-001")
    assert len(device_ids("tdx", 63)) == 63
    assert device_ids("tdx", 0) == ()
    assert device_ids("sev_es", 1500)[-1] == "sev_es-1499"


def test_capacity_from_misc():
    assert capacity_from_misc({"tdx": 63}, "tdx") == 63
    assert capacity_from_misc({"sev": 5}, "tdx") == 0, "the kernel omits zero-capacity resources"
    assert capacity_from_misc({"tdx": None}, "tdx") is None


def test_external_keys_take_free_devices_from_the_end():
    own = {"tdx-000", "tdx-001"}
    assert unhealthy_devices(IDS, own, 2) == frozenset()
    assert unhealthy_devices(IDS, own, 5) == {"tdx-005", "tdx-006", "tdx-007"}


def test_never_marks_an_allocated_device_and_clamps():
    own = {"tdx-005", "tdx-006", "tdx-007"}
    decision = reconcile(IDS, own, 20)
    assert decision.unhealthy == {"tdx-000", "tdx-001", "tdx-002", "tdx-003", "tdx-004"}
    assert decision.others == 17
    assert decision.overflow == 12


def test_current_below_own_marks_nothing():
    # Own VMs admitted but not yet charged by the kernel (the race window).
    assert reconcile(IDS, {"tdx-000", "tdx-001"}, 0).others == 0


def test_unknown_own_ids_are_ignored():
    assert unhealthy_devices(IDS, {"gpu-0"}, 1) == {"tdx-007"}


def test_unreadable_current_keeps_previous_minus_allocated():
    assert next_unhealthy(IDS, {"tdx-007"}, None, {"tdx-006", "tdx-007", "x"}) == {"tdx-006"}
    # A device already Unhealthy stays so when the count allows: the published set moves little.
    assert next_unhealthy(IDS, set(), 1, {"tdx-000"}) == {"tdx-000"}
    assert next_unhealthy(IDS, set(), 2, {"tdx-000"}) == {"tdx-000", "tdx-007"}
    assert next_unhealthy(IDS, {"tdx-000"}, 2, {"tdx-000"}) == {"tdx-007"}


def test_overhead_pods_are_not_hidden_twice_and_the_reserve_is_kept():
    # 2 VMIs hold devices, 3 Kata pods hold keys through overhead, 1 VM outside Kubernetes.
    own = {"tdx-000", "tdx-001"}
    decision = reconcile(IDS, own, 6, accounted_elsewhere=3)
    assert decision.others == 1 and decision.unhealthy == {"tdx-007"}
    # The operator keeps 2 keys for external VMs: 2 hidden while only 1 is used outside ...
    assert reconcile(IDS, own, 6, accounted_elsewhere=3, reserve=2).unhealthy == {"tdx-006", "tdx-007"}
    # ... and every foreign key once they use more than the reserve.
    assert len(reconcile(IDS, own, 8, accounted_elsewhere=3, reserve=2).unhealthy) == 3


def _pod(name: str, phase: str, ready: str | None = None) -> dict:
    status: dict = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "PodReadyToStartContainers", "status": ready}]
    return {"metadata": {"namespace": "default", "name": name}, "status": status}


def test_started_pods_are_those_whose_sandbox_exists():
    pods = [
        _pod("running", "Running"),
        _pod("sandbox", "Pending", "True"),
        _pod("admitted", "Pending", "False"),
        _pod("old-kubelet-pending", "Pending"),
        _pod("done", "Succeeded", "True"),
        _pod("failed", "Failed"),
        {"status": {"phase": "Running"}},  # no metadata: nobody to match, ignored
        {"metadata": "x", "status": "y"},  # malformed: ignored, no traceback
    ]
    assert started_pods(pods) == {"default/running", "default/sandbox"}
    assert not sandbox_ready({"status": None})


def test_a_vmi_admitted_but_not_started_holds_a_device_and_no_key_no_phantom_slot():
    """Issue 19 in the gRPC plugins: a VMI admitted (its device allocated) whose domain has not started
    charges no key. Assuming every own device charged (the old default) cancels one foreign key out
    and hides nothing: a phantom slot the scheduler fills, and the guest placed there fails."""
    holders = {"tdx-000": "default/virt-launcher-a", "tdx-001": "default/virt-launcher-b"}
    own = {"tdx-000", "tdx-001", "tdx-002"}  # tdx-002: an Allocate since the last List, holder unknown
    started = {"default/virt-launcher-a"}
    assert own_charged(holders, own, started) == 1
    # Kernel: a's key and one VM outside Kubernetes.
    assert reconcile(IDS, own, 2).unhealthy == frozenset(), "the old rule: the phantom slot"
    charged = own_charged(holders, own, started)
    assert reconcile(IDS, own, 2, own_charged=charged).unhealthy == {"tdx-007"}
    # A failed VMI's pod is terminal: its device (still in a stale List) counts as not charged either.
    assert own_charged(holders, own, started_pods([_pod("virt-launcher-a", "Failed")])) == 0
    assert own_charged(holders, {"tdx-005"}, started) == 0, "a device no List showed yet: not charged"


@given(
    capacity=st.integers(0, 40),
    own_mask=st.lists(st.booleans(), max_size=40),
    current=st.integers(0, 80),
)
def test_properties(capacity, own_mask, current):
    ids = device_ids("tdx", capacity)
    own = {i for i, taken in zip(ids, own_mask, strict=False) if taken}
    result = unhealthy_devices(ids, own, current)
    assert not (result & own)
    assert result <= set(ids)
    assert len(result) == min(max(current - len(own), 0), capacity - len(own))
    assert result == unhealthy_devices(list(reversed(ids)), own, current), "order of input does not matter"
