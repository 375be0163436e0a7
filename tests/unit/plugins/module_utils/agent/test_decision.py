"""The kernel pool's decision: the numbers, the doubts, and the invariant (property tests)."""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.agent import decision as d
from hypothesis import given
from hypothesis import strategies as st

KEYS = "tdx.intel.com/keys"


def pod(name="p", node="n1", overhead=None, requests=None, phase="Running", sandbox="True", ready=None, labels=None):
    spec = {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": requests or {}}}]}
    if overhead:
        spec["overhead"] = overhead
    conditions = [{"type": d.SANDBOX_CONDITION, "status": sandbox}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def test_external_keys_leave_the_pool():
    decided = d.decide("tdx", capacity=63, current=10, k8s_running=7)
    assert (decided.external, decided.pool, decided.reason) == (3, 60, d.REASON_OK)
    assert decided.resource == KEYS
    assert "tdx.intel.com/keys = 60" in decided.explain()


def test_reserve_is_kept_out_and_never_negative():
    assert d.decide("tdx", 10, 0, 0, reserve=4).pool == 6
    assert d.decide("tdx", 10, 8, 0, reserve=4).pool == 0
    assert d.decide("tdx", 10, 0, 0, reserve=-3).pool == 10


def test_pods_that_claim_more_than_the_kernel_counts_hide_nothing_extra():
    # Kubernetes guests the kernel has already released (pod status lags): no negative external.
    decided = d.decide("sev_es", 99, 2, 5)
    assert (decided.external, decided.pool, decided.resource) == (0, 99, "sev-snp.amd.com/esids")


def test_unknown_capacity_or_usage_gives_an_empty_pool_with_a_reason():
    no_capacity = d.decide("tdx", None, 3, 3, previous=20)
    assert (no_capacity.pool, no_capacity.reason) == (0, d.REASON_CAPACITY_UNKNOWN)
    no_current = d.decide("tdx", 63, None, 3, previous=20)
    assert (no_current.pool, no_current.reason) == (0, d.REASON_CURRENT_UNKNOWN)
    assert "shrunk on doubt" in no_current.explain()


def test_without_the_pod_list_every_used_key_is_external():
    decided = d.decide("tdx", 63, 10, None)
    assert (decided.pool, decided.external, decided.reason) == (53, 10, d.REASON_PODS_UNKNOWN)


def test_doubt_never_grows_the_pool_beyond_the_last_value():
    assert d.decide("tdx", 63, 1, None, previous=40).pool == 40
    assert d.decide("tdx", 63, 1, 1, previous=40).pool == 63  # no doubt: follows the kernel again


def test_usage_above_capacity_is_a_doubt():
    decided = d.decide("tdx", 4, 6, 0, previous=4)
    assert (decided.pool, decided.reason) == (0, d.REASON_OVER_CAPACITY)


def test_kata_pods_count_when_their_sandbox_exists():
    pods = [
        pod("ready", overhead={KEYS: "1"}),
        pod("starting", overhead={KEYS: "1"}, sandbox="False"),
        pod("done", overhead={KEYS: "1"}, phase="Succeeded"),
        pod("elsewhere", node="n2", overhead={KEYS: "1"}),
        pod("no-key"),
        pod("limit-only", requests={}, overhead=None),
    ]
    pods[-1]["spec"]["containers"][0]["resources"]["limits"] = {KEYS: "1"}
    assert d.k8s_running(pods, "n1", KEYS) == 2


def test_launcher_pods_count_only_when_ready():
    launcher = {"kubevirt.io": "virt-launcher"}
    pods = [
        pod("booting", requests={KEYS: "1"}, labels=launcher, ready="False"),
        pod("running", requests={KEYS: "1"}, labels=launcher, ready="True"),
    ]
    assert d.k8s_running(pods, "n1", KEYS) == 1


def test_terminating_pods_and_old_kubelets():
    terminating = pod(overhead={KEYS: "1"})
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    old = pod(overhead={KEYS: "1"})
    old["status"]["conditions"] = []  # a kubelet before PodReadyToStartContainers: phase Running stands for it
    assert d.k8s_running([terminating, old, "not a pod"], "n1", KEYS) == 1


@st.composite
def node_states(draw):
    """A node as the kernel and the scheduler see it, and what the agent reads of it."""
    capacity = draw(st.integers(0, 40))
    external = draw(st.integers(0, 40))  # keys held outside Kubernetes
    charged = draw(st.integers(0, 20))  # bound pods whose guest the kernel charges
    released = draw(st.integers(0, charged))  # ... of which the kernel already freed the key (status lags)
    uncharged = draw(st.integers(0, 20))  # bound pods whose guest has not started yet
    # The agent may miss charged pods (sees them late: the safe way) but never counts a pod the scheduler does not.
    seen = draw(st.integers(0, charged))
    pods_known = draw(st.booleans())
    reserve = draw(st.integers(0, 5))
    previous = draw(st.none() | st.integers(0, 60))
    current = external + charged - released
    return capacity, current, charged + uncharged, uncharged, (seen if pods_known else None), reserve, previous


@given(node_states())
def test_the_scheduler_never_sees_more_free_keys_than_the_kernel_has_for_kubernetes(state):
    capacity, current, bound, uncharged, seen, reserve, previous = state
    decided = d.decide("tdx", capacity, current, seen, reserve=reserve, previous=previous)
    scheduler_free = max(0, decided.pool - bound)
    kernel_free = max(0, capacity - current - uncharged)
    assert scheduler_free <= kernel_free
    assert decided.pool <= max(0, capacity - reserve)


@given(node_states())
def test_doubt_only_shrinks(state):
    capacity, current, _bound, _uncharged, seen, reserve, previous = state
    trusted = d.decide("tdx", capacity, current, seen or 0, reserve=reserve)
    without_pods = d.decide("tdx", capacity, current, None, reserve=reserve, previous=previous)
    assert without_pods.pool <= trusted.pool
    if previous is not None:
        assert without_pods.pool <= previous
    unreadable = d.decide("tdx", None, current, seen, reserve=reserve, previous=previous)
    assert unreadable.pool == 0


def test_ciphertext_hiding_limits_the_pool_to_the_snp_range():
    decided = d.decide("sev_es", 99, 10, 4, limit=16)
    assert (decided.pool, decided.limit) == (10, 16)  # 16 SNP ASIDs - 6 held outside Kubernetes
    assert "SNP range 16" in decided.explain() and decided.as_dict()["snp_range"] == 16
    assert d.decide("sev_es", 99, 10, 4).pool == 93


@given(node_states(), st.integers(0, 40))
def test_the_snp_range_invariant(state, snp_range):
    """Under ciphertext hiding every used key may be an SNP one: the scheduler's free SNP keys never exceed the
    range's free ASIDs in that worst case."""
    capacity, current, bound, uncharged, seen, reserve, previous = state
    decided = d.decide("sev_es", capacity, current, seen, reserve=reserve, previous=previous, limit=snp_range)
    assert max(0, decided.pool - bound) <= max(0, min(capacity, snp_range) - current - uncharged)
