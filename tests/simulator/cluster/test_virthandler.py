"""virt-handler's retry of a VMI whose domain does not start (kubevirt d923fdb, pkg/virt-handler/vm.go)."""

from __future__ import annotations

import pytest
from teesim.cluster.virthandler import BASE_DELAY, MAX_DELAY, Backoff, fails_for_good


def test_the_workqueue_back_off_is_client_gos_default_5ms_doubling_to_1000s() -> None:
    # vm.go NewController: workqueue.DefaultTypedControllerRateLimiter; client-go v0.34.2
    # default_rate_limiters.go: NewTypedItemExponentialFailureRateLimiter(5*time.Millisecond, 1000*time.Second).
    assert (BASE_DELAY, MAX_DELAY) == (0.005, 1000.0)
    backoff = Backoff()
    assert [backoff.delay(n) for n in (1, 2, 3, 4)] == [0.005, 0.01, 0.02, 0.04]
    assert backoff.delay(18) == pytest.approx(655.36)
    assert backoff.delay(19) == backoff.delay(10_000) == 1000.0
    assert Backoff(1.0, 30.0).delay(0) == 1.0


@pytest.mark.parametrize(
    ("message", "permanent"),
    [
        ("EBUSY: tdx: cannot charge 1 to /kubepods.slice/x: capacity reached at /", False),
        ("EINVAL: tdx has no capacity", False),
        ("mismatch of Secure Boot setting and bootloaders: EFI OVMF rom missing", True),
        ("VMI is irrecoverable due to failed post-copy migration", True),
    ],
)
def test_only_handle_sync_errors_failures_fail_the_vmi_for_good(message: str, permanent: bool) -> None:
    # vm.go handleSyncError: CriticalNetworkError, virtLauncherCriticalSecurebootError and
    # vmiIrrecoverableError set phase Failed; any other sync error is re-enqueued (Execute: AddRateLimited).
    assert fails_for_good(message) is permanent
