"""What each strategy changes: which resource each consumer requests, and who advertises it.

Names as advertised in 2026 (see ``docs/simulator.md`` for the sources):

* KubeVirt: ``devices.kubevirt.io/tdx`` (merged TDX plugin, ``misc.capacity tdx`` read when
  virt-handler builds its plugins; no ``tdx`` line, no plugin), ``devices.kubevirt.io/sev-esids``
  (the SNP work, ``misc.capacity sev_es``) and ``devices.kubevirt.io/sev`` (the generic ``/dev/sev``
  plugin, a fixed 1000 slots). An SNP VMI requests ``sev`` and ``sev-esids``; SEV-ES and plain SEV
  VMIs request ``sev`` only.
* Kata: ``tdx.intel.com/keys`` / ``sev-snp.amd.com/esids`` in the RuntimeClass overhead, advertised
  by NFD's rule as ``misc.capacity`` (kata-deploy adds the overhead when NFD is deployed).

The strategies (the baseline first):

* ``double-pool``: both of the above on one node, as they ship: two pools of N keys each.
* ``kubevirt-static``: KubeVirt's plugins only; Kata deployed without NFD, so its pods request no key.
* ``nfd-shared``: VMIs request NFD's capacity-only resource too: one pool, external VMs invisible.
* ``reconciling``: KubeVirt's key resource from a plugin that polls ``misc.current`` and marks
  ``current - own`` free devices Unhealthy; Kata stays on NFD's fixed count.
* ``secure-guest-resources``: VMIs request NFD's resource, lowered by ``reserved`` keys per node.
* ``kata-overhead-on-kubevirt``: Kata's RuntimeClass overhead names KubeVirt's resource; KubeVirt's
  static plugin advertises it, NFD's key rule is off. The scheduler counts the overhead, the kubelet
  never allocates a device for it.
* ``split-nodes``: KubeVirt runs only on some nodes, NFD's rule matches only the others.
* ``unified-reconciling``: one device plugin advertises Kata's resource name from the kernel's usage,
  VMIs request that name too; Kata pods are accounted through their overhead (the node's bound pods),
  VMIs through pod-resources, the rest is hidden; ``external_reserve`` keys are kept for VMs outside
  Kubernetes when the operator sets it.
* ``kernel-pool``: ``tee_key_pool_mode: kernel``, the mode the collection deploys: the node agent
  (``tee-key-agent``, its decision code run in process) patches Kata's resource name into the node status
  at ``capacity - keys held outside Kubernetes - reserve``, the reserve being the node's headroom for VMs
  outside Kubernetes (the scenario's ``reserved``; ``kernel_key_pool_reserve`` when deployed); Kata requests
  it by overhead, VMIs by the request a MutatingAdmissionPolicy adds. No device plugin and no NFD rule
  advertise that name. ``kernel-pool-no-reserve`` is the same with the role's default, no ``--reserve``.
* ``dra-overhead-served`` / ``dra-overhead-unserved``: a DRA driver publishes a ResourceSlice from
  the kernel's free count and a DeviceClass maps it to Kata's resource name (KEP-5004); VMIs request
  that name. Whether RuntimeClass overhead is served from a DRA-backed name is open upstream:
  *served* allocates a device for it like a container request, *unserved* ignores it (the pod is
  scheduled with no key counted).

Plain SEV guests have no key pool in any strategy (no proposal covers them): they are limited only
by the 1000 ``/dev/sev`` slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from teesim._collection import KUBEVIRT_KEYS, KUBEVIRT_SEV, KUBEVIRT_SEV_SLOTS
from teesim.cluster.nfd import NFD_RESOURCES
from teesim.cluster.pods import Consumer, Guest

KATA_KEYS: dict[str, str] = dict(NFD_RESOURCES)
SEV_DEVICE = KUBEVIRT_SEV
SEV_DEVICE_SLOTS = KUBEVIRT_SEV_SLOTS
DRA_DRIVER = "tee-keys.teesim.dev"
# The misc resources whose KubeVirt plugin is a SocketDevicePlugin: KubeVirt v1.9.0's TDX plugin never sees the
# new kubelet remove its socket and does not register again until virt-handler restarts (``healthCheck`` adds the
# device's directory to its watcher twice and never the device-plugin directory,
# pkg/virt-handler/device-manager/socket_device.go v1.9.0; kubevirt/kubevirt#17122, fix proposed in #18669).
# The SNP capacity plugin (#17638, open) is taken to register again like the generic plugin, which watches that
# directory: its predecessor #16262 was a generic plugin without a device path.
KUBEVIRT_DEAF_TO_KUBELET_RESTART = frozenset({"tdx"})


class Advertiser(StrEnum):
    """Who publishes the resource VMIs request for their key."""

    STATIC = "static"  # KubeVirt's plugin: misc.capacity read when it starts
    RECONCILING = "reconciling"
    UNIFIED = "unified"
    NFD = "nfd"
    DRA = "dra"
    EXTERNAL = "external"  # device plugins outside teesim, run against ``teesim serve``
    KERNEL = "kernel"  # the kernel-pool agent patching the node status (tee-key-agent)


class Role(StrEnum):
    """Which consumers a node serves (``split-nodes`` only; every other strategy uses BOTH)."""

    BOTH = "both"
    KUBEVIRT = "kubevirt"
    KATA = "kata"


@dataclass(frozen=True)
class NodeLayout:
    """What runs on one node for one misc resource."""

    plugin: Advertiser | None  # the device plugin or DRA driver of the VMI key resource
    nfd_keys: bool  # NFD's rule advertises Kata's resource name
    nfd_reserved: bool  # ... lowered by the keys reserved for external VMs
    sev_device: bool  # KubeVirt's generic /dev/sev plugin (AMD nodes running virt-handler)


@dataclass(frozen=True)
class Strategy:
    """One way of accounting TEE keys for KubeVirt next to Kata and external VMs."""

    name: str
    summary: str
    vmi_key: str  # "kubevirt": devices.kubevirt.io/...; "kata": Kata's resource name
    advertiser: Advertiser
    kata_key: str | None  # the resource Kata's overhead names: "kata", "kubevirt" or None
    sev_es_requests_key: bool = True
    split_nodes: bool = False
    dra_overhead_served: bool | None = None
    reserve_external: bool = False  # NFD's count lowered by settings.reserved
    # The confidential.tee key-pool mode this strategy models (pool_policy.MODES names it back;
    # tests/simulator/strategies/test_policy_modes.py checks that the two agree and match in shape).
    models: str | None = None

    # -- what pods request ------------------------------------------------------------------------
    def vmi_key_name(self, misc_resource: str) -> str:
        names = KUBEVIRT_KEYS if self.vmi_key == "kubevirt" else KATA_KEYS
        return names[misc_resource]

    def kata_key_name(self, misc_resource: str) -> str | None:
        if self.kata_key is None:
            return None
        return (KUBEVIRT_KEYS if self.kata_key == "kubevirt" else KATA_KEYS)[misc_resource]

    def vmi_requests(self, guest: Guest) -> dict[str, int]:
        """The ``compute`` container's extended-resource requests of a VMI."""
        if guest is Guest.TDX:
            return {self.vmi_key_name("tdx"): 1}
        requests = {SEV_DEVICE: 1}
        if guest is Guest.SNP or (guest is Guest.SEV_ES and self.sev_es_requests_key):
            requests[self.vmi_key_name("sev_es")] = 1
        return requests

    def kata_overhead(self, misc_resource: str) -> dict[str, int]:
        """``overhead.podFixed`` keys of the Kata RuntimeClass for guests charging ``misc_resource``."""
        name = self.kata_key_name(misc_resource)
        return {name: 1} if name else {}

    def dra_names(self) -> frozenset[str]:
        """Extended resource names a DeviceClass maps to DRA devices."""
        return frozenset(KATA_KEYS.values()) if self.advertiser is Advertiser.DRA else frozenset()

    # -- what runs on nodes -----------------------------------------------------------------------
    def layout(self, misc_resource: str, role: Role = Role.BOTH) -> NodeLayout:
        kubevirt_here = role is not Role.KATA
        kata_here = role is not Role.KUBEVIRT
        has_keys = misc_resource in KUBEVIRT_KEYS
        plugin = self.advertiser if has_keys and kubevirt_here and self.advertiser is not Advertiser.NFD else None
        # NFD's rule serves Kata's name when VMIs use it as their pool, or when Kata alone asks for it
        # next to KubeVirt's own plugin; the unified plugin and the DRA driver replace it.
        nfd_serves = self.advertiser is Advertiser.NFD or (
            self.kata_key == "kata" and self.advertiser in (Advertiser.STATIC, Advertiser.RECONCILING)
        )
        nfd = has_keys and kata_here and nfd_serves
        return NodeLayout(
            plugin=plugin,
            nfd_keys=nfd,
            nfd_reserved=nfd and self.reserve_external,
            sev_device=kubevirt_here and misc_resource in ("sev", "sev_es"),
        )

    def accounted(self, misc_resource: str) -> frozenset[str]:
        """Consumers whose keys the VMI key resource's scheduler accounting already includes."""
        if misc_resource not in KUBEVIRT_KEYS:
            return frozenset({Consumer.KUBEVIRT.value})
        users = {Consumer.KUBEVIRT.value}
        kata_name = self.kata_key_name(misc_resource)
        if kata_name == self.vmi_key_name(misc_resource) and self.dra_overhead_served is not False:
            users.add(Consumer.KATA.value)
        return frozenset(users)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "double-pool",
            "as shipped in 2026: KubeVirt's plugins (misc.capacity) and NFD's rule for Kata, two pools of N",
            "kubevirt",
            Advertiser.STATIC,
            "kata",
            sev_es_requests_key=False,
        ),
        Strategy(
            "kubevirt-static",
            "KubeVirt's plugins only; Kata without NFD requests no key",
            "kubevirt",
            Advertiser.STATIC,
            None,
            sev_es_requests_key=False,
        ),
        Strategy(
            "nfd-shared", "VMIs request NFD's capacity-only resource alongside Kata", "kata", Advertiser.NFD, "kata"
        ),
        Strategy(
            "reconciling",
            "KubeVirt plugin polls misc.current, marks current - own free devices Unhealthy; Kata on NFD",
            "kubevirt",
            Advertiser.RECONCILING,
            "kata",
        ),
        Strategy(
            "secure-guest-resources",
            "VMIs and Kata on NFD's resource, lowered by keys reserved for external VMs",
            "kata",
            Advertiser.NFD,
            "kata",
            reserve_external=True,
        ),
        Strategy(
            "kata-overhead-on-kubevirt",
            "Kata's RuntimeClass overhead names KubeVirt's static resource; NFD's key rule off",
            "kubevirt",
            Advertiser.STATIC,
            "kubevirt",
            sev_es_requests_key=False,
            models="kubevirt",
        ),
        Strategy(
            "split-nodes",
            "KubeVirt's plugins on some nodes, NFD's rule for Kata on the others",
            "kubevirt",
            Advertiser.STATIC,
            "kata",
            sev_es_requests_key=False,
            split_nodes=True,
            models="nfd",
        ),
        Strategy(
            "unified-reconciling",
            "one kernel-reconciled plugin under Kata's name for VMIs and Kata (overhead pods from the informer)",
            "kata",
            Advertiser.UNIFIED,
            "kata",
        ),
        Strategy(
            "kernel-pool",
            "tee_key_pool_mode: kernel: the node agent's pool (capacity - keys outside Kubernetes - the node's headroom"
            " for them as --reserve, settings.reserved) for VMIs and Kata",
            "kata",
            Advertiser.KERNEL,
            "kata",
            reserve_external=True,
            models="kernel",
        ),
        Strategy(
            "kernel-pool-no-reserve",
            "kernel-pool with the role's default, no --reserve: VMs outside Kubernetes get no headroom",
            "kata",
            Advertiser.KERNEL,
            "kata",
        ),
        Strategy(
            "dra-overhead-served",
            "DRA driver (ResourceSlice from the kernel's free count) behind Kata's name; overhead gets a device",
            "kata",
            Advertiser.DRA,
            "kata",
            dra_overhead_served=True,
        ),
        Strategy(
            "dra-overhead-unserved",
            "the same DRA driver, but RuntimeClass overhead from a DRA-backed name is not served",
            "kata",
            Advertiser.DRA,
            "kata",
            dra_overhead_served=False,
        ),
    )
}
BASELINE = "double-pool"


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None
