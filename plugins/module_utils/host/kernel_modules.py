# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)

"""Kernel modules a role needs now and at every boot: which are loaded, which to load, what the boot file holds.

Pure functions over a :class:`HostReader`; the ``kernel_modules`` module runs ``modprobe`` and writes the file.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

# What modprobe accepts as a module name on its command line (and what systemd-modules-load reads from a line): no
# option, no path, no space. '-' and '_' are the same to the kernel (kmod's modname_normalize); /sys/module shows '_'.
MODULE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# modules.builtin of a distribution kernel is tens of KiB (Debian 12's 6.1: about 40 KiB).
BUILTIN_LIMIT = 1024 * 1024


def name_problems(modules: object, what: str = "modules") -> list[str]:
    """Why ``modules`` (called ``what`` in the messages) is not a list of kernel module names (empty when it is)."""
    if not isinstance(modules, list) or not modules:
        return [f"{what} must be a non-empty list of kernel module names, such as [vhost_vsock, vsock_loopback]"]
    return [
        f"{what}: {name!r} is not a kernel module name (letters, digits, '_', '-' and '.', not starting with '-')"
        for name in modules
        if not isinstance(name, str) or not MODULE_NAME.match(name)
    ]


def sysfs_name(module: str) -> str:
    return module.replace("-", "_")


def builtin_modules(reader: HostReader, release: str | None) -> set[str]:
    """The modules built into the running kernel (its ``modules.builtin``), as /sys/module names."""
    if not release or "/" in release:
        return set()
    for directory in ("/lib/modules", "/usr/lib/modules"):
        text = reader.read_text(f"{directory}/{release}/modules.builtin", limit=BUILTIN_LIMIT, record=False)
        if text is not None:
            names = (line.rsplit("/", 1)[-1] for line in text.splitlines() if line.endswith(".ko"))
            return {sysfs_name(name[: -len(".ko")]) for name in names}
    return set()


def loaded_modules(reader: HostReader, modules: list[str]) -> dict[str, bool]:
    """Each module: loaded or built in (a ``/sys/module/<name>`` directory, or listed in ``modules.builtin``).

    A built-in module without parameters has no directory in /sys/module (the kernel's ``module_kset`` only lists
    built-ins with parameters), so ``modules.builtin`` of the running release is read too.
    """
    found = {module: bool(reader.isdir(f"/sys/module/{sysfs_name(module)}")) for module in modules}
    if all(found.values()):
        return found
    release = (reader.read_text("/proc/sys/kernel/osrelease", record=False) or "").strip()
    builtin = builtin_modules(reader, release)
    return {module: loaded or sysfs_name(module) in builtin for module, loaded in found.items()}


def default_content(modules: list[str]) -> str:
    """A modules-load.d file (systemd's modules-load.d(5)): one module name a line."""
    return "".join(f"{module}\n" for module in modules)
