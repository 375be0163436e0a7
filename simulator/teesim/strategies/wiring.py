"""Put a strategy's advertisers on the nodes: device plugins, NFD's rule, the DRA driver.

For every node and every misc resource its kernel has, :meth:`Strategy.layout` says what runs
there; this module builds the in-process models (:mod:`teesim.plugins.models`), registers the
DRA pools with the node and returns what the simulation must start and poll. ``split-nodes`` gives
each node a role: the Kata nodes are ``settings.kata_nodes`` or, by default, every second node in
name order (a one-node cluster then has no Kata node: Kata pods stay Pending, which is the answer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from teesim.cluster.dra import DRAPool
from teesim.cluster.nfd import NFD_RESOURCES
from teesim.cluster.node import SimNode
from teesim.engine.clock import VirtualClock
from teesim.plugins.kernel_agent import KernelPoolAgent
from teesim.plugins.models import (
    DRADriver,
    GenericPlugin,
    InProcessPlugin,
    ReconcilingPlugin,
    StaticPlugin,
    UnifiedPlugin,
)
from teesim.strategies.base import (
    DRA_DRIVER,
    KUBEVIRT_DEAF_TO_KUBELET_RESTART,
    SEV_DEVICE,
    SEV_DEVICE_SLOTS,
    Advertiser,
    Role,
    Strategy,
)

Advertising = InProcessPlugin | DRADriver | KernelPoolAgent
Poller = ReconcilingPlugin | DRADriver | KernelPoolAgent  # advertisers that read misc.current every poll_interval


@dataclass(frozen=True)
class PluginOptions:
    """Knobs of the reconciling advertisers (from the scenario's settings)."""

    min_list_interval: float = 0.1
    list_latency: float = 0.0
    track_allocate: bool = True
    external_reserve: Mapping[str, int] = field(default_factory=dict)
    api_latency: float = 0.0  # a DRA driver's ResourceSlice write reaching the scheduler
    # The operator's planned headroom for VMs outside Kubernetes (settings.reserved): the kernel-pool agent's
    # --reserve in the strategies that set reserve_external.
    reserved: Mapping[str, int] = field(default_factory=dict)
    # A KubeVirt whose TDX plugin registers again after a kubelet restart (kubevirt/kubevirt#18669); v1.9.0's does not.
    kubevirt_tdx_reregisters: bool = False


@dataclass
class NodeWiring:
    """What runs on one node."""

    plugins: list[Advertising] = field(default_factory=list)
    pollers: list[Poller] = field(default_factory=list)
    nfd_misc: list[str] = field(default_factory=list)  # misc resources NFD's rule advertises here
    nfd_reserved: bool = False


def node_roles(strategy: Strategy, names: Sequence[str], kata_nodes: Sequence[str] | None) -> dict[str, Role]:
    """Each node's role: BOTH, or for ``split-nodes`` KUBEVIRT / KATA."""
    if not strategy.split_nodes:
        return dict.fromkeys(names, Role.BOTH)
    ordered = sorted(names)
    kata = set(kata_nodes) if kata_nodes is not None else set(ordered[1::2])
    unknown = kata - set(ordered)
    if unknown:
        raise ValueError(f"settings.kata_nodes names unknown nodes {', '.join(sorted(unknown))}")
    return {name: Role.KATA if name in kata else Role.KUBEVIRT for name in ordered}


def _key_plugin(
    kind: Advertiser,
    node: SimNode,
    clock: VirtualClock,
    name: str,
    misc: str,
    options: PluginOptions,
    headroom: bool = False,
) -> Advertising:
    if kind is Advertiser.STATIC:
        deaf = misc in KUBEVIRT_DEAF_TO_KUBELET_RESTART and not options.kubevirt_tdx_reregisters
        return StaticPlugin(node, clock, name, misc, reregisters=not deaf)
    if kind is Advertiser.KERNEL:
        reserve = (options.reserved if headroom else options.external_reserve).get(misc, 0)
        return KernelPoolAgent(node, clock, name, misc, reserve=reserve, publish_latency=options.api_latency)
    if kind is Advertiser.DRA:
        pool = node.dra.setdefault(name, DRAPool(DRA_DRIVER, name))
        return DRADriver(
            node, clock, pool, misc, reserve=options.external_reserve.get(misc, 0), publish_latency=options.api_latency
        )
    common = {
        "min_list_interval": options.min_list_interval,
        "list_latency": options.list_latency,
        "track_allocate": options.track_allocate,
    }
    if kind is Advertiser.UNIFIED:
        return UnifiedPlugin(node, clock, name, misc, reserve=options.external_reserve.get(misc, 0), **common)
    return ReconcilingPlugin(node, clock, name, misc, **common)


def wire_node(
    strategy: Strategy, node: SimNode, clock: VirtualClock, resources: Sequence[str], options: PluginOptions
) -> NodeWiring:
    """Build the advertisers of one node (nothing is started yet)."""
    role = Role(node.role)
    wiring = NodeWiring()
    sev_device = False
    for misc in resources:
        layout = strategy.layout(misc, role)
        sev_device = sev_device or layout.sev_device
        if layout.nfd_keys:
            wiring.nfd_misc.append(misc)
            wiring.nfd_reserved = wiring.nfd_reserved or layout.nfd_reserved
        if layout.plugin is None:
            continue
        name = strategy.vmi_key_name(misc)
        plugin = _key_plugin(layout.plugin, node, clock, name, misc, options, strategy.reserve_external)
        wiring.plugins.append(plugin)
        if isinstance(plugin, ReconcilingPlugin | DRADriver | KernelPoolAgent):
            wiring.pollers.append(plugin)
    if sev_device:
        wiring.plugins.append(GenericPlugin(node, clock, SEV_DEVICE, "sev", SEV_DEVICE_SLOTS))
    return wiring


def nfd_names(misc_resources: Sequence[str]) -> frozenset[str]:
    return frozenset(NFD_RESOURCES[m] for m in misc_resources if m in NFD_RESOURCES)
