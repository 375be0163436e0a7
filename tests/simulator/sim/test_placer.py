"""A placer outside the model (``Simulation(placer=...)``, what the kube-scheduler mode plugs in) drives the same
run as the model when it answers as the model does, and its answer decides the run when it does not."""

from __future__ import annotations

import pytest
from teesim.cluster.scheduler import choose_node
from teesim.report.metrics import MetricsRecorder
from teesim.report.render import deterministic_json
from teesim.sim.scenario import load_scenario
from teesim.sim.simulation import Simulation
from teesim.strategies import STRATEGIES


def _report(scenario: str, strategy: str, seed: int, placer=None) -> tuple[Simulation, dict]:
    sim = Simulation(load_scenario(scenario, seed=seed).world, STRATEGIES[strategy], placer=placer)
    recorder = MetricsRecorder()
    sim.run(recorder)
    report = {
        "metrics": recorder.summary(sim),
        "timeline": recorder.timeline_data(),
        "failures": recorder.failure_data(),
    }
    return sim, report


@pytest.mark.parametrize("strategy", ["double-pool", "unified-reconciling", "kata-overhead-on-kubevirt"])
@pytest.mark.parametrize("scenario", ["serve-double-pool-tdx", "quick"])
def test_a_placer_that_answers_as_the_model_gives_the_models_report(scenario, strategy):
    asked = []

    def placer(pod, need, views):
        asked.append(pod.uid)
        return choose_node(need, views)

    _, placed = _report(scenario, strategy, 4, placer)
    _, model = _report(scenario, strategy, 4)
    assert asked
    assert deterministic_json(placed) == deterministic_json(model)


def test_the_placers_answer_decides():
    asked: list[tuple[str, float]] = []
    holder: list[Simulation] = []

    def refuse_vmis(pod, need, views):
        asked.append((pod.uid, holder[0].clock.now))
        return None if pod.consumer.value == "kubevirt" else choose_node(need, views)

    world = load_scenario("serve-double-pool-tdx", seed=4).world
    sim = Simulation(world, STRATEGIES["double-pool"], placer=refuse_vmis)
    holder.append(sim)
    recorder = MetricsRecorder()
    sim.run(recorder)
    metrics = recorder.summary(sim)
    assert metrics["launched"].get("kubevirt", 0) == 0
    assert metrics["launched"]["kata"] > 0
    vmis = {uid for uid, _ in asked if uid.startswith("kubevirt")}
    assert metrics["pending_at_end"] == len(vmis)
    # A refused pod is asked again when a node's view changed (Kata pods bound and released here).
    assert len([uid for uid, _ in asked if uid.startswith("kubevirt")]) > len(vmis)
