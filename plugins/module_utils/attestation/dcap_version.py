# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Which Intel DCAP release a host runs, and what that release makes of QGS's configuration.

:func:`qgs_behaviour` is the one table of version-dependent QGS facts in this collection. It was read from
Intel's sources (``QuoteGeneration/quote_wrapper/qgs/server_main.cpp`` and the ``tdx-qgs`` installer of
intel/confidential-computing.tee.dcap, formerly intel/SGXDataCenterAttestationPrimitives):

* before 1.24 the file's ``port`` is read only while it is still 0; ``port = 0`` or no ``port`` line selects
  the Unix socket ``/var/run/tdx-qgs/qgs.socket``; the daemon never creates the socket directory and the
  socket's mode comes from the service's umask;
* 1.24 and 1.25 listen on the Unix socket only when no ``port`` line exists at all: ``port = 0`` is vsock
  port 0; ports are limited to 0..65535, an empty value is fatal, the last line wins; the daemon creates the
  socket directory 0700 when it is missing; the package's ``/etc/qgs.conf`` ships ``port = 4050`` (vsock);
* from 1.26 the daemon pins the socket to 0660 (owner and group ``qgsd``: clients must be in that group),
  forces the directory to 0755, removes stale sockets, and the package ships a systemd drop-in whose
  ``UMask=0117`` strips the owner search bit from the QCNL cache directory (1.27 changed it to 0077).

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded

ERA_PRE_124 = "pre-1.24"
ERA_124 = "1.24-1.25"
ERA_126 = "1.26+"
ERAS = (ERA_PRE_124, ERA_124, ERA_126)

UINT_MAX = 0xFFFFFFFF
# The package (and the version table) belongs to QGS itself: libsgx-* versions follow it in lock step.
QGS_PACKAGE = "tdx-qgs"
DPKG_STATUS = "var/lib/dpkg/status"
# af_vsock.c: binding a port <= LAST_RESERVED_PORT needs CAP_NET_BIND_SERVICE (qgsd runs as user qgsd).
VSOCK_LAST_RESERVED_PORT = 1023

_VERSION = re.compile(r"^(?:DCAP_)?(\d+)\.(\d+)(?:[.\-+~].*)?\Z")


class DcapVersionError(TeeError):
    """A version string this collection cannot read as a DCAP release."""


@dataclass(frozen=True, order=True)
class DcapVersion:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_dcap_version(text: object) -> DcapVersion:
    """``1.26``, ``DCAP_1.26`` or a package version such as ``1.26.100.1-noble1`` -> ``DcapVersion(1, 26)``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise DcapVersionError(f"a DCAP version must be a string such as '1.26', got {type(text).__name__}")
    match = _VERSION.match(text.strip())
    if not match:
        raise DcapVersionError(
            f"{text!r} is not a DCAP version: write it as '1.26' (or the tdx-qgs package version, 1.26.100.1-noble1)"
        )
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 1 or minor < 8 or minor > 99:
        raise DcapVersionError(f"{text!r} is not a DCAP release this collection knows (1.8 to 1.99; TDX needs 1.15+)")
    return DcapVersion(major, minor)


@dataclass(frozen=True)
class QgsBehaviour:
    """What one DCAP release's QGS makes of /etc/qgs.conf, its command line and its socket."""

    era: str
    # How the Unix socket is selected, in words for messages.
    unix_socket_when: str
    # Meaning of ``port = 0`` in /etc/qgs.conf: "unix" or "vsock".
    port_zero_means: str
    max_port: int
    # Which of several ``port`` lines counts: "first-nonzero" or "last".
    duplicate_lines: str
    # An empty value (``port =``) is fatal from 1.24 on; before, it reads as 0.
    empty_port_fatal: bool
    # Mode the daemon gives a socket directory it creates itself (None: it does not create it).
    creates_socket_dir_mode: int | None
    # Mode the daemon forces on an existing socket directory (None: left alone).
    forces_socket_dir_mode: int | None
    # Mode the daemon forces on the socket (None: 0777 masked by the service's umask).
    socket_mode: int | None
    # Group clients must belong to with the package defaults (None: only the owner can connect by default).
    client_group: str | None
    # The package's systemd drop-in UMask (None: the unit sets none); 1.26's 0117 breaks the QCNL cache.
    packaged_umask: int | None
    # Whether the package's /etc/qgs.conf selects vsock 4050 (a ``port`` line) out of the box.
    packaged_conf_is_vsock: bool
    # Whether command-line flags always override the file (before 1.24 the file is read for zero values only).
    cmdline_always_overrides: bool


def qgs_behaviour(version: DcapVersion) -> QgsBehaviour:
    """The QGS facts of ``version``: the version table (pre-1.24, 1.24-1.25, 1.26+)."""
    if version < DcapVersion(1, 24):
        return QgsBehaviour(
            era=ERA_PRE_124,
            unix_socket_when="no port line, or port = 0",
            port_zero_means="unix",
            max_port=UINT_MAX,
            duplicate_lines="first-nonzero",
            empty_port_fatal=False,
            creates_socket_dir_mode=None,
            forces_socket_dir_mode=None,
            socket_mode=None,
            client_group=None,
            packaged_umask=None,
            packaged_conf_is_vsock=True,
            cmdline_always_overrides=False,
        )
    if version < DcapVersion(1, 26):
        return QgsBehaviour(
            era=ERA_124,
            unix_socket_when="no port line at all (port = 0 is vsock port 0)",
            port_zero_means="vsock",
            max_port=0xFFFF,
            duplicate_lines="last",
            empty_port_fatal=True,
            creates_socket_dir_mode=0o700,
            forces_socket_dir_mode=None,
            socket_mode=None,
            client_group=None,
            packaged_umask=None,
            packaged_conf_is_vsock=True,
            cmdline_always_overrides=True,
        )
    return QgsBehaviour(
        era=ERA_126,
        unix_socket_when="no port line at all (port = 0 is vsock port 0)",
        port_zero_means="vsock",
        max_port=0xFFFF,
        duplicate_lines="last",
        empty_port_fatal=True,
        creates_socket_dir_mode=0o755,
        forces_socket_dir_mode=0o755,
        socket_mode=0o660,
        client_group="qgsd",
        packaged_umask=0o117 if version == DcapVersion(1, 26) else 0o077,
        packaged_conf_is_vsock=False,
        cmdline_always_overrides=True,
    )


def dpkg_package_version(status_text: str, package: str) -> str | None:
    """Version of an installed package in a dpkg status file (``None`` when not installed)."""
    for stanza in re.split(r"\n\s*\n", status_text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            name, _colon, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if fields.get("package") != package:
            continue
        status = fields.get("status", "").split()
        if status[-1:] == ["installed"] and "version" in fields:
            return fields["version"]
    return None


def detect_dcap_version(reader, package: str = QGS_PACKAGE, timeout: float = 20.0) -> tuple[str | None, str]:
    """``(package version, where it was found)`` or ``(None, why not)``: dpkg's status file, then ``rpm --root``."""
    status = reader.read(DPKG_STATUS, limit=64 * 1024 * 1024, record=False)
    if status.data is not None:
        version = dpkg_package_version(status.text(), package)
        if version:
            return version, f"dpkg: {package} {version}"
    argv = ["rpm", "--root", reader.host_root, "-q", "--qf", "%{VERSION}", package]
    try:
        completed = run_bounded(argv, timeout, limit=4096)
    except OSError:
        return None, f"{package} is not installed according to {reader.path(DPKG_STATUS)} and rpm is not available"
    output = completed.stdout.decode("utf-8", "replace").strip()
    if completed.rc == 0 and output:
        return output, f"rpm: {package} {output}"
    return None, f"{package} is not installed (dpkg status and rpm database); set the DCAP version explicitly"
