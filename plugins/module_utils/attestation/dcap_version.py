# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Which Intel DCAP release a host runs, and what that release makes of QGS's configuration.

:func:`qgs_behaviour` is the one table of version-dependent QGS facts in this collection. It was read from
Intel's sources (``QuoteGeneration/quote_wrapper/qgs/server_main.cpp`` and the ``tdx-qgs`` installer of
intel/confidential-computing.tee.dcap, formerly intel/SGXDataCenterAttestationPrimitives):

* 1.12 and 1.13 ship no QGS at all (``QuoteGeneration/quote_wrapper/qgs`` first appears in tag DCAP_1.14);
* 1.14 listens on vsock only: a port is required (no port, or ``port = 0``, exits with "Please provide valid
  port number"), every ``port`` line is read (the last wins), ``number_threads`` and ``-n=`` do not exist (an
  ``-n=`` flag prints the usage and exits) and values are read whole (DCAP_1.14 ``server_main.cpp``);
* 1.15 to 1.23: the file's ``port`` is read only while it is still 0; ``port = 0`` or no ``port`` line selects
  the Unix socket ``/var/run/tdx-qgs/qgs.socket``; the daemon never creates the socket directory and the
  socket's mode comes from the service's umask. 1.15 to 1.18 hand the whole value to ``strtoul``; from 1.19
  the value is copied into ``char value[256]`` first, so only its first 255 characters count (tags DCAP_1.15
  to DCAP_1.23 of intel/SGXDataCenterAttestationPrimitives, read one by one);
* 1.24 and 1.25 listen on the Unix socket only when no ``port`` line exists at all: ``port = 0`` is vsock
  port 0; ports are limited to 0..65535, an empty value is fatal, the last line wins; the daemon creates the
  socket directory 0700 when it is missing; the package's ``/etc/qgs.conf`` ships ``port = 4050`` (vsock)
  (tags DCAP_1.24 and DCAP_1.25 of intel/confidential-computing.tee.dcap);
* from 1.26 the Unix socket is the default (the package's ``qgs.conf`` has no ``port`` line), the daemon
  pins the socket to 0660 (owner and group ``qgsd``: clients must be in that group), forces the directory to
  0755, removes stale sockets, and the installer (``tdx-qgs`` ``startup.sh``) writes its own drop-in
  ``/etc/systemd/system/qgsd.service.d/socket.conf`` (``RuntimeDirectory=tdx-qgs``, ``RuntimeDirectoryMode=0755``,
  ``UMask=0117``, which strips the owner search bit from the QCNL cache directory); 1.27's ``startup.sh`` writes
  ``UMask=0077`` in the same file and repairs a cache directory left ``drw-rw----``.

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.process import run_bounded

ERA_PRE_124 = "pre-1.24"
ERA_114 = "1.14"
ERA_124 = "1.24-1.25"
ERA_126 = "1.26+"
ERAS = (ERA_PRE_124, ERA_124, ERA_126)
FIRST_QGS = "1.14"
# The drop-in Intel's tdx-qgs installer writes from 1.26 (startup.sh, SYSTEMD_SOCKET_CONF).
PACKAGED_DROPIN = "/etc/systemd/system/qgsd.service.d/socket.conf"

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
        raise DcapVersionError(
            f"a DCAP version must be a string such as '1.26', got {type(text).__name__}", option="dcap_version"
        )
    match = _VERSION.match(text.strip())
    if not match:
        raise DcapVersionError(
            f"{text!r} is not a DCAP version: write it as '1.26' (or the tdx-qgs package version, 1.26.100.1-noble1)",
            option="dcap_version",
        )
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 1 or minor < 8 or minor > 99:
        raise DcapVersionError(
            f"{text!r} is not a DCAP release this collection knows (1.8 to 1.99; TDX needs 1.15+)",
            option="dcap_version",
        )
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
    # The release, for messages ("1.14").
    release: str = ""
    # Whether the release ships QGS at all (1.14+), can listen on the Unix socket (1.15+), reads number_threads.
    has_qgs: bool = True
    unix_socket: bool = True
    reads_threads: bool = True
    # Characters of a value QGS reads (char value[256] from 1.19); None: the whole value (1.14 to 1.18).
    value_cut: int | None = 255
    # 1.14 exits without a (nonzero) port: it has no other transport.
    port_required: bool = False
    # Where the row was read: the tag and file of Intel's source.
    source: str = ""

    def refusal(self, transport: str) -> str | None:
        """Why this release cannot serve ``transport`` (``unix``, ``vsock``, ``both``), or ``None`` when it can."""
        if not self.has_qgs:
            return (
                f"DCAP {self.release} ships no QGS (the Quote Generation Service first appears in DCAP {FIRST_QGS}): "
                "no TDX quote can be generated on this host; install DCAP 1.26 or later (tdx-qgs)"
            )
        if transport in ("unix", "both") and not self.unix_socket:
            return (
                f"DCAP {self.release}'s QGS listens on vsock only (the Unix socket arrived in 1.15): transport "
                f"{transport} cannot be served and KubeVirt cannot use this QGS; install DCAP 1.26 or later, or use "
                "transport vsock for Kata up to 3.31 only"
            )
        return None


_MIRROR = "intel/SGXDataCenterAttestationPrimitives"
_NEW_MIRROR = "intel/confidential-computing.tee.dcap"


def qgs_behaviour(version: DcapVersion) -> QgsBehaviour:
    """The QGS facts of ``version``: the version table (none, 1.14, 1.15-1.23, 1.24-1.25, 1.26+)."""
    release = str(version)
    if version < DcapVersion(1, 15):
        return _before_115(version)
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
            release=release,
            value_cut=None if version < DcapVersion(1, 19) else 255,
            source=f"{_MIRROR} DCAP_{release}: QuoteGeneration/quote_wrapper/qgs/server_main.cpp",
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
            release=release,
            source=f"{_NEW_MIRROR} DCAP_{release}: QuoteGeneration/quote_wrapper/qgs/server_main.cpp",
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
        release=release,
        source=f"{_NEW_MIRROR}: QuoteGeneration/installer/linux/common/tdx-qgs/startup.sh ({release} packaging)",
    )


def _before_115(version: DcapVersion) -> QgsBehaviour:
    """The 1.12 to 1.14 row: no QGS before 1.14, vsock only in 1.14."""
    release = str(version)
    return QgsBehaviour(
        era=ERA_114,
        unix_socket_when="never (vsock only)",
        port_zero_means="fatal",
        max_port=UINT_MAX,
        duplicate_lines="last",
        empty_port_fatal=True,
        creates_socket_dir_mode=None,
        forces_socket_dir_mode=None,
        socket_mode=None,
        client_group=None,
        packaged_umask=None,
        packaged_conf_is_vsock=True,
        cmdline_always_overrides=False,
        release=release,
        has_qgs=version >= DcapVersion(1, 14),
        unix_socket=False,
        reads_threads=False,
        value_cut=None,
        port_required=True,
        source=f"{_MIRROR} DCAP_{release}: QuoteGeneration/quote_wrapper/qgs/server_main.cpp"
        if version >= DcapVersion(1, 14)
        else f"{_MIRROR} DCAP_{release}: no QuoteGeneration/quote_wrapper/qgs",
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
