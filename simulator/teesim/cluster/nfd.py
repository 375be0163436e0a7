"""Node Feature Discovery as it advertises TEE keys: capacity, never usage.

Models NFD's worker re-discovering features every ``sleepInterval`` (default 60 s) and NFD-master
publishing the extended resources ``tdx.intel.com/keys`` (= ``misc.capacity`` ``tdx``) and
``sev-snp.amd.com/esids`` (= ``misc.capacity`` ``sev_es``) in the node status. It reads the capacity
file through the collection's parser. When the file cannot be read or parsed the feature is not
detected and the resource is removed (advertised 0), as a NodeFeatureRule whose match fails does.
``reserved`` models an administrator lowering the advertised count (a static ``extendedResources``
value) to keep keys for VMs outside Kubernetes.
Simplification: labels, NodeFeature objects and the master's update latency are not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from teesim._collection import NFD_KEYS, parse_misc_text

DEFAULT_SLEEP_INTERVAL = 60.0
NFD_RESOURCES: dict[str, str] = dict(NFD_KEYS)
CAPACITY_FILE = "sys/fs/cgroup/misc.capacity"

Reader = Callable[[str], str]


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
        if value:
            advertised[resource] = max(value - (reserved or {}).get(misc_resource, 0), 0)
    return advertised
