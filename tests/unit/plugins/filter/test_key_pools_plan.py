"""The key_pools_plan filter and the render filters: a refused plan is an AnsibleFilterError carrying the plan's own
message, the one the tee_key_pools module fails with (issue 43)."""

from __future__ import annotations

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.cluster.key_pools import KeyPoolError, plan

DOUBLE_POOL = [{"name": "tdx-1", "vendor": "intel", "consumers": ["kata", "kubevirt"], "mode": "nfd"}]
ONE_POOL = [{"name": "tdx-1", "vendor": "intel", "consumers": ["kata", "kubevirt"], "mode": "auto"}]


def _module_message(nodes) -> str:
    with pytest.raises(KeyPoolError) as refused:
        plan(nodes)
    return str(refused.value)


def test_a_refused_plan_raises_the_plans_own_message(call_filter):
    expected = _module_message(DOUBLE_POOL)
    assert expected.startswith("node tdx-1: two pools for the same TDX keys")
    assert call_filter("cluster", "key_pools_plan", DOUBLE_POOL) == {"filter_error": expected}


def test_an_accepted_plan_is_the_modules_plan(call_filter):
    found = call_filter("cluster", "key_pools_plan", ONE_POOL)["value"]
    assert "refused" not in found
    assert found == plan(ONE_POOL)
    assert (
        "nodes"
        not in call_filter("cluster", "key_pools_plan", ONE_POOL, "confidential-tee-keys", False, False)["value"]
    )


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("nfd_tee_rule", []),
        ("kata_runtimeclasses", []),
        ("kata_runtimeclasses", [False, None, None, "openshift"]),
        ("kubevirt_cc", [[], {"name": "kubevirt", "namespace": "kubevirt"}]),
    ],
    ids=["nfd", "kata", "kata-openshift", "kubevirt"],
)
def test_render_filters_refuse_a_refused_plan_with_its_message(call_filter, name, args):
    # The cluster_inventory filter returns a refused plan as data; a role handed it renders nothing.
    message = "node tdx-1: two pools for the same TDX keys (the plan's message)"
    assert call_filter("cluster", name, {"refused": message}, *args) == {"filter_error": message}
