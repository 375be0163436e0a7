"""Node Feature Discovery as it advertises TEE keys: capacity, never usage.

Models NFD's worker re-discovering features every ``sleepInterval`` (default 60 s) and NFD-master
publishing the extended resources ``tdx.intel.com/keys`` (= ``misc.capacity`` ``tdx``) and
``sev-snp.amd.com/esids`` (= ``misc.capacity`` ``sev_es``) in the node status. It reads the capacity
file through the collection's parser. When the file cannot be read or parsed the feature is not
detected and the resource is removed (advertised 0), as a NodeFeatureRule whose match fails does.
NFD publishes only where Kata's rule matches and the feature has the element (node-feature-discovery v0.19.0
``source/cpu/security_amd64.go``; kata-deploy's ``kata-tee-keys`` rule): ``tdx.intel.com/keys`` needs
``tdx.enabled`` (``kvm_intel``'s ``tdx`` parameter reads exactly ``Y``), ``sev-snp.amd.com/esids`` needs
``sev.snp.enabled`` (the rule's match) and ``sev.es.enabled`` (which fills ``sev.encrypted_state_ids``):
``kvm_amd``'s ``sev_snp`` and ``sev_es`` parameters starting with ``1`` or ``Y``. Checked against NFD's own
discovery and rule engine by ``scripts/upstream_nfd.py`` (docs/simulator.md, "Upstream code in the loop").
``reserved`` models an administrator lowering the advertised count (a static ``extendedResources``
value) to keep keys for VMs outside Kubernetes.
Simplification: labels, NodeFeature objects and the master's update latency are not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from teesim._collection import NFD_KEYS, SEV_ES, TDX, parse_misc_text

DEFAULT_SLEEP_INTERVAL = 60.0
NFD_RESOURCES: dict[str, str] = dict(NFD_KEYS)
CAPACITY_FILE = "sys/fs/cgroup/misc.capacity"

Reader = Callable[[str], str]

# Per misc resource: the kvm module parameters NFD must see enabled, and whether it wants exactly "Y\n"
# (tdxEnabled) or a first byte of 1 or Y (sevParameterEnabled).
KVM_GATES: dict[str, tuple[tuple[str, bool], ...]] = {
    TDX: (("sys/module/kvm_intel/parameters/tdx", True),),
    SEV_ES: (("sys/module/kvm_amd/parameters/sev_snp", False), ("sys/module/kvm_amd/parameters/sev_es", False)),
}


def _enabled(read: Reader, path: str, exact: bool) -> bool:
    try:
        text = read(path)
    except OSError:
        return False
    return text == "Y\n" if exact else text[:1] in ("1", "Y")


def discover(read: Reader, reserved: Mapping[str, int] | None = None) -> dict[str, int]:
    """One discovery pass: ``{extended resource: count}`` from the node's ``misc.capacity``."""
    try:
        text = read(CAPACITY_FILE)
    except OSError:
        return {}
    parsed = parse_misc_text(text, CAPACITY_FILE)
    advertised: dict[str, int] = {}
    for misc_resource, resource in NFD_RESOURCES.items():
        value = parsed.values.get(misc_resource)
        if value and all(_enabled(read, path, exact) for path, exact in KVM_GATES.get(misc_resource, ())):
            advertised[resource] = max(value - (reserved or {}).get(misc_resource, 0), 0)
    return advertised
