# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Where ``kernel-install add`` writes the running kernel's Type #1 boot entry, and what that entry says.

``kernel-install add`` exits 0 without writing any entry when it finds no ``$BOOT`` it may write to, so its exit
code proves nothing: the entry itself is read back. The rules below are systemd 252's (Debian 12, 252.38-1~deb12u1:
``/usr/bin/kernel-install`` and ``/usr/lib/kernel/install.d/90-loaderentry.install``):

* The entry token is the first line of ``/etc/kernel/entry-token`` when that file exists; otherwise the first of
  the machine ID, ``IMAGE_ID`` and ``ID`` of ``os-release``, and ``Default`` whose directory exists in a boot root,
  falling back to the machine ID.
* ``$BOOT`` is the first of ``/efi``, ``/boot`` and ``/boot/efi`` that holds ``<token>/`` or ``loader/entries/``,
  else ``/efi`` or ``/boot/efi`` when it is a mount point, else ``/boot``. ``install.conf`` (``/etc/kernel``, else
  ``/usr/lib/kernel``; sourced as shell) may set ``BOOT_ROOT`` and ``layout`` instead.
* The entry is written only for the ``bls`` layout (``loader/entries.srel`` saying ``type1``, or a ``<token>/``
  directory in ``$BOOT``); for any other layout the plugin exits 0 having written nothing.
* Its name is ``$BOOT/loader/entries/<token>-<release>.conf``, or ``<token>-<release>+<tries>.conf`` with
  ``/etc/kernel/tries``; its ``options`` line is ``/etc/kernel/cmdline`` with whitespace runs squeezed, plus
  ``systemd.machine_id=<id>`` when the token is the machine ID.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.boot import bls
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader

# kernel-install's search order for $BOOT (systemd 252: BOOT_ROOT_SEARCH="/efi /boot /boot/efi").
BOOT_ROOTS = ("/efi", "/boot", "/boot/efi")
MAX_ENTRY = 64 * 1024
_OS_RELEASE_KEY = re.compile(r"^(IMAGE_ID|ID)=[\"']?([^\"'\s]*)[\"']?\s*$", re.M)
INSTALL_CONFS = ("/etc/kernel/install.conf", "/usr/lib/kernel/install.conf")
_INSTALL_CONF_KEY = re.compile(r"^\s*(layout|BOOT_ROOT)=[\"']?([^\"'\s]*)[\"']?\s*$", re.M)


def install_conf(reader: HostReader) -> tuple[str | None, dict[str, str]]:
    """The ``install.conf`` kernel-install reads (its path, or None) and the ``layout``/``BOOT_ROOT`` it sets."""
    for path in INSTALL_CONFS:
        text = reader.read_text(path, record=False)
        if text is not None:
            return path, {key: value for key, value in _INSTALL_CONF_KEY.findall(text) if value}
    return None, {}


def boot_roots(settings: dict[str, str]) -> tuple[str, ...]:
    """Where the entry can be: the configured ``BOOT_ROOT``, else kernel-install's search order."""
    root = settings.get("BOOT_ROOT", "").rstrip("/")
    return (root,) if root.startswith("/") else BOOT_ROOTS


def entry_tokens(reader: HostReader) -> list[str]:
    """The entry tokens kernel-install may use on this host, most likely first."""
    configured = (reader.read_text("/etc/kernel/entry-token", record=False) or "").strip().split("\n")[0].strip()
    if configured:
        return [configured]
    machine_id = (reader.read_text("/etc/machine-id", record=False) or "").strip()
    os_release = reader.read_text("/etc/os-release", record=False) or reader.read_text(
        "/usr/lib/os-release", record=False
    )
    found = dict(_OS_RELEASE_KEY.findall(os_release or ""))
    candidates = [machine_id, found.get("IMAGE_ID", ""), found.get("ID", ""), "Default"]
    return list(dict.fromkeys(token for token in candidates if token))


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
    host_root: str, tokens: list[str], release: str, roots: tuple[str, ...] = BOOT_ROOTS
) -> list[tuple[str, str | None]]:
    """``(path, options text)`` of the release's entries in every boot root; text None where it cannot be read."""
    reader = HostReader(host_root)
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
