"""What ``teesim serve`` runs: the served strategy (external plugins advertise, the scenario's ``serve:``
section names the resources) and what serve refuses before anything starts.

Kept apart from :mod:`teesim.serve.engine`, which is compiled (teesim._native): :class:`ServedStrategy` is
a :class:`~teesim.strategies.base.Strategy`, an interpreted class.
"""

from __future__ import annotations

from dataclasses import dataclass

from teesim._collection import KUBEVIRT_KEYS
from teesim.cluster.nfd import NFD_RESOURCES
from teesim.cluster.pods import Consumer, Guest
from teesim.sim.scenario import Scenario, ServeSpec
from teesim.strategies.base import SEV_DEVICE, Advertiser, NodeLayout, Role, Strategy

SERVED = "external-plugin"


@dataclass(frozen=True)
class ServedStrategy(Strategy):
    """The accounting the scenario's ``serve:`` section describes, advertised by external plugins."""

    vmi_names: tuple[tuple[str, str], ...] = ()
    kata_names: tuple[tuple[str, str], ...] = ()
    nfd: bool = True

    @classmethod
    def of(cls, spec: ServeSpec) -> ServedStrategy:
        kata = ", ".join(f"{m}: {n}" for m, n in sorted(spec.kata.items())) or "no key"
        vmi = ", ".join(f"{m}: {n}" for m, n in sorted(spec.kubevirt.items())) or "no key"
        nfd = "NFD's rule advertises Kata's names from misc.capacity" if spec.nfd else "no NFD key rule"
        return cls(
            SERVED,
            f"external device plugin(s) in real time; VMIs request {vmi}; Kata overhead {kata}; {nfd}",
            "external",
            Advertiser.EXTERNAL,
            "external",
            vmi_names=tuple(sorted(spec.kubevirt.items())),
            kata_names=tuple(sorted(spec.kata.items())),
            nfd=spec.nfd,
        )

    def vmi_key_name(self, misc_resource: str) -> str:
        # A misc resource VMIs request nothing for is still plotted under KubeVirt's name.
        return dict(self.vmi_names).get(misc_resource) or KUBEVIRT_KEYS.get(misc_resource, SEV_DEVICE)

    def kata_key_name(self, misc_resource: str) -> str | None:
        return dict(self.kata_names).get(misc_resource)

    def vmi_requests(self, guest: Guest) -> dict[str, int]:
        name = dict(self.vmi_names).get(guest.misc_resource)
        return {name: 1} if name else {}

    def layout(self, misc_resource: str, role: Role = Role.BOTH) -> NodeLayout:
        nfd = self.nfd and misc_resource in NFD_RESOURCES
        return NodeLayout(plugin=None, nfd_keys=nfd, nfd_reserved=False, sev_device=False)

    def accounted(self, misc_resource: str) -> frozenset[str]:
        users = {Consumer.KUBEVIRT.value}
        kata = self.kata_key_name(misc_resource)
        if kata is not None and kata == dict(self.vmi_names).get(misc_resource):
            users.add(Consumer.KATA.value)
        return frozenset(users)

    def plugin_resources(self) -> list[tuple[str, str]]:
        """(misc resource, name) the scenario's consumers request that NFD does not serve: the external
        plugins' job."""
        nfd = set(NFD_RESOURCES.values()) if self.nfd else set()
        return sorted({(m, n) for m, n in self.vmi_names + self.kata_names if n not in nfd})


def check_servable(scenario: Scenario) -> None:
    """What serve cannot run, refused before anything starts (a ValueError saying what to change)."""
    world = scenario.world
    where = f"{scenario.source}"
    if len(world.nodes) != 1:
        raise ValueError(f"{where}: teesim serve runs one node, the scenario has {len(world.nodes)}; keep one")
    if world.faults:
        raise ValueError(
            f"{where}: teesim serve cannot inject faults (an external plugin is not the scenario's to crash); "
            "remove the faults: list"
        )
    if not world.nodes[0].profile.has_misc:
        raise ValueError(f"{where}: kernel profile {world.nodes[0].profile.name!r} has no misc controller")
