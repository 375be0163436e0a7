# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The running kernel's Type #1 boot entry as ``kernel-install add`` writes it, and what that entry says.

Where it is written and under which entry token is decided by :mod:`kernel_install_layout`, from the same files as
the host's ``kernel-install``. The name and the line are systemd's ``90-loaderentry.install`` (252: Debian 12's
``/usr/lib/kernel/install.d/90-loaderentry.install``; the same in ``90-loaderentry.install.in`` 253 and later):

* ``$BOOT/loader/entries/<token>-<release>.conf``, or ``<token>-<release>+<tries>.conf`` with ``/etc/kernel/tries``;
* its ``options`` line is ``/etc/kernel/cmdline`` with whitespace runs squeezed, plus ``systemd.machine_id=<id>``
  when the token is the machine ID.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.boot import bls
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

# Where an entry may have been kept before the task (systemd 252 kernel-install.in's BOOT_ROOT_SEARCH, and the
# places find-esp.c 254+ looks for an ESP): its entries there are backed up before kernel-install runs.
BOOT_ROOTS = ("/efi", "/boot", "/boot/efi")
MAX_ENTRY = 64 * 1024


def entry_names(tokens: list[str], release: str, names: list[str]) -> list[str]:
    """The names in one ``loader/entries`` directory that are the entry of ``release`` (with or without tries)."""
    wanted = []
    for name in sorted(names):
        for token in tokens:
            stem = f"{token}-{release}"
            if name == f"{stem}.conf" or (name.startswith(f"{stem}+") and name.endswith(".conf")):
                wanted.append(name)
                break
    return wanted


def find_entries(
    reader: HostReader, tokens: list[str], release: str, roots: tuple[str, ...] = BOOT_ROOTS
) -> list[tuple[str, str | None]]:
    """``(path, options text)`` of the release's entries in every boot root; text None where it cannot be read."""
    found = []
    for boot in roots:
        directory = f"{boot}/loader/entries"
        for name in entry_names(tokens, release, reader.listdir(directory) or []):
            path = f"{directory}/{name}"
            result = reader.read(path, limit=MAX_ENTRY, record=False)
            if result.data is None or result.problem:
                found.append((path, None))
                continue
            try:
                found.append((path, bls.options_text(path, result.data.decode("utf-8", "surrogateescape"))))
            except bls.BlsError:
                found.append((path, None))
    return found


def looked_in(tokens: list[str], release: str, roots: tuple[str, ...] = BOOT_ROOTS) -> str:
    """Where the entry was looked for, for messages."""
    names = " or ".join(f"{token}-{release}.conf" for token in tokens) or f"<entry-token>-{release}.conf"
    return f"{names} in {', '.join(f'{boot}/loader/entries' for boot in roots)}"
