"""The collection's pure misc-cgroup parser, imported (never copied) for the simulator.

``teesim`` renders kernel files and the Ansible collection parses them; both must agree byte for byte,
so the simulator reads its own output back through the very parser the modules use. The collection is
imported as ``ansible_collections.confidential.tee`` when it is on ``sys.path`` (``make collection``
links it); otherwise the file is loaded by path from the checkout this package lives in.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_MODULE_NAME = "ansible_collections.confidential.tee.plugins.module_utils.misc_cgroup"
_FALLBACK_NAME = "teesim._misc_cgroup_from_checkout"
_CHECKOUT_FILE = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "misc_cgroup.py"


def _load() -> ModuleType:
    try:
        return importlib.import_module(_MODULE_NAME)
    except ImportError:
        pass
    if _FALLBACK_NAME in sys.modules:
        return sys.modules[_FALLBACK_NAME]
    if not _CHECKOUT_FILE.is_file():
        raise ImportError(
            f"cannot import {_MODULE_NAME} and {_CHECKOUT_FILE} does not exist: install the "
            "confidential.tee collection or run teesim from a checkout of it"
        )
    spec = importlib.util.spec_from_file_location(_FALLBACK_NAME, _CHECKOUT_FILE)
    if spec is None or spec.loader is None:  # pragma: no cover - only for a broken Python install
        raise ImportError(f"cannot load {_CHECKOUT_FILE}")
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so the dataclasses inside can resolve their own module.
    sys.modules[_FALLBACK_NAME] = module
    spec.loader.exec_module(module)
    return module


misc_cgroup: ModuleType = _load()

KNOWN_RESOURCES: tuple[str, ...] = misc_cgroup.KNOWN_RESOURCES
U64_MAX: int = misc_cgroup.U64_MAX
canonical_resource = misc_cgroup.canonical_resource
parse_misc_text = misc_cgroup.parse_misc_text
read_misc_file = misc_cgroup.read_misc_file
read_misc_state = misc_cgroup.read_misc_state
locate_misc = misc_cgroup.locate_misc

__all__ = [
    "KNOWN_RESOURCES",
    "U64_MAX",
    "canonical_resource",
    "locate_misc",
    "misc_cgroup",
    "parse_misc_text",
    "read_misc_file",
    "read_misc_state",
]
