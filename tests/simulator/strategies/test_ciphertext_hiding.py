"""AMD ciphertext hiding in a whole run (scenario snp-ciphertext-hiding): SNP launches past the SNP range fail
with EBUSY while misc.current still shows sev_es keys free; SEV-ES guests keep their own range; and TDX
exhaustion is ENOSPC, not EBUSY, in the failure records."""

from __future__ import annotations

import errno

from teesim.cluster.pods import Consumer, Guest
from teesim.cluster.workload import Arrival
from teesim.kernel.node import NodeSpec
from teesim.sim.scenario import load_scenario
from teesim.sim.simulation import Failure, Simulation, World
from teesim.strategies import get_strategy


class FreeAtFailure:
    """Records, for every failed launch, what misc.current said was free on that node at that moment."""

    def __init__(self) -> None:
        self.seen: list[tuple[Failure, int]] = []

    def after_event(self, sim: Simulation, now: float) -> None:
        pass

    def on_kernel_change(self, sim: Simulation, node: str, resource: str, consumer: str, now: float) -> None:
        pass

    def on_failure(self, sim: Simulation, failure: Failure) -> None:
        misc = sim.nodes[failure.node].kernel.misc
        self.seen.append((failure, misc.free(failure.resource)))


def test_snp_launches_past_the_snp_range_fail_ebusy_with_keys_free() -> None:
    scenario = load_scenario("snp-ciphertext-hiding")
    assert {spec.ciphertext_hiding_asids for spec in scenario.world.nodes} == {16}
    sim = Simulation(scenario.world, get_strategy("nfd-shared"))
    observer = FreeAtFailure()
    sim.run(observer)
    launches = [(f, free) for f, free in observer.seen if f.kind == "launch"]
    assert launches, "the scenario must overrun the SNP range"
    assert {f.error for f, _ in launches} == {"EBUSY"}
    assert all(f.resource == "sev_es" for f, _ in launches)
    # Every one failed while the kernel's own counters said ASIDs were free: the trap ciphertext hiding sets.
    assert min(free for _, free in launches) > 0
    for node in sim.nodes.values():
        assert node.kernel.misc.asids_in_use("snp") <= 16


def test_sev_es_fails_enotty_when_every_asid_went_to_snp() -> None:
    spec = NodeSpec(name="n1", vendor="amd", capacity={"sev": 410, "sev_es": 99}, ciphertext_hiding_asids=99)
    arrival = Arrival(1.0, 0, Consumer.EXTERNAL, "sev_es", 100.0, 0.0, "n1", Guest.SEV_ES)
    sim = Simulation(World((spec,), (arrival,), duration=50.0), get_strategy("nfd-shared"))
    sim.run()
    (failure,) = sim.failures
    assert failure.error == errno.errorcode[errno.ENOTTY] and failure.message.startswith("ENOTTY: ")


def test_tdx_exhaustion_is_recorded_as_enospc() -> None:
    spec = NodeSpec(name="n1", vendor="intel", capacity={"tdx": 1})
    arrivals = tuple(Arrival(1.0 + n, n, Consumer.EXTERNAL, "tdx", 100.0, 0.0, "n1") for n in range(2))
    sim = Simulation(World((spec,), arrivals, duration=50.0), get_strategy("nfd-shared"))
    sim.run()
    (failure,) = sim.failures
    assert failure.error == "ENOSPC" and "no free TDX KeyID (KVM_TDX_INIT_VM)" in failure.message
