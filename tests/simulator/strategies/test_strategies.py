"""The strategies against hand-built worlds whose outcome is known in advance."""

from __future__ import annotations

import itertools

import pytest
from teesim.cluster.pods import Consumer, Guest
from teesim.cluster.workload import Arrival, FaultSpec
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import CURRENT, OLD
from teesim.plugins.models import ReconcilingPlugin
from teesim.report.metrics import MetricsRecorder
from teesim.sim.simulation import Settings, Simulation, World
from teesim.strategies import BASELINE, STRATEGIES, get_strategy

NODE = "n1"
FOREVER = 100_000.0
KV = "devices.kubevirt.io/tdx"
KEYS = "tdx.intel.com/keys"


def _arrivals(*items: tuple[float, Consumer, float, float], resource: str = "tdx") -> tuple[Arrival, ...]:
    """(time, consumer, duration, launch_delay) -> arrivals on the one node."""
    return tuple(
        Arrival(t, seq, consumer, resource, duration, delay, NODE if consumer is Consumer.EXTERNAL else None)
        for seq, (t, consumer, duration, delay) in enumerate(items)
    )


def _run(world: World, name: str) -> tuple[Simulation, dict]:
    sim = Simulation(world, get_strategy(name))
    recorder = MetricsRecorder()
    sim.run(recorder)
    return sim, recorder.summary(sim)


def _key_plugin(sim: Simulation):
    return next(p for p in sim.plugins[NODE] if p.resource_name in (KV, KEYS))


class AllocatableProbe(MetricsRecorder):
    """Records the kubelet's allocatable after every event."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[float, dict[str, int]] = {}

    def after_event(self, sim: Simulation, now: float) -> None:
        super().after_event(sim, now)
        self.seen[now] = sim.nodes[NODE].devices.allocatable(now)


def _external_then_vmis(reserved: int = 4, profile=CURRENT) -> World:
    """10 keys; 4 libvirt VMs take keys first, then 8 long-lived VMIs arrive one every 20 s."""
    externals = [(float(i), Consumer.EXTERNAL, FOREVER, 0.0) for i in range(4)]
    vmis = [(100.0 + 20 * i, Consumer.KUBEVIRT, FOREVER, 5.0) for i in range(8)]
    return World(
        nodes=(NodeSpec(NODE, profile, "intel", {"tdx": 10}),),
        arrivals=_arrivals(*externals, *vmis),
        duration=600.0,
        settings=Settings(reserved={"tdx": reserved}),
    )


def test_the_baseline_is_the_double_pool_and_every_strategy_is_registered() -> None:
    assert BASELINE == "double-pool"
    assert list(STRATEGIES) == [
        "double-pool",
        "kubevirt-static",
        "nfd-shared",
        "reconciling",
        "secure-guest-resources",
        "kata-overhead-on-kubevirt",
        "split-nodes",
        "unified-reconciling",
        "kernel-pool",
        "kernel-pool-no-reserve",
        "dra-overhead-served",
        "dra-overhead-unserved",
    ]


def test_what_pods_request_as_shipped_in_2026() -> None:
    double = get_strategy("double-pool")
    assert double.vmi_requests(Guest.TDX) == {KV: 1}
    # An SNP VMI asks for the /dev/sev slot and an ESID; SEV-ES charges sev_es but asks for no ESID.
    assert double.vmi_requests(Guest.SNP) == {"devices.kubevirt.io/sev": 1, "devices.kubevirt.io/sev-esids": 1}
    assert double.vmi_requests(Guest.SEV_ES) == {"devices.kubevirt.io/sev": 1}
    assert double.vmi_requests(Guest.SEV) == {"devices.kubevirt.io/sev": 1}
    assert double.kata_overhead("tdx") == {KEYS: 1}
    assert double.kata_overhead("sev_es") == {"sev-snp.amd.com/esids": 1}
    assert get_strategy("kubevirt-static").kata_overhead("tdx") == {}
    assert get_strategy("kata-overhead-on-kubevirt").kata_overhead("tdx") == {KV: 1}
    unified = get_strategy("unified-reconciling")
    assert unified.vmi_requests(Guest.TDX) == {KEYS: 1} == unified.kata_overhead("tdx")
    assert unified.vmi_requests(Guest.SEV_ES) == {"devices.kubevirt.io/sev": 1, "sev-snp.amd.com/esids": 1}


def test_static_fails_once_external_vms_take_keys_and_reconciling_does_not() -> None:
    world = _external_then_vmis()
    _, static = _run(world, "double-pool")
    _, nfd = _run(world, "nfd-shared")
    sim, reconciling = _run(world, "reconciling")
    _, sgr = _run(world, "secure-guest-resources")
    # Static and NFD advertise 10 while only 6 are free: the 7th and 8th VMI hit EBUSY long after the
    # external VMs started, i.e. outside any race window, and virt-handler retries them for ever.
    assert static["kubevirt"]["pods_with_failed_launch"] == static["kubevirt"]["never_started"] == 2
    assert static["kubevirt_failed_outside_race_window"] == static["failed_launches_by_consumer"]["kubevirt"] > 2
    assert nfd["kubevirt"]["never_started"] == 2
    # Reconciling marks the 4 keys Unhealthy: the last two VMIs wait instead of failing.
    assert reconciling["failed_launches"] == 0
    assert reconciling["pending_at_end"] == 2
    assert reconciling["detection"]["undetected"] == 0
    assert reconciling["detection"]["max_s"] <= 1.0
    assert sim.nodes[NODE].devices.allocatable() == {KV: 6}
    # secure-guest-resources with 4 reserved matches the externals exactly: no failure, and only the
    # reserved keys not yet taken while the external VMs start one per second are stranded (3+2+1).
    assert sgr["failed_launches"] == 0
    assert sgr["pending_at_end"] == 2
    assert sgr["stranded_key_seconds"] == 6
    # The strategies that never learn about the external VMs never detect the change.
    assert static["detection"]["detected"] == 0
    assert static["detection"]["undetected"] == 4


def test_secure_guest_resources_strands_what_it_reserves_and_fails_beyond_it() -> None:
    _, over = _run(_external_then_vmis(reserved=6), "secure-guest-resources")
    assert over["failed_launches"] == 0
    assert over["pending_at_end"] == 4
    assert over["stranded_key_seconds"] > 2 * 300
    _, under = _run(_external_then_vmis(reserved=2), "secure-guest-resources")
    assert under["kubevirt"]["never_started"] == 2
    assert under["kubevirt_failed_outside_race_window"] == under["failed_launches_by_consumer"]["kubevirt"] > 2


def test_reconciling_fails_only_inside_the_race_window() -> None:
    # 2 keys; one external VM holds one. A VMI is bound at t=100 with a 5 s launch delay; at t=102
    # a second external VM takes the last key before QEMU creates the TD.
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 2}),),
        arrivals=_arrivals(
            (0.0, Consumer.EXTERNAL, FOREVER, 0.0),
            (100.0, Consumer.KUBEVIRT, FOREVER, 5.0),
            (102.0, Consumer.EXTERNAL, FOREVER, 0.0),
        ),
        duration=300.0,
    )
    sim, metrics = _run(world, "reconciling")
    assert metrics["kubevirt"]["never_started"] == 1
    assert metrics["kubevirt_failed_outside_race_window"] == 0
    # virt-handler retries it (no key ever frees); every retry shares the first failure's verdict.
    assert len(sim.failures) == metrics["failed_launches_by_consumer"]["kubevirt"] > 1
    assert all(f.in_race_window for f in sim.failures)
    # TDX KeyIDs exhausted: KVM_TDX_INIT_VM fails ENOSPC before any misc charge (tdx.c, teesim.kernel.kvm).
    assert all(f.error == "ENOSPC" and f.message.startswith("ENOSPC: ") for f in sim.failures)


def _kata_and_vmis(n: int = 12) -> tuple[tuple[float, Consumer, float, float], ...]:
    return tuple((10.0 * i, Consumer.KATA if i % 2 else Consumer.KUBEVIRT, FOREVER, 2.0) for i in range(n))


def test_the_double_pool_gives_kata_and_vmis_n_keys_each_and_kata_retries() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),), arrivals=_arrivals(*_kata_and_vmis()), duration=400.0
    )
    sim, double = _run(world, "double-pool")
    _, shared = _run(world, "nfd-shared")
    assert shared["failed_launches"] == 0
    assert shared["pending_at_end"] == 2
    # Double pool: VMIs see 10 devices and Kata sees 10 keys, each ignoring the other: all 12 are
    # bound, 2 guests find no key. virt-handler retries the VMI with a doubling back-off; the kubelet
    # retries the Kata sandbox every 10-15 s.
    assert double["pending_at_end"] == 0
    assert double["kubevirt"]["never_started"] == 1
    assert double["kata"]["never_started"] == 1
    kata_fails = [f for f in sim.failures if f.consumer == "kata"]
    assert len(kata_fails) > 10, "every retry is another failed launch"
    gaps = [b.time - a.time for a, b in itertools.pairwise(kata_fails)]
    assert all(10.0 <= g <= 16.0 for g in gaps)
    assert [f.attempt for f in kata_fails[:3]] == [1, 2, 3]


def test_a_kata_pod_retried_after_ebusy_starts_once_a_key_frees() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 1}),),
        arrivals=_arrivals((0.0, Consumer.EXTERNAL, 60.0, 0.0), (5.0, Consumer.KATA, 100.0, 1.0)),
        duration=300.0,
    )
    sim, metrics = _run(world, "double-pool")
    (kata,) = [p for p in sim.pods if p.consumer is Consumer.KATA]
    assert kata.started_at is not None and 60.0 <= kata.started_at <= 76.0
    assert kata.attempts >= 4 and metrics["kata"]["retries"] == kata.attempts - 1
    assert metrics["failed_launches_by_consumer"]["kata"] == kata.attempts - 1


def test_no_tdx_line_means_no_kubevirt_plugin_and_vmis_stay_pending() -> None:
    # The kernel omits zero-capacity resources from misc.capacity: no tdx line, no TDX plugin.
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 0}),),
        arrivals=_arrivals((5.0, Consumer.KUBEVIRT, FOREVER, 1.0)),
        duration=100.0,
    )
    sim, metrics = _run(world, "double-pool")
    assert sim.nodes[NODE].devices.resources() == []
    assert metrics["pending_at_end"] == 1 and metrics["failed_launches"] == 0


def test_virt_handler_that_restarts_without_readable_capacity_builds_no_plugin() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
        arrivals=_arrivals((30.0, Consumer.KUBEVIRT, FOREVER, 1.0), (200.0, Consumer.KUBEVIRT, FOREVER, 1.0)),
        faults=(
            FaultSpec("plugin-crash", 50.0, NODE),
            FaultSpec("sysfs-unreadable", 55.0, NODE, 100.0, "misc.capacity"),
        ),
        duration=500.0,
        settings=Settings(plugin_restart_delay=10.0),
    )
    sim, metrics = _run(world, "double-pool")
    plugin = _key_plugin(sim)
    assert plugin.registrations == 1 and not plugin.running
    # The crashed endpoint is dropped after the kubelet's 5-minute grace period: the second VMI waits.
    assert sim.nodes[NODE].devices.capacity(now=500.0) == {}
    assert metrics["launched"]["kubevirt"] == 1 and metrics["pending_at_end"] == 1


def test_kata_overhead_on_kubevirt_counts_one_pool_but_never_allocates_devices_for_kata() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),), arrivals=_arrivals(*_kata_and_vmis()), duration=400.0
    )
    sim, metrics = _run(world, "kata-overhead-on-kubevirt")
    assert metrics["failed_launches"] == 0 and metrics["pending_at_end"] == 2
    node = sim.nodes[NODE]
    assert node.requested()[KV] == 10, "the scheduler counts 5 VMI requests and 5 Kata overheads"
    assert len(node.devices.allocated_ids(KV)) == 5, "the kubelet allocates devices for the VMIs only"
    assert node.nfd == {}, "NFD's key rule is off"


def test_split_nodes_keep_each_consumer_on_its_own_nodes() -> None:
    nodes = tuple(NodeSpec(name, CURRENT, "intel", {"tdx": 4}) for name in ("a", "b"))
    arrivals = tuple(
        Arrival(10.0 * i, i, Consumer.KATA if i % 2 else Consumer.KUBEVIRT, "tdx", FOREVER, 1.0) for i in range(12)
    )
    sim = Simulation(World(nodes, arrivals, duration=300.0), get_strategy("split-nodes"))
    recorder = MetricsRecorder()
    sim.run(recorder)
    metrics = recorder.summary(sim)
    assert {p.node for p in sim.pods if p.consumer is Consumer.KUBEVIRT and p.node} == {"a"}
    assert {p.node for p in sim.pods if p.consumer is Consumer.KATA and p.node} == {"b"}
    assert metrics["failed_launches"] == 0 and metrics["pending_at_end"] == 4
    assert sim.nodes["a"].nfd == {} and sim.nodes["b"].devices.resources() == []


def _everyone(reserve: int = 3, api_latency: float = 1.0) -> World:
    """10 keys; external VMs come and go (3 at most at once), Kata pods and VMIs arrive throughout."""
    items = [(7.0 * i, (Consumer.KATA, Consumer.KUBEVIRT)[i % 2], 60.0 + (i * 13) % 90, 1.0 + i % 3) for i in range(60)]
    items += [(50.0 + 40 * i, Consumer.EXTERNAL, 120.0, 0.0) for i in range(9)]
    return World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals(*sorted(items)),
        duration=600.0,
        settings=Settings(external_reserve={"tdx": reserve}, api_latency=api_latency),
    )


def test_unified_reconciling_keeps_every_consumers_failures_in_the_race_window() -> None:
    world = _everyone(reserve=0)
    _, unified = _run(world, "unified-reconciling")
    _, reconciling = _run(world, "reconciling")
    _, double = _run(world, "double-pool")
    assert double["failed_outside_race_window"]["kata"] > 0
    assert reconciling["failed_outside_race_window"]["kata"] > 0, "Kata's NFD pool never sees usage"
    # Without a reserve, pods are protected; VMs outside Kubernetes announce nothing and can still
    # find every key taken by pods.
    assert unified["failed_outside_race_window"]["kata"] == 0
    assert unified["failed_outside_race_window"]["kubevirt"] == 0
    assert unified["failed_launches"] < reconciling["failed_launches"]
    # With an instant informer it strands no more than reconciling; through the API server each Kata
    # start is hidden twice until PodReadyToStartContainers arrives (api_latency, 1 s): at most one
    # key-second per Kata launch more, too careful for a moment, never too few.
    _, instant = _run(_everyone(reserve=0, api_latency=0.0), "unified-reconciling")
    assert instant["stranded_key_seconds"] <= reconciling["stranded_key_seconds"]
    extra = unified["stranded_key_seconds"] - instant["stranded_key_seconds"]
    assert 0 < extra <= 1.0 * unified["launched"]["kata"]
    # With the operator's reserve covering them, external VMs are protected too; the reserve is held
    # free while they do not use it, which is what it costs.
    _, reserved = _run(_everyone(reserve=3), "unified-reconciling")
    assert reserved["failed_outside_race_window"] == {"kata": 0, "kubevirt": 0, "external": 0}
    assert reserved["stranded_key_seconds"] > unified["stranded_key_seconds"]


def test_unified_counts_kata_through_the_bound_pods_not_twice() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals(*[(float(i), Consumer.KATA, FOREVER, 1.0) for i in range(4)]),
        duration=100.0,
    )
    sim, metrics = _run(world, "unified-reconciling")
    plugin = _key_plugin(sim)
    assert plugin.unhealthy == frozenset(), "Kata's 4 keys are the scheduler's already (overhead)"
    assert sim.nodes[NODE].devices.allocatable() == {KEYS: 10}
    assert sim.nodes[NODE].requested()[KEYS] == 4
    assert metrics["stranded_key_seconds"] == 0


def test_unified_keeps_the_operators_reserve_for_external_vms() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 6}),),
        arrivals=_arrivals(
            *[(float(i), Consumer.KATA, FOREVER, 1.0) for i in range(6)],
            (50.0, Consumer.EXTERNAL, FOREVER, 0.0),
            (51.0, Consumer.EXTERNAL, FOREVER, 0.0),
        ),
        duration=100.0,
        settings=Settings(external_reserve={"tdx": 2}),
    )
    _, reserved = _run(world, "unified-reconciling")
    assert reserved["failed_launches"] == 0 and reserved["pending_at_end"] == 2
    _, unreserved = _run(World(world.nodes, world.arrivals, duration=100.0), "unified-reconciling")
    assert unreserved["failed_launches_by_consumer"]["external"] == 2


def test_kernel_pool_runs_the_agents_own_decision_and_keeps_failures_in_the_race_window() -> None:
    from teesim.plugins.kernel_agent import KernelPoolAgent, decision

    assert decision.__name__ == "ansible_collections.confidential.tee.plugins.module_utils.agent.decision"
    assert get_strategy("kernel-pool").models == "kernel" and get_strategy("kernel-pool-no-reserve").models is None
    world = _everyone(reserve=0)
    sim, kernel = _run(world, "kernel-pool-no-reserve")
    _, double = _run(world, "double-pool")
    agent = _key_plugin(sim)
    assert isinstance(agent, KernelPoolAgent) and isinstance(agent.last, decision.PoolDecision)
    assert double["failed_outside_race_window"]["kata"] > 0
    assert kernel["failed_outside_race_window"]["kata"] == 0
    assert kernel["failed_outside_race_window"]["kubevirt"] == 0
    # No device plugin and no NFD rule serve the pool: the agent's patch is the only writer.
    node = sim.nodes[NODE]
    assert node.nfd == {} and KEYS not in node.devices.allocatable()
    assert node.status_allocatable()[KEYS] == node.agent_pool[KEYS] == agent.published
    # The operator's reserve protects VMs outside Kubernetes too: external_reserve, or the node's declared headroom
    # (settings.reserved) in kernel-pool, the mode as docs/key-pools.md deploys it.
    _, reserved = _run(_everyone(reserve=3), "kernel-pool-no-reserve")
    assert reserved["failed_outside_race_window"] == {"kata": 0, "kubevirt": 0, "external": 0}
    headroom = World(world.nodes, world.arrivals, duration=world.duration, settings=Settings(reserved={"tdx": 3}))
    sim, planned = _run(headroom, "kernel-pool")
    assert planned["failed_outside_race_window"] == {"kata": 0, "kubevirt": 0, "external": 0}
    assert _key_plugin(sim).reserve == 3


def test_kernel_pool_shrinks_when_the_usage_file_is_unreadable() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals((1.0, Consumer.EXTERNAL, FOREVER, 0.0)),
        faults=(FaultSpec("sysfs-unreadable", 30.0, NODE, duration=20.0, file="misc.current"),),
        duration=100.0,
        settings=Settings(api_latency=0.0),
    )
    seen: dict[float, int] = {}

    class Probe(MetricsRecorder):
        def after_event(self, sim: Simulation, now: float) -> None:
            super().after_event(sim, now)
            seen[now] = sim.nodes[NODE].status_allocatable().get(KEYS, -1)

    sim = Simulation(world, get_strategy("kernel-pool"))
    sim.run(Probe())
    assert seen[max(t for t in seen if t < 30.0)] == 9
    assert min(v for t, v in seen.items() if 31.0 < t < 50.0) == 0
    assert seen[max(seen)] == 9


def test_a_crashed_kernel_pool_agent_leaves_its_last_value_and_its_restart_continues_from_it() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals((1.0, Consumer.EXTERNAL, FOREVER, 0.0), (20.0, Consumer.EXTERNAL, FOREVER, 0.0)),
        faults=(FaultSpec("plugin-crash", 10.0, NODE),),
        duration=40.0,
        settings=Settings(api_latency=0.0, plugin_restart_delay=15.0),
    )
    seen: dict[float, int] = {}

    class Probe(MetricsRecorder):
        def after_event(self, sim: Simulation, now: float) -> None:
            super().after_event(sim, now)
            seen[now] = sim.nodes[NODE].status_allocatable().get(KEYS, -1)

    sim = Simulation(world, get_strategy("kernel-pool"))
    sim.run(Probe())
    # Down from 10 s to 25 s: the Node keeps 9 although a second outside VM took a key at 20 s (the race window a
    # dead agent opens); restarted, it reads the kernel again.
    assert seen[max(t for t in seen if t < 25.0)] == 9
    assert seen[max(seen)] == 8 and _key_plugin(sim).registrations == 2


def test_dra_served_protects_everyone_and_frees_claims_at_once() -> None:
    world = _everyone()
    sim, served = _run(world, "dra-overhead-served")
    assert served["failed_outside_race_window"] == {"kata": 0, "kubevirt": 0, "external": 0}
    pool = sim.nodes[NODE].dra[KEYS]
    running = [p for p in sim.pods if p.phase.value in ("Bound", "Running")]
    assert len(pool.allocated) == len(running), "claims of finished pods are released at once"
    assert sim.nodes[NODE].devices.resources() == [], "no device plugin and no NFD rule for the keys"


def test_dra_unserved_overhead_gets_kata_rejected_by_the_kubelet() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),), arrivals=_arrivals(*_kata_and_vmis(4)), duration=100.0
    )
    sim, metrics = _run(world, "dra-overhead-unserved")
    # The scheduler leaves overhead to the DRA plugin, which allocates for container requests only;
    # the kubelet's predicate does not filter overhead, and the node lists no such resource.
    assert metrics["admission_failures_by_consumer"] == {"kata": 2, "kubevirt": 0, "external": 0}
    message = next(f.message for f in sim.failures if f.consumer == "kata")
    assert message.startswith(f"OutOf{KEYS}: Node didn't have enough resource: {KEYS}, requested: 1, used: ")
    assert message.endswith("capacity: 0")
    assert metrics["launched"]["kubevirt"] == 2


def test_the_race_between_list_and_publish_shows_without_allocate_tracking() -> None:
    items = [(3.0 * i + 0.5, Consumer.KUBEVIRT, 40.0, 1.0) for i in range(80)]
    items += [(10.0 * i, Consumer.EXTERNAL, 30.0, 0.0) for i in range(20)]
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 12}),),
        arrivals=_arrivals(*sorted(items)),
        duration=300.0,
        settings=Settings(poll_interval=1.0, plugin_list_latency=0.9, min_list_interval=0.1),
    )
    off = Settings(poll_interval=1.0, plugin_list_latency=0.9, plugin_tracks_allocate=False)
    _, blind = _run(World(world.nodes, world.arrivals, duration=300.0, settings=off), "reconciling")
    _, tracked = _run(world, "reconciling")
    assert blind["kubelet"]["allocated_devices_marked_unhealthy"] > 0
    assert tracked["kubelet"]["allocated_devices_marked_unhealthy"] == 0


def test_reconciling_stays_within_the_pod_resources_rate_limit_and_counts_refusals() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
        arrivals=_arrivals((5.0, Consumer.KUBEVIRT, FOREVER, 1.0)),
        duration=60.0,
        settings=Settings(poll_interval=0.01, pod_resources_background_qps=85.0),
    )
    sim, metrics = _run(world, "reconciling")
    bucket = sim.nodes[NODE].pod_resources
    assert bucket.allowed + bucket.rejected <= 60 / 0.1 + 1, "at most one List per min_list_interval"
    crowded = World(world.nodes, world.arrivals, duration=60.0, settings=Settings(pod_resources_background_qps=100.0))
    _, starved = _run(crowded, "reconciling")
    assert starved["kubelet"]["pod_resources_throttled"] > 0
    assert metrics["kubelet"]["pod_resources_throttled"] == 0


def _restart_then_crash_world(**settings: object) -> World:
    return World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
        arrivals=_arrivals((5.0, Consumer.KUBEVIRT, FOREVER, 1.0)),
        faults=(FaultSpec("kubelet-restart", 100.0, NODE), FaultSpec("plugin-crash", 200.0, NODE)),
        duration=300.0,
        settings=Settings(kubelet_restart_downtime=10.0, plugin_restart_delay=20.0, reregister_delay=1.0, **settings),
    )


@pytest.mark.parametrize(
    ("strategy", "settings", "registrations", "back_after_restart"),
    [
        # KubeVirt v1.9.0's TDX plugin: deaf to the kubelet's restart, registered again only by virt-handler's.
        ("double-pool", {}, 2, False),
        ("double-pool", {"kubevirt_tdx_reregisters": True}, 3, True),
        # teesim's reconciling plugin watches its socket.
        ("reconciling", {}, 3, True),
    ],
)
def test_a_kubelet_restart_and_a_plugin_crash_zero_the_pool_until_the_plugin_registers(
    strategy: str, settings: dict, registrations: int, back_after_restart: bool
) -> None:
    sim = Simulation(_restart_then_crash_world(**settings), get_strategy(strategy))
    probe = AllocatableProbe()
    sim.run(probe)
    seen = probe.seen
    plugin = _key_plugin(sim)
    assert plugin.registrations == registrations
    during_restart = [v for t, v in seen.items() if 100.0 <= t < 111.0]
    assert all(v.get(KV, 0) == 0 for v in during_restart)
    after_restart = [v.get(KV, 0) for t, v in seen.items() if 112.0 <= t < 200.0]
    assert after_restart and all((n == 4) is back_after_restart for n in after_restart), after_restart
    during_crash = [v for t, v in seen.items() if 200.0 <= t < 220.0]
    assert during_crash and all(v.get(KV, 0) == 0 for v in during_crash)
    # The VMI admitted before the restart kept its device (the checkpoint) and is still running.
    assert sim.launched["kubevirt"] == 1
    assert sim.nodes[NODE].devices.allocatable(300.0)[KV] == 4


def test_vmis_wait_for_virt_handler_when_kubevirts_tdx_plugin_missed_the_kubelet_restart() -> None:
    """Created after the restart, a VMI finds no devices.kubevirt.io/tdx until virt-handler restarts at 200 + 20."""
    world = _restart_then_crash_world()
    world = World(world.nodes, _arrivals((150.0, Consumer.KUBEVIRT, FOREVER, 1.0)), world.faults, 300.0, world.settings)
    sim = Simulation(world, get_strategy("double-pool"))
    sim.run()
    (vmi,) = sim.nodes[NODE].bound.pods()
    assert vmi.bound_at is not None and vmi.bound_at >= 220.0


def test_reconciling_on_an_old_kernel_sums_the_children() -> None:
    _, metrics = _run(_external_then_vmis(profile=OLD), "reconciling")
    assert metrics["failed_launches"] == 0
    assert metrics["pending_at_end"] == 2


def test_reconciling_never_marks_an_allocated_device_unhealthy() -> None:
    items = []
    for i in range(60):
        consumer = (Consumer.KATA, Consumer.KUBEVIRT, Consumer.EXTERNAL)[i % 3]
        items.append((7.0 * i, consumer, 90.0 + (i * 37) % 200, 1.0 + (i % 4)))
    world = World(nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 8}),), arrivals=_arrivals(*items), duration=900.0)

    class Probe(MetricsRecorder):
        def __init__(self) -> None:
            super().__init__()
            self.violations: list[float] = []

        def after_event(self, s: Simulation, now: float) -> None:
            super().after_event(s, now)
            plugin = _key_plugin(s)
            assert isinstance(plugin, ReconcilingPlugin)
            held = s.nodes[NODE].devices.active_device_ids(plugin.resource_name)
            if plugin.running and plugin.unhealthy & held:
                self.violations.append(now)

    for name in ("reconciling", "unified-reconciling"):
        sim = Simulation(world, get_strategy(name))
        probe = Probe()
        sim.run(probe)
        assert not probe.violations, name
        assert sim.launched["kubevirt"] >= 4, name


def _phantom_slot_world() -> World:
    """4 keys, all held: 3 long VMIs (running), then one VMI with a 30 s launch delay (admitted, not
    started), and Kata pods arriving while it waits for its domain."""
    items = [(float(i), Consumer.KUBEVIRT, FOREVER, 1.0) for i in range(3)]
    items.append((10.0, Consumer.EXTERNAL, FOREVER, 0.0))
    items.append((20.0, Consumer.KUBEVIRT, FOREVER, 30.0))
    items += [(40.0 + i, Consumer.KATA, FOREVER, 1.0) for i in range(3)]
    return World(nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 5}),), arrivals=_arrivals(*items), duration=300.0)


def test_a_vmi_admitted_but_not_started_holds_a_device_and_no_key_no_phantom_slot() -> None:
    """Issue 19: counting every own device as charged hid one key too few while a VMI waited for its
    domain: the scheduler placed a Kata pod on that phantom key, it failed outside the race window
    and was retried for ever. The plugin now counts as charged only the devices of started guests."""
    for name in ("unified-reconciling", "dra-overhead-served"):
        sim, metrics = _run(_phantom_slot_world(), name)
        assert metrics["failed_launches"] == 0, (name, sim.failures[:3])
        assert metrics["launched"] == {"kata": 0, "kubevirt": 4, "external": 1}, name
        assert metrics["pending_at_end"] == 3, name


def test_virt_handler_retries_a_vmi_refused_a_key_with_back_off_until_one_frees() -> None:
    """Two keys held by external VMs for 60 s; a VMI bound at once is refused (EBUSY) and retried by
    virt-handler (5 ms doubling), never failed for good: it starts on the first try after 60 s."""
    items = [(0.0, Consumer.EXTERNAL, 60.0, 0.0), (0.0, Consumer.EXTERNAL, 60.0, 0.0)]
    items.append((1.0, Consumer.KUBEVIRT, FOREVER, 1.0))
    world = World(nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 2}),), arrivals=_arrivals(*items), duration=400.0)
    sim, metrics = _run(world, "double-pool")
    vmi = next(p for p in sim.pods if p.consumer is Consumer.KUBEVIRT)
    assert vmi.phase.value == "Running" and vmi.started_at is not None
    # Tries at 2 s + 0.005 * (2**n - 1): the 14th (n = 13) is the first after 60 s, at 2 + 40.955 + 40.96.
    assert vmi.attempts == 15
    assert vmi.started_at == pytest.approx(2.0 + 0.005 * (2**14 - 1))
    assert metrics["failed_launches_by_consumer"]["kubevirt"] == 14
    assert metrics["kubevirt"] == {"pods": 1, "pods_with_failed_launch": 1, "retries": 14, "never_started": 0}
    assert [f.attempt for f in sim.failures] == list(range(1, 15))


def test_a_kubelet_restart_readmits_running_pods_and_rejects_overhead_only_kata_pods() -> None:
    """kubelet.go HandlePodAdditions (v1.34): every pod is admitted again; sanitizeNodeAllocatable
    raises a device-plugin resource to the devices held only for a pod that holds devices. A Kata pod
    whose key is RuntimeClass overhead on a device-plugin name finds 0 (its plugin has not registered
    again) and is rejected, its VM stopped; on NFD's name (kept in the Node object by NFD) or a
    DRA-backed one it stays. VMIs hold their devices and stay."""
    items = [(float(i), Consumer.KATA if i % 2 else Consumer.KUBEVIRT, FOREVER, 1.0) for i in range(4)]
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals(*items),
        faults=(FaultSpec("kubelet-restart", 100.0, NODE),),
        duration=300.0,
    )
    expected = {
        "double-pool": 0,
        "nfd-shared": 0,
        "kata-overhead-on-kubevirt": 2,
        "unified-reconciling": 2,
        "dra-overhead-served": 0,
    }
    for name, kata_rejected in expected.items():
        sim, metrics = _run(world, name)
        assert metrics["rejected_at_kubelet_restart"] == {"kata": kata_rejected, "kubevirt": 0, "external": 0}, name
        assert metrics["launched"]["kubevirt"] == 2, name
        rejected = [f for f in sim.failures if f.kind == "readmission"]
        assert all(
            f.message.startswith(f"OutOf{KEYS if name != 'kata-overhead-on-kubevirt' else KV}") for f in rejected
        )
        # The rejected pods' VMs were stopped: only the survivors hold keys.
        assert sim.nodes[NODE].usage("tdx") == 4 - kata_rejected, name


def test_plugins_learn_pod_starts_and_publish_slices_through_the_api_server_with_latency() -> None:
    """Issue 19: a plugin outside the kubelet learns PodReadyToStartContainers from an informer after
    the status manager's patch, and a ResourceSlice reaches the scheduler after its write:
    ``api_latency`` each (default 1 s, the API call latency SLO's p99 bound)."""
    assert Settings().api_latency == 1.0

    def kata_world(duration: float) -> World:
        return World(
            nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
            arrivals=_arrivals((0.0, Consumer.KATA, FOREVER, 0.5)),
            duration=duration,
            settings=Settings(api_latency=5.0),
        )

    # Started at 0.5 s, charged at once; until the informer shows it (5.5 s) the plugin counts its key
    # as someone else's and hides one device: too careful, never too few.
    assert len(_key_plugin(_run(kata_world(4.0), "unified-reconciling")[0]).unhealthy) == 1
    assert len(_key_plugin(_run(kata_world(8.0), "unified-reconciling")[0]).unhealthy) == 0

    def external_world(duration: float) -> World:
        return World(
            nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
            arrivals=_arrivals((10.0, Consumer.EXTERNAL, FOREVER, 0.0)),
            duration=duration,
            settings=Settings(api_latency=5.0),
        )

    # The driver sees the external VM at its 10 s poll (after the VM's start at the same instant); the
    # slice the scheduler reads shrinks at 15 s.
    assert len(_run(external_world(14.5), "dra-overhead-served")[0].nodes[NODE].dra[KEYS].devices) == 4
    assert len(_run(external_world(15.5), "dra-overhead-served")[0].nodes[NODE].dra[KEYS].devices) == 3


def test_an_outside_vm_beyond_the_nodes_headroom_is_counted_apart_from_the_pools_failures() -> None:
    # 4 keys, headroom 1: four long VMIs take 3 keys (the pool is 4 - 1), then two libvirt VMs start. The first
    # finds the headroom's key; the second finds none while one outside VM already holds the whole headroom.
    vmis = [(float(i), Consumer.KUBEVIRT, FOREVER, 1.0) for i in range(4)]
    externals = [(200.0, Consumer.EXTERNAL, FOREVER, 0.0), (300.0, Consumer.EXTERNAL, FOREVER, 0.0)]
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
        arrivals=_arrivals(*vmis, *externals),
        duration=400.0,
        settings=Settings(reserved={"tdx": 1}),
    )
    _, kernel = _run(world, "kernel-pool")
    assert kernel["launched"]["kubevirt"] == 3 and kernel["launched"]["external"] == 1
    assert kernel["failed_launches_by_consumer"]["external"] == 1 and kernel["external_over_headroom"] == 1
    assert kernel["failed_outside_race_window"]["external"] == 0
    # Without the reserve the pods take the headroom's key too: both outside VMs fail, neither ever holding a key,
    # so both within their headroom.
    _, bare = _run(world, "kernel-pool-no-reserve")
    assert bare["launched"]["kubevirt"] == 4 and bare["launched"]["external"] == 0
    assert bare["failed_outside_race_window"]["external"] == 2 and bare["external_over_headroom"] == 0
