"""The four strategies against hand-built worlds whose outcome is known in advance."""

from __future__ import annotations

from teesim.cluster.pods import Consumer
from teesim.cluster.workload import Arrival, FaultSpec
from teesim.kernel.node import NodeSpec
from teesim.kernel.profiles import CURRENT, OLD
from teesim.report.metrics import MetricsRecorder
from teesim.strategies import STRATEGIES, get_strategy
from teesim.strategies.simulation import Settings, Simulation, World

NODE = "n1"
FOREVER = 100_000.0


def _arrivals(*items: tuple[float, Consumer, float, float]) -> tuple[Arrival, ...]:
    """(time, consumer, duration, launch_delay) -> arrivals on the one TDX node."""
    return tuple(
        Arrival(t, seq, consumer, "tdx", duration, delay, NODE if consumer is Consumer.EXTERNAL else None)
        for seq, (t, consumer, duration, delay) in enumerate(items)
    )


def _run(world: World, name: str) -> tuple[Simulation, dict]:
    sim = Simulation(world, get_strategy(name))
    recorder = MetricsRecorder()
    sim.run(recorder)
    return sim, recorder.summary(sim)


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


def test_static_fails_once_external_vms_take_keys_and_reconciling_does_not() -> None:
    world = _external_then_vmis()
    _, static = _run(world, "kubevirt-static")
    _, nfd = _run(world, "nfd-shared")
    sim, reconciling = _run(world, "reconciling")
    _, sgr = _run(world, "secure-guest-resources")
    # Static and NFD advertise 10 while only 6 are free: the 7th and 8th VMI hit EBUSY long after the
    # external VMs started, i.e. outside any race window.
    assert static["failed_launches_by_consumer"]["kubevirt"] == 2
    assert static["kubevirt_failed_outside_race_window"] == 2
    assert nfd["failed_launches_by_consumer"]["kubevirt"] == 2
    # Reconciling marks the 4 keys Unhealthy: the last two VMIs wait instead of failing.
    assert reconciling["failed_launches"] == 0
    assert reconciling["pending_at_end"] == 2
    assert reconciling["detection"]["undetected"] == 0
    assert reconciling["detection"]["max_s"] <= 1.0
    assert sim.nodes[NODE].devices.allocatable() == {"devices.kubevirt.io/tdx": 6}
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
    # 6 reserved, 4 used outside: 2 keys are free in the kernel but never schedulable once VMIs fill
    # the 4 advertised; no failure.
    assert over["failed_launches"] == 0
    assert over["pending_at_end"] == 4
    assert over["stranded_key_seconds"] > 2 * 300
    _, under = _run(_external_then_vmis(reserved=2), "secure-guest-resources")
    assert under["failed_launches_by_consumer"]["kubevirt"] == 2
    assert under["kubevirt_failed_outside_race_window"] == 2


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
    assert metrics["failed_launches_by_consumer"]["kubevirt"] == 1
    assert metrics["kubevirt_failed_outside_race_window"] == 0
    (failure,) = sim.failures
    assert failure.in_race_window
    assert failure.message.startswith("EBUSY")


def test_nfd_shared_counts_kata_and_vmis_together_but_overcommits_with_external_vms() -> None:
    kata_and_vmis = [(10.0 * i, Consumer.KATA if i % 2 else Consumer.KUBEVIRT, FOREVER, 2.0) for i in range(12)]
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals(*kata_and_vmis),
        duration=400.0,
    )
    _, shared = _run(world, "nfd-shared")
    _, static = _run(world, "kubevirt-static")
    assert shared["failed_launches"] == 0
    assert shared["pending_at_end"] == 2
    # Static: VMIs see 10 devices and Kata sees 10 keys, each ignoring the other.
    assert static["failed_launches"] == 2
    with_external = World(
        nodes=world.nodes,
        arrivals=_arrivals((0.0, Consumer.EXTERNAL, FOREVER, 0.0), *[(a[0] + 1, *a[1:]) for a in kata_and_vmis]),
        duration=400.0,
    )
    _, shared_ext = _run(with_external, "nfd-shared")
    assert shared_ext["failed_launches"] >= 1


def test_nfd_strands_everything_while_misc_capacity_is_unreadable() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 10}),),
        arrivals=_arrivals((0.0, Consumer.KUBEVIRT, FOREVER, 1.0)),
        faults=(FaultSpec("sysfs-unreadable", 50.0, NODE, 100.0, "misc.capacity"),),
        duration=300.0,
    )
    _, shared = _run(world, "nfd-shared")
    _, static = _run(world, "kubevirt-static")
    # Discovery at 60 and 120 fails, so the resource disappears until the discovery at 180:
    # 9 free keys stranded for 120 s.
    assert shared["stranded_key_seconds"] == 9 * 120
    assert static["stranded_key_seconds"] == 0


def test_kubelet_restart_forces_reregistration_and_plugin_crash_zeroes_allocatable() -> None:
    world = World(
        nodes=(NodeSpec(NODE, CURRENT, "intel", {"tdx": 4}),),
        arrivals=_arrivals((5.0, Consumer.KUBEVIRT, FOREVER, 1.0)),
        faults=(FaultSpec("kubelet-restart", 100.0, NODE), FaultSpec("plugin-crash", 200.0, NODE)),
        duration=300.0,
        settings=Settings(kubelet_restart_downtime=10.0, plugin_restart_delay=20.0, reregister_delay=1.0),
    )
    for name in ("kubevirt-static", "reconciling"):
        sim = Simulation(world, get_strategy(name))
        probe = AllocatableProbe()
        sim.run(probe)
        seen = probe.seen
        (plugin,) = sim.plugins[NODE]
        # Start, re-registration after the kubelet restart, restart after the crash.
        assert plugin.registrations == 3, name
        during_restart = [v for t, v in seen.items() if 100.0 <= t < 111.0]
        assert all(v.get("devices.kubevirt.io/tdx", 0) == 0 for v in during_restart), name
        during_crash = [v for t, v in seen.items() if 200.0 <= t < 220.0]
        assert during_crash and all(v["devices.kubevirt.io/tdx"] == 0 for v in during_crash), name
        # The VMI admitted before the restart kept its device (the checkpoint) and is still running.
        assert sim.launched["kubevirt"] == 1
        assert sim.nodes[NODE].devices.allocatable(300.0)["devices.kubevirt.io/tdx"] == 4


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
    sim = Simulation(world, get_strategy("reconciling"))
    violations: list[float] = []

    class Probe(MetricsRecorder):
        def after_event(self, s: Simulation, now: float) -> None:
            super().after_event(s, now)
            (plugin,) = s.plugins[NODE]
            if plugin.unhealthy & plugin.own_allocated():  # type: ignore[attr-defined]
                violations.append(now)

    sim.run(Probe())
    assert not violations
    assert sim.launched["kubevirt"] > 5


def test_every_strategy_is_registered() -> None:
    assert list(STRATEGIES) == ["kubevirt-static", "nfd-shared", "reconciling", "secure-guest-resources"]
