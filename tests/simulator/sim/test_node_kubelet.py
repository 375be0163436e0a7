"""One node's kubelet alone, through the narrow interface the simulation gives it (a fake here): admission,
launch, the Kata pod worker's sandbox retries, virt-handler's back-off, stop, restart and re-admission."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

import pytest
from teesim.cluster import virthandler
from teesim.cluster.node import SimNode
from teesim.cluster.pods import Consumer, Guest, Phase, Pod, kata_pod, vmi_pod
from teesim.cluster.workload import Arrival
from teesim.engine.clock import VirtualClock
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import CURRENT
from teesim.kubelet.podworkers import BACKOFF_PERIOD, JITTER_FACTOR, SYNC_LOOP_TICK
from teesim.sim.node_kubelet import NodeKubelet
from teesim.sim.simulation import Failure, Settings, Simulation, World
from teesim.strategies import get_strategy


class FakeEnv:
    """The simulation as a node's kubelet sees it: a clock, settings, one retry stream, two sinks."""

    def __init__(self, **settings: float) -> None:
        self.clock = VirtualClock()
        self.settings = Settings(**settings)
        self.retry_rng = random.Random(7)
        self.launched: dict[str, int] = defaultdict(int)
        self.completed: dict[str, int] = defaultdict(int)
        self.failures: list[tuple[float, str, str, int]] = []
        self.changes: list[tuple[float, str, bool]] = []

    def record_failure(self, node, consumer, resource, uid, kind, exc, since, until, attempt=1, in_race=None):
        self.failures.append((self.clock.now, uid, kind, attempt))
        # A real Failure: the native build checks the type NodeKubelet is promised.
        return Failure(self.clock.now, node.name, consumer.value, resource, uid, kind, str(exc), bool(in_race), attempt)

    def kernel_changed(self, node, resource, consumer, charged=True) -> None:
        self.changes.append((self.clock.now, consumer.value, charged))


def _kubelet(keys: int = 1, **settings: float) -> tuple[FakeEnv, NodeKubelet]:
    env = FakeEnv(**settings)
    node = SimNode(NodeSpec("n1", CURRENT, "intel", {"tdx": keys}))
    backoff = virthandler.Backoff(env.settings.virt_handler_backoff_base, env.settings.virt_handler_backoff_max)
    return env, NodeKubelet(env, node, [], backoff)


def _bind(env: FakeEnv, kubelet: NodeKubelet, pod: Pod) -> None:
    """What the scheduler's binding does before it hands the pod to the node's kubelet."""
    pod.phase, pod.node, pod.bound_at = Phase.BOUND, kubelet.node.name, env.clock.now
    kubelet.node.bound.bind(pod, pod.need())
    kubelet.bound(pod)


def _kata(uid: str, duration: float = 100.0) -> Pod:
    return kata_pod(uid, Guest.TDX, 0.0, 5.0, duration, overhead={})


def test_a_kata_sandbox_is_retried_by_the_pod_worker_until_a_key_is_free() -> None:
    env, kubelet = _kubelet(keys=1)
    first, second = _kata("kata-1"), _kata("kata-2")
    env.clock.at(0.0, lambda: _bind(env, kubelet, first))
    env.clock.at(0.0, lambda: _bind(env, kubelet, second))
    env.clock.run(400.0)
    assert (first.started_at, first.ended_at, first.phase) == (5.0, 105.0, Phase.SUCCEEDED)
    failed = [f for f in env.failures if f[1] == "kata-2"]
    assert failed[0] == (5.0, "kata-2", "launch", 1)
    assert [f[3] for f in failed] == list(range(1, len(failed) + 1))
    for (before, *_), (after, *_) in itertools.pairwise(failed):
        # wait.Jitter(10 s, 0.5) rounded up to the next 1 s sync tick, every time: no doubling.
        assert BACKOFF_PERIOD <= after - before <= BACKOFF_PERIOD * (1 + JITTER_FACTOR) + SYNC_LOOP_TICK
    assert failed[-1][0] < 105.0 <= second.started_at <= 105.0 + BACKOFF_PERIOD * (1 + JITTER_FACTOR) + 1
    assert second.attempts == len(failed) + 1
    assert env.launched == {"kata": 2} and env.completed == {"kata": 2}
    assert next(c for c in env.changes if not c[2]) == (105.0, "kata", False)


def test_a_vmi_launch_is_requeued_with_virt_handlers_doubling_back_off() -> None:
    env, kubelet = _kubelet(keys=1)
    env.clock.at(0.0, lambda: _bind(env, kubelet, _kata("kata-1", duration=1.0)))
    vmi = vmi_pod("vmi-1", Guest.TDX, {}, 0.0, 5.0, 50.0)
    env.clock.at(0.0, lambda: _bind(env, kubelet, vmi))
    env.clock.run(100.0)
    times = [f[0] for f in env.failures if f[1] == "vmi-1"]
    assert times[0] == 5.0 and len(times) > 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == pytest.approx([kubelet.vmi_backoff.delay(n) for n in range(1, len(times))])
    assert vmi.phase is Phase.SUCCEEDED and env.launched == {"kata": 1, "kubevirt": 1}


def test_pods_bound_while_the_kubelet_is_down_wait_for_it() -> None:
    env, kubelet = _kubelet(keys=2, kubelet_restart_downtime=10.0)
    pod = _kata("kata-1")
    env.clock.at(1.0, kubelet.restart)
    env.clock.at(2.0, lambda: _bind(env, kubelet, pod))
    seen: list[tuple[bool, list[Pod]]] = []
    env.clock.at(3.0, lambda: seen.append((kubelet.node.kubelet_up, list(kubelet.waiting))))
    env.clock.run(50.0)
    assert seen == [(False, [pod])] and kubelet.waiting == []
    assert kubelet.node.kubelet_up and pod.started_at == 11.0 + 5.0
    assert env.failures == []


def test_the_simulation_gives_every_node_one_kubelet_and_keeps_no_pod_life_cycle() -> None:
    world = World(nodes=(NodeSpec("a", CURRENT, "intel", {"tdx": 4}), NodeSpec("b")), arrivals=(), duration=5.0)
    sim = Simulation(world, get_strategy("reconciling"))
    sim.run()
    assert sorted(sim.kubelets) == ["a", "b"]
    assert all(k.node is sim.nodes[n] and k.plugins is sim.plugins[n] for n, k in sim.kubelets.items())
    life_cycle = ("admit", "allocate_devices", "admitted", "predicate", "launch", "stop", "release", "fail", "readmit")
    assert not [m for m in life_cycle if hasattr(sim, m) or hasattr(sim, f"_{m}")]
    assert Consumer.KATA.value not in sim.launched


def test_kubernetes_1_37_counts_a_posted_pods_overhead_twice_when_asked() -> None:
    """``Settings.overhead_counted_twice`` (kubernetes/kubernetes#139627, measured on the real kubelet v1.37.2 in
    tests/node/test_real_node.py): once a Kata pod's status reaches the scheduler, its overhead counts twice, so a
    second Kata pod does not fit 2 keys; off (the default, the rule of 1.35 and of the proposed fix) both run."""

    def run(twice: bool) -> Simulation:
        arrivals = tuple(Arrival(t, seq, Consumer.KATA, "tdx", 1e5, 2.0) for seq, t in enumerate((0.0, 30.0)))
        node = NodeSpec("n", CURRENT, "intel", {"tdx": 2})
        world = World(nodes=(node,), arrivals=arrivals, duration=60.0, settings=Settings(overhead_counted_twice=twice))
        sim = Simulation(world, get_strategy("double-pool"))
        sim.run()
        return sim

    once, twice = run(False), run(True)
    assert [p.phase for p in once.pods] == [Phase.RUNNING, Phase.RUNNING]
    assert [p.phase for p in twice.pods] == [Phase.RUNNING, Phase.PENDING]
    bound = twice.nodes["n"].bound
    assert bound.requested()["tdx.intel.com/keys"] == 2 == bound.requested_recount()["tdx.intel.com/keys"]
