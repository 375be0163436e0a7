"""The pod-resources API's rate limit (``pkg/kubelet/apis/podresources/grpc/ratelimit.go``).

The kubelet serves pod-resources through one gRPC server with a unary interceptor around a
``golang.org/x/time/rate`` limiter of ``DefaultQPS`` = 100 tokens per second and
``DefaultBurstTokens`` = 10 (``pkg/kubelet/server/server.go``, ``ListenAndServePodResources``).
Every client on the node shares that one bucket; a call that finds it empty is refused with
``ResourceExhausted: rejected by rate limit`` (it is not queued).

:class:`TokenBucket` is that limiter on any clock (the gRPC kubelet uses ``time.monotonic``, the
in-process model its virtual clock). ``background_qps`` models the other clients of the node (a
monitoring exporter, a NUMA-aware scheduler plugin): their steady calls take tokens away from the
refill rate, so they need no events of their own.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

DEFAULT_QPS = 100.0
DEFAULT_BURST = 10
RATE_LIMIT_MESSAGE = "rejected by rate limit"


# Subclassed outside the native build (the tests' refusing bucket): teesim._native.
@mypyc_attr(allow_interpreted_subclasses=True)
class TokenBucket:
    """``rate.Limiter.Allow``: refill at ``qps`` up to ``burst`` tokens; the bucket starts full."""

    def __init__(self, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST, background_qps: float = 0.0):
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be > 0 and burst >= 1, got qps={qps}, burst={burst}")
        if not background_qps >= 0:
            raise ValueError(f"background_qps must be >= 0, got {background_qps}")
        self.qps = qps
        self.burst = burst
        self.background_qps = background_qps
        self._tokens = float(burst)
        self._last: float | None = None
        self.allowed = 0
        self.rejected = 0

    def _refill(self, now: float) -> None:
        if self._last is not None and now > self._last:
            rate = max(self.qps - self.background_qps, 0.0)
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * rate)
        if self._last is None or now > self._last:
            self._last = now

    def allow(self, now: float) -> bool:
        """Take one token at ``now`` if there is one."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.allowed += 1
            return True
        self.rejected += 1
        return False
