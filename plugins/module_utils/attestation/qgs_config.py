# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""QGS's configuration as QGS reads it, and the files that make QGS do what a host's consumers need.

:func:`effective_qgs` follows ``server_main.cpp`` of each release line (see :mod:`dcap_version`): every
whitespace character is removed from a line before anything else (``po rt = 1`` is ``port=1``), lines starting
with ``#`` and lines without ``=`` are skipped, an empty name is fatal, values are cut at 255 characters (from
1.19; 1.14 to 1.18 read the whole value, see :attr:`QgsBehaviour.value_cut`) and read with ``strtoul`` (a
sign is accepted, anything after the digits is fatal, so ``4050 # vsock`` stops QGS).

:func:`qgs_plan` turns a transport choice (``unix``, ``vsock``, ``both``) and a consumer list (``kubevirt``,
``kata``) into the files to write: ``/etc/qgs.conf``, a systemd drop-in for ``qgsd.service`` and, for
``both``, a second unit ``qgsd-vsock.service`` (one QGS process listens on one transport only).

Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    ERA_114,
    ERA_PRE_124,
    UINT_MAX,
    VSOCK_LAST_RESERVED_PORT,
    QgsBehaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError, keyvalue, systemd
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.tee import QGS_SOCKET

ULONG_MAX = 0xFFFFFFFFFFFFFFFF
_WHITESPACE = " \t\n\v\f\r"
TRANSPORTS = ("unix", "vsock", "both")
AUTO = "auto"
CONSUMERS = ("kubevirt", "kata")
# KubeVirt: virt-launcher runs QEMU as util.NonRootUID (107) with runAsGroup and fsGroup 107
# (pkg/util/util.go, pkg/virt-controller/services/template.go). Kata runs QEMU as root unless rootless.
KUBEVIRT_QEMU = {"name": "kubevirt", "uid": 107, "gid": 107, "groups": [107]}
KATA_QEMU = {"name": "kata", "uid": 0, "gid": 0, "groups": []}
# Kata's fallback when the socket is missing (src/runtime/pkg/govmm/qemu/qemu.go, runtime-rs utils.rs).
KATA_FALLBACK_VSOCK_PORT = 4050
# Which transport each consumer asks QGS on (checked against):
# * KubeVirt passes QEMU only a Unix socket path (KubeVirt CR spec.configuration.confidentialCompute.tdx.attestation
#   .qgsSocketPath, default /var/run/tdx-qgs/qgs.socket; virt-launcher's tdx-guest quote-generation-socket is
#   type unix), every release with TDX support (v1.6 to v1.8);
# * Kata Containers up to 3.31 gives QEMU {"type":"vsock","cid":"2","port":"4050"}
#   (configuration-qemu-tdx.toml tdx_quote_generation_service_socket_port = 4050; 0 selects the socket since
#   kata-containers PR #11057); from 3.32 the default is the Unix socket (PR #12436, runtime and runtime-rs).
KATA_UNIX_DEFAULT = (3, 32)
_KATA_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+~].*)?\Z")
DROPIN_PATH = "/etc/systemd/system/qgsd.service.d/zz-confidential-tee.conf"
VSOCK_UNIT_PATH = "/etc/systemd/system/qgsd-vsock.service"
SOCKET_ACCESS_HELPER = "/usr/local/libexec/confidential-tee/qgs-socket-access"


# shadow-utils' is_valid_user_name() (useradd/groupadd, 4.13, the default, non-relaxed rule), or a numeric gid:
# what the socket-access helper can hand to chgrp. Anything else is refused before it reaches a unit file.
GROUP_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_.-]{0,30}[A-Za-z0-9_.$-]?|[0-9]{1,10})\Z")


class QgsConfigError(TeeError):
    """A request that no qgs.conf can satisfy on this DCAP release."""


@dataclass
class QgsEffective:
    """What QGS makes of its file and command line: transport ``None`` means QGS exits at start."""

    transport: str | None
    port: int | None = None
    threads: int = 0
    fatal: str | None = None
    fatal_line: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def socket(self) -> str | None:
        return QGS_SOCKET if self.transport == "unix" else None

    def describe(self) -> str:
        if self.transport is None:
            where = f" (line {self.fatal_line})" if self.fatal_line else ""
            return f"QGS exits at start{where}: {self.fatal}"
        if self.transport == "unix":
            return f"Unix socket {QGS_SOCKET}"
        return f"vsock port {self.port}"


def strtoul(value: str) -> tuple[int, str, bool]:
    """glibc ``strtoul(value, &end, 10)`` on a string without whitespace: ``(number, rest, ERANGE)``."""
    start = 1 if value[:1] in ("+", "-") else 0
    end = start
    while end < len(value) and value[end] in "0123456789":
        end += 1
    if end == start:
        return 0, value, False  # no conversion: end points at the start of the string
    number = int(value[start:end])
    if number > ULONG_MAX:
        return ULONG_MAX, value[end:], True
    if value[:1] == "-":
        number = (-number) % (ULONG_MAX + 1)
    return number, value[end:], False


def _config_lines(text: str, cut: int | None = 255):
    """``(line number, name, value)`` for each line QGS looks at, exactly as its loop sees them.

    ``cut``: the release's value buffer (:attr:`QgsBehaviour.value_cut`); ``None`` hands the whole value on."""
    for number, raw in enumerate(text.split("\n"), start=1):
        name, value = _qgs_line(raw)
        if name is None:
            continue
        yield number, name, value if cut is None else value[:cut]


def _qgs_line(raw: str) -> tuple[str | None, str]:
    """``(name, value)`` of one line as QGS's loop sees it, or ``(None, "")`` for a line it skips."""
    line = "".join(ch for ch in raw if ch not in _WHITESPACE)
    # c_str(): the value ends at a NUL byte (strtoul never sees past it).
    if not line or line.startswith("#") or "=" not in line:
        return None, ""
    name, _equals, value = line.partition("=")
    return name, value.split("\0", 1)[0]


def _read_number(value: str, limit: int, empty_fatal: bool) -> int | None:
    number, rest, erange = strtoul(value)
    if erange or rest or number > limit or (empty_fatal and not value):
        return None
    return number


def effective_qgs(text: str | None, behaviour: QgsBehaviour, argv: list[str] | None = None) -> QgsEffective:
    """What QGS of ``behaviour``'s release does with ``text`` (``None``: file missing) and command line ``argv``."""
    flags = _parse_flags(argv or [], behaviour)
    if isinstance(flags, str):
        return QgsEffective(None, fatal=flags)
    if behaviour.era in (ERA_114, ERA_PRE_124):
        return _effective_pre_124(text, behaviour, *flags)
    return _effective_124(text, behaviour, *flags)


def _effective_pre_124(text, behaviour, cli_port, cli_threads) -> QgsEffective:
    # Before 1.24 the command line is read first and the file only fills values that are still 0.
    port, threads = cli_port or 0, cli_threads or 0
    effective = QgsEffective("unix")
    # 1.14 has no threads: it reads the file only while the port is 0, and every port line (the last wins).
    wants_file = port == 0 or (behaviour.reads_threads and threads == 0)
    if wants_file and text is None:
        effective.notes.append("/etc/qgs.conf is missing: QGS logs 'Failed to open config file' and uses defaults")
    elif wants_file:
        for number, name, value in _config_lines(text, behaviour.value_cut):
            if not name:
                return _fatal("'Wrong config format': a line starts with '='", number)
            if (not port or behaviour.duplicate_lines == "last") and name == "port":
                port = _read_number(value, behaviour.max_port, False)
                if port is None:
                    return _fatal(f"'Please input valid port number': port = {value!r}", number)
            elif behaviour.reads_threads and not threads and name == "number_threads":
                threads = _read_number(value, 255, False)
                if threads is None:
                    return _fatal(f"'Please input valid thread number[0, 255]': number_threads = {value!r}", number)
    if not port and behaviour.port_required:
        return QgsEffective(
            None,
            fatal=f"'Please provide valid port number in cmdline or /etc/qgs.conf': DCAP {behaviour.release} "
            "listens on vsock only and has no port",
        )
    if port:
        effective.transport, effective.port = "vsock", port
    effective.threads = threads
    return effective


def _effective_124(text, behaviour, cli_port, cli_threads) -> QgsEffective:
    # From 1.24 the file is read first (any port line selects vsock, the last one wins), then flags override.
    port: int | None = None
    threads = 0
    effective = QgsEffective("unix")
    if text is None:
        effective.notes.append("/etc/qgs.conf is missing: QGS logs 'Failed to open config file' and uses defaults")
    for number, name, value in _config_lines(text or "", behaviour.value_cut):
        if not name:
            return _fatal("'Wrong config format': a line starts with '='", number)
        if name == "port":
            port = _read_number(value, behaviour.max_port, True)
            if port is None:
                return _fatal(f"'Please input valid port number': port = {value!r} (0..{behaviour.max_port})", number)
        elif name == "number_threads":
            parsed = _read_number(value, 255, False)
            if parsed is None:
                return _fatal(f"'Please input valid thread number[0, 255]': number_threads = {value!r}", number)
            threads = parsed
    if cli_port is not None:
        port = cli_port
    if cli_threads is not None:
        threads = cli_threads
    if port is not None:
        effective.transport, effective.port = "vsock", port
    effective.threads = threads
    return effective


def _fatal(message: str, line: int) -> QgsEffective:
    return QgsEffective(None, fatal=message, fatal_line=line)


def _parse_flags(argv: list[str], behaviour: QgsBehaviour) -> tuple[int | None, int | None] | str:
    """``(port, threads)`` from QGS's command line, or the usage error QGS would exit with."""
    port = threads = None
    if behaviour.era == ERA_114 and len(argv) > 2:
        return "more than two command-line arguments (DCAP 1.14 prints its usage and exits)"
    flags = ("-p=", "-n=") if behaviour.reads_threads else ("-p=",)
    for arg in argv:
        if arg == "--no-daemon" or (arg.startswith("-l=") and behaviour.era not in (ERA_114, ERA_PRE_124)):
            continue
        if arg.startswith(flags):
            digits = arg[3:]
            limit = behaviour.max_port if arg.startswith("-p=") else 255
            # strspn(digits) == strlen: only ASCII digits, and an empty value reads as 0.
            if not all(ch in "0123456789" for ch in digits) or int(digits or "0") > limit:
                return f"invalid command-line flag {arg!r}"
            if arg.startswith("-p="):
                port = int(digits or "0")
            else:
                threads = int(digits or "0")
            continue
        return f"unknown command-line argument {arg!r} (QGS prints its usage and exits)"
    return port, threads


def render_qgs_conf(behaviour: QgsBehaviour, transport: str, vsock_port: int | None, threads: int | None) -> str:
    """/etc/qgs.conf meaning ``transport`` on ``behaviour``'s release (``both``: the Unix listener's file)."""
    lines = [
        "# Managed by confidential.tee.tdx_attestation. QGS reads 'port' and 'number_threads' only.",
    ]
    if transport in ("unix", "both"):
        lines.append(
            "# No 'port' line: QGS listens on the Unix socket "
            + QGS_SOCKET
            + " on every DCAP release"
            + (" (DCAP 1.24+ reads any port line, even 'port = 0', as vsock)." if behaviour.era != ERA_PRE_124 else ".")
        )
    else:
        lines.append(keyvalue.line("port", vsock_port, "vsock_port"))
    if threads:
        lines.append(keyvalue.line("number_threads", threads, "number_threads"))
    return "\n".join(lines) + "\n"


def update_qgs_conf(
    current: str | None, behaviour: QgsBehaviour, transport: str, vsock_port: int | None, threads: int | None
) -> str:
    """/etc/qgs.conf edited in place: only ``port`` (and ``number_threads`` when given) change.

    The administrator's comments, unknown keys and the package's ``number_threads = 4`` stay, so QGS's thread
    count never changes unasked; a missing or empty file is written whole (:func:`render_qgs_conf`)."""
    if current is None or not current.strip():
        return render_qgs_conf(behaviour, transport, vsock_port, threads)
    settings: dict = {"port": None if transport in ("unix", "both") else vsock_port}
    if threads:
        settings["number_threads"] = threads
    try:
        return keyvalue.qgs_edit(current, settings, {"port": "vsock_port", "number_threads": "number_threads"})
    except EmitError as exc:
        raise QgsConfigError(str(exc), option=exc.name) from None


def check_vsock_port(behaviour: QgsBehaviour, port: object) -> int:
    """A vsock port this release accepts as such, or :class:`QgsConfigError` saying why not."""
    if isinstance(port, bool) or not isinstance(port, int):
        raise QgsConfigError(f"the vsock port must be an integer, got {port!r}", option="vsock_port")
    if port == 0 and behaviour.port_zero_means == "unix":
        raise QgsConfigError(
            f"vsock port 0 cannot be configured on DCAP {behaviour.era}: port = 0 selects the Unix socket",
            option="vsock_port",
        )
    if port == 0 and behaviour.port_zero_means == "fatal":
        raise QgsConfigError(
            f"vsock port 0 cannot be configured on DCAP {behaviour.release}: QGS exits without a port",
            option="vsock_port",
        )
    upper = min(behaviour.max_port, UINT_MAX - 1)
    if not 0 <= port <= upper:
        raise QgsConfigError(
            f"vsock port {port} is out of range for DCAP {behaviour.era} (0..{upper})", option="vsock_port"
        )
    return port


@dataclass
class QgsPlan:
    """Files that make QGS serve the consumers, and what the socket must look like afterwards."""

    transport: str
    files: dict[str, str]
    listeners: list[dict]
    socket_group: str | None
    socket_mode: int
    socket_dir_mode: int
    clients: list[dict]
    units: list[str]
    warnings: list[str] = field(default_factory=list)


def default_socket_group(consumers: list[str]) -> str:
    """The group the QGS socket gets: KubeVirt's QEMU can only be reached through gid 107."""
    return str(KUBEVIRT_QEMU["gid"]) if "kubevirt" in consumers else "qgsd"


def socket_clients(consumers: list[str], extra: list[dict] | None = None) -> list[dict]:
    """The identities that must be able to connect() to the socket (name, uid, gid, groups)."""
    clients = []
    if "kubevirt" in consumers:
        clients.append(dict(KUBEVIRT_QEMU))
    if "kata" in consumers:
        clients.append(dict(KATA_QEMU))
    clients.extend(dict(client) for client in extra or [])
    return clients


def parse_kata_version(text: object) -> tuple[int, int] | None:
    """``3.31.0`` or ``v3.32`` -> ``(3, 31)``; empty or ``None`` -> ``None`` (unknown); anything else refused."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    match = _KATA_VERSION.match(str(text).strip())
    if not match or int(match.group(1)) < 1:
        raise QgsConfigError(
            f"kata_version {text!r} is not a Kata Containers release: write it as '3.31.0' (or leave it empty when "
            "unknown)",
            option="kata_version",
        )
    return int(match.group(1)), int(match.group(2))


def consumer_transports(consumers: list[str], kata_version: object = None) -> dict[str, list[str]]:
    """For each consumer, the transports it may ask QGS on (two when its version is unknown)."""
    needs: dict[str, list[str]] = {}
    for consumer in consumers:
        if consumer == "kubevirt":
            needs[consumer] = ["unix"]
        elif consumer == "kata":
            version = parse_kata_version(kata_version)
            if version is None:
                needs[consumer] = ["unix", "vsock"]
            else:
                needs[consumer] = ["unix"] if version >= KATA_UNIX_DEFAULT else ["vsock"]
    return needs


def resolve_transport(transport: str, consumers: list[str], kata_version: object = None) -> tuple[str, list[str]]:
    """``(transport, notes)``: ``auto`` chosen from the consumers' versions; an explicit one checked against them."""
    needs = consumer_transports(consumers, kata_version)
    wanted = {kind for kinds in needs.values() for kind in kinds}
    chosen = "both" if wanted == {"unix", "vsock"} else (wanted.pop() if wanted else "unix")
    notes = []
    if "kata" in consumers and parse_kata_version(kata_version) is None:
        notes.append(
            "the Kata version is unknown (tdx_attestation_kata_version): Kata up to 3.31 asks QGS on vsock port "
            f"{KATA_FALLBACK_VSOCK_PORT}, 3.32+ on the Unix socket"
            + (", so both are served" if transport == AUTO else "")
        )
    if transport == AUTO:
        return chosen, notes
    served = {"unix": {"unix"}, "vsock": {"vsock"}, "both": {"unix", "vsock"}}.get(transport, set())
    for consumer, kinds in needs.items():
        if len(kinds) == 1 and kinds[0] not in served:
            raise QgsConfigError(_mismatch(consumer, kinds[0], transport, kata_version), option="transport")
    return transport, notes


def _mismatch(consumer: str, needed: str, transport: str, kata_version: object) -> str:
    if consumer == "kata" and needed == "vsock":
        return (
            f"Kata {kata_version} asks QGS on vsock port {KATA_FALLBACK_VSOCK_PORT} (its default before 3.32) but "
            f"transport is {transport}: set transport to both or auto, or set "
            "tdx_quote_generation_service_socket_port = 0 in Kata's configuration-qemu-tdx.toml"
        )
    if consumer == "kata":
        return (
            f"Kata {kata_version} asks QGS on the Unix socket {QGS_SOCKET} (its default from 3.32) but transport is "
            f"{transport}: set transport to unix, both or auto"
        )
    return (
        "KubeVirt passes only a Unix socket path to QEMU (KubeVirt CR "
        "spec.configuration.confidentialCompute.tdx.attestation.qgsSocketPath): choose transport unix, both or auto"
    )


def served_consumers(transport: str, consumers: list[str], kata_version: object = None) -> dict[str, list[str]]:
    """Which consumers each listener (``unix``, ``vsock``) serves under ``transport``."""
    offered = {"unix": ["unix"], "vsock": ["vsock"], "both": ["unix", "vsock"]}[transport]
    needs = consumer_transports(consumers, kata_version)
    return {kind: [name for name, kinds in needs.items() if kind in kinds] for kind in offered}


def _check_request(transport: str, consumers: list[str], vsock_port: int) -> list[str]:
    if transport not in TRANSPORTS:
        raise QgsConfigError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}", option="transport")
    unknown = [name for name in consumers if name not in CONSUMERS]
    if unknown or not consumers:
        raise QgsConfigError(
            f"consumers must be a non-empty list of {', '.join(CONSUMERS)}, got {consumers!r}", option="consumers"
        )
    if "kubevirt" in consumers and transport == "vsock":
        raise QgsConfigError(
            "KubeVirt passes only a Unix socket path to QEMU (KubeVirt CR "
            "spec.configuration.confidentialCompute.tdx.attestation.qgsSocketPath): choose transport unix or both",
            option="transport",
        )
    warnings = []
    if "kata" in consumers and transport == "vsock" and vsock_port != KATA_FALLBACK_VSOCK_PORT:
        warnings.append(
            f"Kata falls back to vsock port {KATA_FALLBACK_VSOCK_PORT} when the socket is missing; "
            f"with port {vsock_port} set tdx_quote_generation_service_socket_port = {vsock_port} "
            "in Kata's configuration-qemu-tdx.toml"
        )
    if "kata" in consumers and transport != "unix":
        warnings.append(
            "Kata's QEMU reaches a host vsock listener through CID 2, which needs the vsock_loopback module "
            "(role confidential.tee.vsock)"
        )
    return warnings


def qgs_plan(
    behaviour: QgsBehaviour,
    transport: str,
    consumers: list[str],
    vsock_port: int = KATA_FALLBACK_VSOCK_PORT,
    threads: int | None = None,
    socket_group: str | None = None,
    qgs_dir: str = "/opt/intel/tdx-qgs",
    extra_clients: list[dict] | None = None,
    current_conf: str | None = None,
    kata_version: object = None,
) -> QgsPlan:
    """What to write so that QGS of ``behaviour``'s release listens on ``transport`` for ``consumers``.

    ``transport`` ``auto`` is chosen from the consumers (and ``kata_version``); an explicit one is checked."""
    notes: list[str] = []
    if transport in (*TRANSPORTS, AUTO) and isinstance(consumers, list):
        transport, notes = resolve_transport(transport, consumers, kata_version)
    warnings = notes + _check_request(transport, consumers, vsock_port)
    refusal = behaviour.refusal(transport)
    if refusal:
        raise QgsConfigError(refusal, option="transport")
    if threads and not behaviour.reads_threads:
        raise QgsConfigError(
            f"number_threads {threads}: DCAP {behaviour.release}'s QGS has no thread setting (it arrived in 1.15) "
            "and would ignore it; leave it 0",
            option="number_threads",
        )
    if transport != "unix":
        check_vsock_port(behaviour, vsock_port)
    if threads is not None and not (isinstance(threads, int) and 0 <= threads <= 255):
        raise QgsConfigError(f"number_threads must be an integer 0..255, got {threads!r}", option="number_threads")
    group = socket_group or default_socket_group(consumers)
    if not GROUP_NAME.match(group):
        raise QgsConfigError(
            "socket_group %r is not a group name or number: use a name such as qgsd or kvm (letters, digits, '_', "
            "'-' and '.', starting with a letter or '_', at most 32) or a gid" % (group,),
            option="socket_group",
        )
    files = {
        "/etc/qgs.conf": update_qgs_conf(current_conf, behaviour, transport, vsock_port, threads),
        DROPIN_PATH: _render_dropin(transport, vsock_port, group),
    }
    serves = served_consumers(transport, consumers, kata_version)
    listeners = []
    units = ["qgsd.service"]
    if transport in ("unix", "both"):
        listeners.append({"unit": "qgsd.service", "transport": "unix", "path": QGS_SOCKET, "serves": serves["unix"]})
    else:
        listeners.append({"unit": "qgsd.service", "transport": "vsock", "port": vsock_port, "serves": serves["vsock"]})
    if transport == "both":
        files[VSOCK_UNIT_PATH] = _render_vsock_unit(qgs_dir, vsock_port, threads)
        listeners.append(
            {"unit": "qgsd-vsock.service", "transport": "vsock", "port": vsock_port, "serves": serves["vsock"]}
        )
        units.append("qgsd-vsock.service")
    return QgsPlan(
        transport=transport,
        files=files,
        listeners=listeners,
        socket_group=group if transport != "vsock" else None,
        socket_mode=0o660,
        socket_dir_mode=0o755,
        clients=socket_clients(consumers, extra_clients) if transport != "vsock" else [],
        units=units,
        warnings=warnings,
    )


def _render_dropin(transport: str, vsock_port: int, group: str) -> str:
    # Named zz-*: drop-ins apply in lexical order and the package's own socket.conf (DCAP 1.26: UMask=0117) must
    # not override this file's UMask.
    pairs = [
        (None, "The socket directory exists before QGS starts and is searchable by every client (DCAP < 1.24 never"),
        (None, "creates it; 1.24-1.25 create it 0700, which no client but qgsd can traverse)."),
        ("RuntimeDirectory", "tdx-qgs"),
        ("RuntimeDirectoryMode", "0755"),
        (
            None,
            "0077 keeps the QCNL cache (~qgsd/.dcap-qcnl) private and usable: 1.26's UMask=0117 makes its directory",
        ),
        (None, "drw-rw----, which qgsd itself cannot enter."),
        ("UMask", "0077"),
    ]
    if transport != "unix" and transport != "both" and vsock_port <= VSOCK_LAST_RESERVED_PORT:
        pairs.append((None, "vsock ports up to 1023 need CAP_NET_BIND_SERVICE (af_vsock.c LAST_RESERVED_PORT)."))
        pairs.append(("AmbientCapabilities", "CAP_NET_BIND_SERVICE"))
    if transport in ("unix", "both"):
        # One word per argument whatever the group holds: a blank, quote or line break cannot add an argument
        # (a mode) or a setting. Rendered before the comment that names the group, which it thereby checks.
        command = systemd.exec_args([SOCKET_ACCESS_HELPER, QGS_SOCKET, group, "0660", "30"], "socket_group")
        pairs += [
            (None, f"Clients connect only with write permission on the socket: give it group {group}, mode 0660."),
            ("ExecStartPost", "+" + command),
        ]
    return systemd.comment("Managed by confidential.tee.tdx_attestation.") + "\n" + systemd.section("Service", pairs)


def _render_vsock_unit(qgs_dir: str, port: int, threads: int | None) -> str:
    argv = [f"{qgs_dir}/qgs", "--no-daemon", f"-p={port}"] + ([f"-n={threads}"] if threads else [])
    service = [
        ("Type", "simple"),
        ("User", "qgsd"),
        ("Environment", systemd.environment("LD_LIBRARY_PATH", qgs_dir, "qgs_dir")),
        ("WorkingDirectory", systemd.path(qgs_dir, "qgs_dir")),
        ("UMask", "0077"),
        ("ExecStart", systemd.exec_args(argv, "qgs_dir")),
        ("Restart", "on-failure"),
        ("RestartSec", "15s"),
    ]
    if port <= VSOCK_LAST_RESERVED_PORT:
        service.append(("AmbientCapabilities", "CAP_NET_BIND_SERVICE"))
    header = [
        "Managed by confidential.tee.tdx_attestation: a second QGS for vsock clients (one QGS process",
        "listens on one transport; qgsd.service serves the Unix socket).",
    ]
    unit = [
        ("Description", systemd.value(f"Intel(R) TD Quote Generation Service on vsock port {port}", "vsock_port")),
        ("After", "network.target qgsd.service"),
    ]
    return "\n".join(
        [
            *(systemd.comment(line) for line in header),
            systemd.section("Unit", unit),
            systemd.section("Service", service),
            systemd.section("Install", [("WantedBy", "multi-user.target")]),
        ]
    )
