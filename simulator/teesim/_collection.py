"""The collection's pure module_utils, imported (never copied) for the simulator and the scripts.

``teesim`` renders kernel files and the Ansible collection parses them; both must agree byte for byte,
so the simulator reads its own output back through the very parser the modules use. The collection is
imported as ``ansible_collections.confidential.tee`` when it is on ``sys.path`` (``make collection``
links it); otherwise that package name is pointed at the checkout this package lives in, so that the
module_utils' own ``ansible_collections...`` imports of each other keep working.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "ansible_collections.confidential.tee"
CHECKOUT = Path(__file__).resolve().parents[2]


def _namespace(name: str, path: list[str]) -> ModuleType:
    module = ModuleType(name)
    module.__path__ = path  # a package: submodules are found on this path
    return module


def _register_checkout() -> None:
    if not (CHECKOUT / "plugins" / "module_utils").is_dir():
        raise ImportError(
            f"cannot import {PACKAGE} and {CHECKOUT} is not a checkout of it: install the "
            "confidential.tee collection or run from a checkout"
        )
    for parent in ("ansible_collections", "ansible_collections.confidential"):
        try:
            importlib.import_module(parent)
        except ImportError:
            sys.modules[parent] = _namespace(parent, [])
    sys.modules[PACKAGE] = _namespace(PACKAGE, [str(CHECKOUT)])


def collection_module(name: str) -> ModuleType:
    """``collection_module("plugins.module_utils.host.misc_cgroup")``: the installed collection, else this checkout."""
    full = f"{PACKAGE}.{name}"
    try:
        return importlib.import_module(full)
    except ImportError:
        _register_checkout()
        return importlib.import_module(full)


misc_cgroup: ModuleType = collection_module("plugins.module_utils.host.misc_cgroup")
# The collection's host object: teesim's plugin processes make one at their entry point and pass it down.
host_reader: ModuleType = collection_module("plugins.module_utils.common.host_reader")

# The one TEE vocabulary (plugins/module_utils/common/tee.py): the simulator spells no resource name itself.
tee: ModuleType = collection_module("plugins.module_utils.common.tee")
# The one key-pool policy (plugins/module_utils/common/pool_policy.py): the modes strategies model.
pool_policy: ModuleType = collection_module("plugins.module_utils.common.pool_policy")

# The TEE registry (plugins/module_utils/common/tee_registry.py): which TEE a vendor's host is (kernel/tee_hosts.py).
tee_registry: ModuleType = collection_module("plugins.module_utils.common.tee_registry")
MISC_RESOURCES = tee.MISC_RESOURCES
MISC_REPORT_ORDER = tee.MISC_REPORT_ORDER
VENDOR_MISC_RESOURCES = tee.VENDOR_MISC_RESOURCES
SEV = tee.SEV
SEV_ES = tee.SEV_ES
TDX = tee.TDX
KATA = tee.KATA
KUBEVIRT = tee.KUBEVIRT
EXTERNAL = tee.EXTERNAL
KUBEVIRT_TDX = tee.KUBEVIRT_TDX
KUBEVIRT_SEV = tee.KUBEVIRT_SEV
KUBEVIRT_SEV_ESIDS = tee.KUBEVIRT_SEV_ESIDS
KUBEVIRT_SEV_SLOTS = tee.KUBEVIRT_SEV_SLOTS
KUBEVIRT_GENERIC_DEVICES = tee.KUBEVIRT_GENERIC_DEVICES
KUBEVIRT_KEYS = tee.KUBEVIRT_KEYS
NFD_TDX_KEYS = tee.NFD_TDX_KEYS
NFD_SNP_ESIDS = tee.NFD_SNP_ESIDS
NFD_SEV_ASIDS = tee.NFD_SEV_ASIDS
NFD_KEYS = tee.NFD_KEYS
NFD_FEATURE_TDX_KEYS = tee.NFD_FEATURE_TDX_KEYS
NFD_FEATURE_SEV_ASIDS = tee.NFD_FEATURE_SEV_ASIDS

KNOWN_RESOURCES: tuple[str, ...] = misc_cgroup.KNOWN_RESOURCES
U64_MAX: int = misc_cgroup.U64_MAX
canonical_resource = misc_cgroup.canonical_resource
parse_misc_text = misc_cgroup.parse_misc_text
read_misc_file = misc_cgroup.read_misc_file
read_misc_state = misc_cgroup.read_misc_state
HostReader = host_reader.HostReader
locate_misc = misc_cgroup.locate_misc

__all__ = [
    "EXTERNAL",
    "KATA",
    "KNOWN_RESOURCES",
    "KUBEVIRT",
    "KUBEVIRT_GENERIC_DEVICES",
    "KUBEVIRT_KEYS",
    "KUBEVIRT_SEV",
    "KUBEVIRT_SEV_ESIDS",
    "KUBEVIRT_SEV_SLOTS",
    "KUBEVIRT_TDX",
    "MISC_REPORT_ORDER",
    "MISC_RESOURCES",
    "NFD_FEATURE_SEV_ASIDS",
    "NFD_FEATURE_TDX_KEYS",
    "NFD_KEYS",
    "NFD_SEV_ASIDS",
    "NFD_SNP_ESIDS",
    "NFD_TDX_KEYS",
    "SEV",
    "SEV_ES",
    "TDX",
    "U64_MAX",
    "VENDOR_MISC_RESOURCES",
    "HostReader",
    "canonical_resource",
    "collection_module",
    "host_reader",
    "locate_misc",
    "misc_cgroup",
    "parse_misc_text",
    "pool_policy",
    "read_misc_file",
    "read_misc_state",
    "tee",
    "tee_registry",
]
