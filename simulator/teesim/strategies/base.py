"""What each strategy changes: which resource a KubeVirt VMI requests and who advertises it.

* ``kubevirt-static``: today's KubeVirt device plugin. VMIs request ``devices.kubevirt.io/tdx``; the
  plugin advertises N = ``misc.capacity`` devices read once at start, all Healthy, forever.
* ``nfd-shared``: VMIs request NFD's ``tdx.intel.com/keys`` (``sev-snp.amd.com/esids`` on AMD), the
  resource Kata pods consume through RuntimeClass overhead, so the scheduler counts both.
* ``reconciling``: VMIs request ``devices.kubevirt.io/tdx`` from a plugin that polls ``misc.current``,
  learns its own allocations from pod-resources and marks ``current - own`` free devices Unhealthy
  (:func:`teesim.plugins.reconcile.next_unhealthy`, the same function the real gRPC plugin runs).
* ``secure-guest-resources``: the KubeVirt CR maps TDX/SNP to a named external resource (here NFD's,
  shared with Kata) whose advertised count the administrator lowers by ``reserved`` keys per misc
  resource for VMs started outside Kubernetes (a static partition).

Kata pods use NFD's resource in every strategy (that is how the Kata RuntimeClasses are written).
Resources NFD does not publish (plain ``sev``) stay on KubeVirt's own static plugin in the NFD-based
strategies.
"""

from __future__ import annotations

from dataclasses import dataclass

from teesim.cluster.nfd import NFD_RESOURCES

PLUGIN_RESOURCES: dict[str, str] = {
    "tdx": "devices.kubevirt.io/tdx",
    "sev": "devices.kubevirt.io/sev",
    "sev_es": "devices.kubevirt.io/sev_es",
}
STATIC = "static"
RECONCILING = "reconciling"


@dataclass(frozen=True)
class Strategy:
    """One way of accounting TEE keys for KubeVirt next to Kata and external VMs."""

    name: str
    summary: str
    vmi_plugin: str | None  # the plugin serving VMIs, or None when VMIs request NFD's resource
    reserve_external: bool = False

    def vmi_resource(self, misc_resource: str) -> str:
        """The extended resource a VMI charging ``misc_resource`` requests."""
        if self.vmi_plugin is None and misc_resource in NFD_RESOURCES:
            return NFD_RESOURCES[misc_resource]
        return PLUGIN_RESOURCES[misc_resource]

    def plugin_for(self, misc_resource: str) -> str | None:
        """Which in-process plugin advertises ``misc_resource`` on each node (None: NFD does)."""
        if self.vmi_plugin is not None:
            return self.vmi_plugin
        return None if misc_resource in NFD_RESOURCES else STATIC

    def resource_users(self, misc_resource: str) -> frozenset[str]:
        """Consumers whose keys the VMI resource's accounting already includes."""
        if self.vmi_resource(misc_resource) in NFD_RESOURCES.values():
            return frozenset({"kata", "kubevirt"})
        return frozenset({"kubevirt"})


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("kubevirt-static", "KubeVirt plugin, N = misc.capacity read once, all Healthy", STATIC),
        Strategy("nfd-shared", "VMIs request NFD's capacity-only resource alongside Kata", None),
        Strategy(
            "reconciling",
            "plugin polls misc.current, marks current - own free devices Unhealthy",
            RECONCILING,
        ),
        Strategy(
            "secure-guest-resources",
            "KubeVirt CR maps TDX/SNP to NFD's resource, lowered by keys reserved for external VMs",
            None,
            reserve_external=True,
        ),
    )
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None
