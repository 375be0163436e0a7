"""Every key-pool mode of the collection's policy has the teesim strategy that models it, and that strategy
says so and has the mode's shape: Kata's overhead and KubeVirt's VMIs request the names the mode's advertiser
counts keys under, a mode that refuses KubeVirt keeps VMIs on other nodes, and usage is counted alike."""

from __future__ import annotations

from teesim._collection import TDX, pool_policy
from teesim.strategies.base import STRATEGIES, Advertiser, Strategy

USAGE_AWARE = {Advertiser.RECONCILING, Advertiser.UNIFIED, Advertiser.DRA, Advertiser.KERNEL}


def _shape_problems(strategy: Strategy, mode) -> list[str]:
    advertiser = pool_policy.ADVERTISERS[mode.advertiser]
    pool = advertiser.key_resources[TDX]
    problems = []
    if pool_policy.KATA in mode.draws and strategy.kata_key_name(TDX) != pool:
        problems.append(f"Kata's overhead requests {strategy.kata_key_name(TDX)}, the mode's pool is {pool}")
    if pool_policy.KUBEVIRT in mode.draws and strategy.vmi_key_name(TDX) != pool:
        problems.append(f"VMIs request {strategy.vmi_key_name(TDX)}, the mode's pool is {pool}")
    if pool_policy.KUBEVIRT in mode.refuses and not strategy.split_nodes:
        problems.append("the mode keeps KubeVirt off its nodes, the strategy runs VMIs beside Kata")
    usage = strategy.advertiser in USAGE_AWARE
    if advertiser.counts_usage != usage:
        problems.append(f"the mode's advertiser counts usage: {advertiser.counts_usage}, the strategy's: {usage}")
    external = strategy.reserve_external or usage
    if (pool_policy.EXTERNAL in mode.draws) != external:
        drawn = pool_policy.EXTERNAL in mode.draws
        problems.append(f"the mode counts external VMs: {drawn}, the strategy: {external}")
    return problems


def test_every_policy_mode_has_a_strategy_that_models_it():
    missing = {m.name: m.strategy for m in pool_policy.MODES if m.strategy not in STRATEGIES}
    assert not missing, f"modes naming no teesim strategy: {missing}"
    unclaimed = {m.name: m.strategy for m in pool_policy.MODES if STRATEGIES[m.strategy].models != m.name}
    assert not unclaimed, f"strategies that do not declare the mode naming them (models=...): {unclaimed}"


def test_every_strategy_claiming_a_mode_is_that_modes_strategy_and_has_its_shape():
    problems = {}
    for strategy in STRATEGIES.values():
        if strategy.models is None:
            continue
        if strategy.models not in pool_policy.mode_names() or strategy.models == pool_policy.AUTO:
            problems[strategy.name] = [f"claims {strategy.models!r}, not a mode of the policy"]
            continue
        mode = pool_policy.mode(strategy.models)
        found = [] if mode.strategy == strategy.name else [f"mode {mode.name} names {mode.strategy}"]
        problems[strategy.name] = found + _shape_problems(strategy, mode)
    assert not {name: found for name, found in problems.items() if found}


def test_a_mismatched_claim_is_found():
    """The shape check can fail: nfd-shared (VMIs on NFD's pool next to Kata) is not the nfd mode."""
    assert _shape_problems(STRATEGIES["nfd-shared"], pool_policy.mode("nfd")) == [
        "the mode keeps KubeVirt off its nodes, the strategy runs VMIs beside Kata"
    ]
    assert _shape_problems(STRATEGIES["double-pool"], pool_policy.mode("kubevirt")) == [
        "Kata's overhead requests tdx.intel.com/keys, the mode's pool is devices.kubevirt.io/tdx"
    ]
