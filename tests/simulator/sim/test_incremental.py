"""The incremental engine against the reference engine: the same report, event for event.

``Simulation(incremental=False)`` observes every node after every event, schedules every pending pod
against every node and lets plugins and NFD parse their files at every read, as the simulator did
before it learnt which nodes changed. Anything the change tracking misses shows up here as a
different report.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from teesim.cluster.pods import Consumer
from teesim.cluster.workload import Arrival, FaultSpec
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import CURRENT, OLD
from teesim.report.metrics import MetricsRecorder
from teesim.report.render import deterministic_json
from teesim.report.runner import run_scenario
from teesim.sim.scenario import bundled_scenarios, load_scenario
from teesim.sim.simulation import Settings, Simulation, World
from teesim.strategies import STRATEGIES

# Whole seconds as well as fractions, so that events collide at the same instant as timers do.
instant = st.one_of(st.integers(0, 300).map(float), st.floats(0, 300))
consumer = st.sampled_from(list(Consumer))
arrival = st.tuples(instant, consumer, st.floats(1, 200), st.sampled_from([0.0, 1.0, 2.5]), st.sampled_from("abc"))
fault_kind = st.sampled_from(["kubelet-restart", "plugin-crash", "sysfs-unreadable"])
fault = st.tuples(fault_kind, instant, st.sampled_from("ab"))


def _report(world: World, strategy: str, incremental: bool) -> dict:
    sim = Simulation(world, STRATEGIES[strategy], incremental=incremental)
    recorder = MetricsRecorder()
    sim.run(recorder)
    return {
        "metrics": recorder.summary(sim),
        "timeline": recorder.timeline_data(),
        "failures": recorder.failure_data(),
        "pods": [(p.uid, p.phase.value, p.node, p.bound_at, p.started_at, p.ended_at) for p in sim.pods],
    }


@settings(max_examples=12, deadline=None)
@given(
    arrivals=st.lists(arrival, max_size=40),
    faults=st.lists(fault, max_size=4),
    capacity=st.integers(1, 5),
    old=st.booleans(),
    poll=st.sampled_from([0.5, 1.0, 3.0]),
    plugin_restart=st.sampled_from([10.0, 400.0]),
)
def test_incremental_engine_gives_the_reference_report(arrivals, faults, capacity, old, poll, plugin_restart) -> None:
    profile = OLD if old else CURRENT
    world = World(
        nodes=tuple(NodeSpec(name, profile, "intel", {"tdx": capacity}) for name in "abc"),
        arrivals=tuple(
            Arrival(t, i, consumer, "tdx", life, delay, node if consumer is Consumer.EXTERNAL else None)
            for i, (t, consumer, life, delay, node) in enumerate(sorted(arrivals, key=lambda a: a[0]))
        ),
        faults=tuple(FaultSpec(kind, at, node, 40.0) for kind, at, node in faults),
        duration=700.0,  # past the kubelet's 5-minute grace period after a late fault
        # A plugin that stays away past the kubelet's grace period loses its resource with time alone.
        settings=Settings(
            poll_interval=poll,
            node_status_interval=5.0,
            nfd_sleep_interval=20.0,
            reserved={"tdx": 1},
            plugin_restart_delay=plugin_restart,
        ),
    )
    for strategy in STRATEGIES:
        assert _report(world, strategy, True) == _report(world, strategy, False), strategy


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(bundled_scenarios()))
def test_bundled_scenario_reports_are_identical(name: str) -> None:
    scenario = load_scenario(name)
    fast = run_scenario(scenario)
    reference = run_scenario(scenario, incremental=False)
    fast.pop("_runtime")
    reference.pop("_runtime")
    assert deterministic_json(fast) == deterministic_json(reference)
