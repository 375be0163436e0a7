"""How virt-handler retries a VMI whose domain does not start.

Checked against kubevirt/kubevirt at d923fdb (v1.9.0-beta.0-1264, 2026-08-22), ``pkg/virt-handler/vm.go``:

* every VMI key goes through one workqueue built with ``workqueue.DefaultTypedControllerRateLimiter``
  (``NewController``); when ``execute`` returns an error (the launcher's ``SyncVirtualMachine``
  failed: QEMU could not create the guest, KVM said EBUSY) ``Execute`` calls ``AddRateLimited``, and
  ``Forget`` only after a sync that succeeds;
* that limiter (client-go v0.34.2, ``util/workqueue/default_rate_limiters.go``) is the larger of a
  per-item exponential back-off, 5 ms doubling per failure up to 1000 s, and a 10 QPS / burst 100
  bucket shared by every key (only felt beyond 100 failing VMIs a node, not modelled);
* ``handleSyncError`` fails the VMI for good (``vmi.Status.Phase = Failed``) only for a
  ``CriticalNetworkError``, a ``virtLauncherCriticalSecurebootError`` (``EFI OVMF rom missing``) or a
  ``vmiIrrecoverableError`` (a failed post-copy migration); every other error only sets the
  ``Synchronized`` condition to False ("Synchronizing with the Domain failed.") and is retried.

So a VMI refused a TEE key is retried, ever more slowly, until a key is free: it never fails on
EBUSY. (The VM controller re-creating a failed VMI is another matter, not modelled.)
"""

from __future__ import annotations

from dataclasses import dataclass

# client-go's ItemExponentialFailureRateLimiter in DefaultTypedControllerRateLimiter.
BASE_DELAY = 0.005
MAX_DELAY = 1000.0

# The sync errors handleSyncError turns into phase Failed, by the text or type it checks.
PERMANENT_ERRORS = ("critical network error", "EFI OVMF rom missing", "VMI is irrecoverable")


@dataclass(frozen=True)
class Backoff:
    """Per-item exponential back-off (``ItemExponentialFailureRateLimiter.When``)."""

    base: float = BASE_DELAY
    cap: float = MAX_DELAY

    def delay(self, failures: int) -> float:
        """The wait before the retry that follows the ``failures``-th failure (1 = the first):
        ``base * 2**(failures - 1)``, at most ``cap``."""
        exponent = max(failures - 1, 0)
        if exponent > 64:  # 2**64 * base is past any cap; avoid an enormous float
            return self.cap
        return min(self.base * 2.0**exponent, self.cap)


def fails_for_good(message: str) -> bool:
    """Whether virt-handler marks the VMI Failed for this sync error instead of retrying it.
    A key refused by the kernel (EBUSY, or EINVAL with no capacity) is never one of them."""
    return any(marker in message for marker in PERMANENT_ERRORS)
