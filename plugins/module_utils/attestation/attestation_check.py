# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""The TDX attestation chain on one host, checked link by link: each link PASS, FAIL or SKIP, with the fix.

QEMU asks QGS for a quote over a Unix socket or vsock; QGS gets PCK collateral through QCNL from a PCCS; the
PCCS needs tokens, an Intel PCS API key and a registered platform. Every rule comes from the readers of the
sibling modules (:mod:`qgs_config`, :mod:`qcnl_config`, :mod:`pccs_config`, :mod:`registration`,
:mod:`socket_access`, :mod:`https_probe`); this module only orders them and words the verdicts.

Standard library only.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.attestation import https_probe, socket_access
from ansible_collections.confidential.tee.plugins.module_utils.attestation.dcap_version import (
    ERAS,
    DcapVersion,
    DcapVersionError,
    detect_dcap_version,
    parse_dcap_version,
    qgs_behaviour,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.pccs_config import (
    PCCS_DIR,
    config_problems,
    effective_config,
    overrides_on_host,
    token_matches,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qcnl_config import QCNL_PATH, qcnl_effective
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_config import (
    KATA_FALLBACK_VSOCK_PORT,
    QgsConfigError,
    default_socket_group,
    effective_qgs,
    resolve_transport,
    served_consumers,
    socket_clients,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.qgs_unit import (
    disagreement,
    merge_unit,
    systemd_view,
    unit_problems,
)
from ansible_collections.confidential.tee.plugins.module_utils.attestation.registration import (
    PCK_MARKER,
    STATUS_VARIABLE,
    registration_status,
)
from ansible_collections.confidential.tee.plugins.module_utils.common.host_reader import HostReader
from ansible_collections.confidential.tee.plugins.module_utils.common.results import FAIL, PASS, SKIP, check_record
from ansible_collections.confidential.tee.plugins.module_utils.common.tee import QGS_SOCKET

QCNL_CACHE = "var/opt/qgsd/.dcap-qcnl"
VMADDR_CID_HOST = 2


@dataclass
class ChainRequest:
    """What the chain must serve on this host (the role's variables, or the module's options)."""

    dcap_version: str = "auto"
    transport: str = "unix"
    kata_version: str | None = None
    consumers: list[str] = field(default_factory=lambda: ["kubevirt", "kata"])
    vsock_port: int = KATA_FALLBACK_VSOCK_PORT
    socket_group: str | None = None
    extra_clients: list[dict] = field(default_factory=list)
    qcnl_path: str = QCNL_PATH
    expect_pccs_url: str | None = None
    pccs_local: bool = False
    pccs_dir: str = PCCS_DIR
    pccs_user: str = "pccs"
    user_token: str | None = None
    admin_token: str | None = None
    ca_bundle: str | None = None
    registration: str = "auto"
    probe: bool = True
    timeout: float = 10.0


def result(link: str, status: str, message: str, fix: str | None = None, **details) -> dict:
    """One link as the collection's check record (``name`` is the link); ``link`` repeats it until 0.3.0."""
    return check_record(link, status, message, fix, details=details, link=link)


class Chain:
    """Runs the links in order; later links read what earlier ones learnt (version, QCNL settings)."""

    def __init__(self, request: ChainRequest, host: HostReader) -> None:
        self.request = request
        self.reader = host
        self.version: DcapVersion | None = None
        self.version_source = ""
        self.qcnl: dict | None = None
        self.pccs_config: dict | None = None
        self.results: list[dict] = []
        # "auto" becomes what the consumers need (check_transport); an explicit transport stays as given.
        self.transport = request.transport if request.transport != "auto" else "both"

    def run(self) -> list[dict]:
        for step in (
            self.check_transport,
            self.check_version,
            self.check_qgs_config,
            self.check_unit,
            self.check_socket,
            self.check_socket_clients,
            self.check_vsock,
            self.check_qcnl_cache,
            self.check_qcnl,
            self.check_pccs_tls,
            self.check_pccs_answers,
            self.check_pccs_config,
            self.check_pccs_tokens,
            self.check_registration,
        ):
            outcome = step()
            self.results.extend(outcome if isinstance(outcome, list) else [outcome])
        return self.results

    # ------------------------------------------------------------------ QGS

    def check_transport(self) -> dict:
        """Which listener serves which consumer, from the Kata version given (KubeVirt needs the socket in every
        release with TDX attestation, so its version decides nothing)."""
        kata = self.request.kata_version
        try:
            self.transport, notes = resolve_transport(self.request.transport, self.request.consumers, kata)
        except QgsConfigError as exc:
            return result("qgs_transport", FAIL, str(exc), "run the role with tdx_attestation_qgs_transport auto")
        serves = served_consumers(self.transport, self.request.consumers, kata)
        shown = "; ".join(
            f"{'Unix socket ' + QGS_SOCKET if kind == 'unix' else f'vsock port {self.request.vsock_port}'} serves "
            + (", ".join(serves[kind]) or "no consumer")
            for kind in serves
        )
        return result(
            "qgs_transport",
            PASS,
            f"transport {self.transport}: {shown}" + (f" ({'; '.join(notes)})" if notes else ""),
            serves=serves,
        )

    def check_version(self) -> dict:
        wanted = self.request.dcap_version
        try:
            if wanted and wanted != "auto":
                self.version, self.version_source = parse_dcap_version(wanted), "given"
            else:
                found, source = detect_dcap_version(self.reader)
                self.version_source = source
                if found is None:
                    return result("dcap_version", FAIL, source, "set dcap_version (for example '1.26')")
                self.version = parse_dcap_version(found)
        except DcapVersionError as exc:
            return result("dcap_version", FAIL, str(exc), "set dcap_version to the installed DCAP release")
        behaviour = qgs_behaviour(self.version)
        # What the installed release cannot do is a failure, never a PASS of a file it would not act on.
        refusal = behaviour.refusal(self.transport)
        if refusal:
            return result(
                "dcap_version",
                FAIL,
                f"DCAP {self.version} ({self.version_source}): {refusal}",
                "install DCAP 1.26 or later (tdx-qgs), or set transport to what this release serves",
                source=behaviour.source,
            )
        cut = f"values cut at {behaviour.value_cut} characters" if behaviour.value_cut else "values read whole"
        return result(
            "dcap_version",
            PASS,
            f"DCAP {self.version} ({self.version_source}): QGS behaves as {behaviour.era} ({cut})",
            source=behaviour.source,
        )

    def _expected_main(self) -> tuple[str, int | None]:
        return ("vsock", self.request.vsock_port) if self.transport == "vsock" else ("unix", None)

    def check_qgs_config(self) -> dict:
        if self.version and qgs_behaviour(self.version).refusal(self.transport):
            return result(
                "qgs_config",
                FAIL,
                f"DCAP {self.version} cannot serve transport {self.transport} "
                "whatever /etc/qgs.conf says (dcap_version)",
                "see dcap_version",
            )
        read = self.reader.read("etc/qgs.conf", record=False)
        text = read.text() if read.data is not None else None
        if read.problem:
            return result("qgs_config", FAIL, read.problem.describe(), "make /etc/qgs.conf a readable regular file")
        want, port = self._expected_main()
        wanted = "the Unix socket " + QGS_SOCKET if want == "unix" else f"vsock port {port}"
        versions = [self.version] if self.version else [DcapVersion(1, 23), DcapVersion(1, 24), DcapVersion(1, 26)]
        meanings = {qgs_behaviour(v).era: effective_qgs(text, qgs_behaviour(v)) for v in versions}
        wrong = {era: eff for era, eff in meanings.items() if (eff.transport, eff.port) != (want, port)}
        if not wrong:
            shown = next(iter(meanings.values()))
            scope = f"on DCAP {self.version}" if self.version else f"on every DCAP release ({', '.join(ERAS)})"
            return result(
                "qgs_config", PASS, f"/etc/qgs.conf selects {shown.describe()} {scope}", threads=shown.threads
            )
        era, effective = next(iter(wrong.items()))
        fix = (
            "remove every 'port' line from /etc/qgs.conf (from DCAP 1.24 any port line, even 'port = 0', means vsock)"
            if want == "unix"
            else f"write 'port = {port}' in /etc/qgs.conf"
        ) + "; or run the confidential.tee.tdx_attestation role"
        return result(
            "qgs_config",
            FAIL,
            f"consumers need {wanted}, but /etc/qgs.conf makes QGS of DCAP {era} use {effective.describe()}",
            fix,
            meanings={era: eff.describe() for era, eff in meanings.items()},
        )

    def check_unit(self) -> dict:
        merged = merge_unit(self.reader)
        if merged.fragment is None:
            return result("qgs_unit", SKIP, "qgsd.service is not on the systemd search path (dcap_version)")
        # Whether KubeVirt's QEMU reaches the socket is socket_access's to say: an ACL would do as well as our helper.
        problems = unit_problems(merged, self.transport, None, False)
        # On the host itself, systemd's own view of the loaded unit is the truth the merge must agree with.
        shown = systemd_view(min(self.request.timeout, 10.0)) if self.request.probe and self.reader.is_live else None
        differs = disagreement(merged, shown) if shown else None
        if differs:
            problems.append(differs)
        files = ", ".join([merged.fragment, *merged.dropins])
        if problems:
            return result(
                "qgs_unit",
                FAIL,
                f"qgsd.service as systemd merges {files}: " + "; ".join(problems),
                "run the confidential.tee.tdx_attestation role (its drop-in zz-confidential-tee.conf sorts after "
                "Intel's socket.conf), or fix the drop-in named; then systemctl daemon-reload and restart qgsd",
                dropins=merged.dropins,
            )
        return result(
            "qgs_unit",
            PASS,
            f"qgsd.service as systemd merges {files}: UMask {merged.last('UMask') or '0022 (default)'}, "
            f"RuntimeDirectoryMode {merged.last('RuntimeDirectoryMode') or '0755 (default)'}",
            dropins=merged.dropins,
        )

    def check_socket(self) -> dict:
        if self.transport == "vsock":
            return result("qgs_socket", SKIP, "transport is vsock: QGS serves no Unix socket")
        st = self.reader.stat(QGS_SOCKET)
        if not st:
            return result(
                "qgs_socket",
                FAIL,
                f"{QGS_SOCKET} does not exist: qgsd is not running, or listens on vsock",
                "systemctl status qgsd; journalctl -u qgsd; check /etc/qgs.conf (qgs_config above)",
            )
        if not stat.S_ISSOCK(st.st_mode):
            return result("qgs_socket", FAIL, f"{QGS_SOCKET} is not a socket", "remove it and restart qgsd")
        group = self.request.socket_group or default_socket_group(self.request.consumers)
        owner, owning_group = self._name("passwd", st.st_uid), self._name("group", st.st_gid)
        shown = f"mode {stat.S_IMODE(st.st_mode):04o}, owner {owner}, group {owning_group}"
        if self.request.probe and os.geteuid() == 0:
            alive = socket_access.probe_as(self._socket_path(), socket_access.Identity("root", 0, 0, []))
            if alive["connected"] is False:
                return result(
                    "qgs_socket",
                    FAIL,
                    f"{QGS_SOCKET} exists ({shown}) but nothing accepts connections ({alive['errno']}): a stale socket",
                    "systemctl restart qgsd (DCAP 1.26+ removes stale sockets at start)",
                )
        return result("qgs_socket", PASS, f"{QGS_SOCKET} is a live socket ({shown}); expected group {group}")

    def _name(self, database: str, number: int) -> str:
        """``997 (qgsd)``: an id with its name in the host's passwd or group file, when it has one."""
        text = self.reader.read_text(f"etc/{database}", limit=16 * 1024 * 1024, record=False) or ""
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) >= 3 and fields[2] == str(number):
                return f"{number} ({fields[0]})"
        return str(number)

    def _socket_path(self) -> str:
        # Symbolic links (/var/run -> /run) resolve inside host_root, never in the container running the check.
        return self.reader.resolve(QGS_SOCKET)

    def check_socket_clients(self) -> list[dict]:
        if self.transport == "vsock":
            return []
        clients = socket_clients(self.request.consumers, self.request.extra_clients)
        if not self.reader.is_socket(QGS_SOCKET):
            return [result(f"socket_access:{c['name']}", SKIP, "no socket to connect to (qgs_socket)") for c in clients]
        return [self._client_result(client) for client in clients]

    def _client_result(self, client: dict) -> dict:
        who = socket_access.Identity(client["name"], int(client["uid"]), int(client["gid"]), list(client["groups"]))
        link = f"socket_access:{who.name}"
        label = f"{who.name} (uid {who.uid}, gid {who.gid}, groups {who.groups or '[]'})"
        model = socket_access.can_connect(self.reader, QGS_SOCKET, who)
        probe = None
        # A real connect() proves the host's truth only from the host's own root: under a mounted host_root it
        # would also walk the directories above it, which are no part of the host.
        if self.request.probe and self.reader.is_live and (os.geteuid() == 0 or os.geteuid() == who.uid):
            probe = socket_access.probe_as(self._socket_path(), who)
        allowed = probe["connected"] if probe and probe["connected"] is not None else model["allowed"]
        how = "connect() as that user" if probe and probe["connected"] is not None else "the kernel's permission rules"
        if allowed:
            return result(link, PASS, f"{label} can connect to {QGS_SOCKET} ({how}: {model['reason']})")
        group = self.request.socket_group or default_socket_group(self.request.consumers)
        reason = model["reason"] if not model["allowed"] else f"connect() failed: {probe['errno']} {probe['error']}"
        return result(
            link,
            FAIL,
            f"{label} cannot connect to {QGS_SOCKET}: {reason}",
            f"give the socket group {group} and mode 0660 and every directory search permission for it (the role's "
            "qgsd drop-in does this at each start); KubeVirt does not change the socket's permissions",
            model=model,
            probe=probe,
        )

    def check_vsock(self) -> list[dict]:
        if self.transport == "unix":
            return [result("qgs_vsock", SKIP, "transport is unix: no vsock listener is configured")]
        port = self.request.vsock_port
        outcomes = []
        if "kata" in self.request.consumers:
            loaded = self.reader.isdir("sys/module/vsock_loopback")
            outcomes.append(
                result("vsock_loopback", PASS, "vsock_loopback is loaded: host processes reach CID 2")
                if loaded
                else result(
                    "vsock_loopback",
                    FAIL,
                    "vsock_loopback is not loaded: Kata's QEMU cannot reach QGS at vsock CID 2 from the host",
                    "modprobe vsock_loopback and list it in /etc/modules-load.d (role confidential.tee.vsock)",
                )
            )
        if not self.request.probe or not self.reader.is_live:
            outcomes.append(result("qgs_vsock", SKIP, "vsock probing needs the host's own network namespace"))
            return outcomes
        answer = socket_access.probe_vsock(VMADDR_CID_HOST, port, min(self.request.timeout, 3.0))
        if answer["connected"]:
            outcomes.append(result("qgs_vsock", PASS, f"QGS accepts connections on vsock CID 2 port {port}"))
        elif answer["connected"] is None:
            outcomes.append(result("qgs_vsock", SKIP, f"cannot probe vsock here: {answer['error']}"))
        else:
            outcomes.append(
                result(
                    "qgs_vsock",
                    FAIL,
                    f"nothing accepts connections on vsock CID 2 port {port}: {answer['errno']} {answer['error']}",
                    "systemctl status qgsd qgsd-vsock; a port below 1024 needs CAP_NET_BIND_SERVICE",
                )
            )
        return outcomes

    def check_qcnl_cache(self) -> dict:
        st = self.reader.stat(QCNL_CACHE, follow=False)
        if not st:
            return result("qcnl_cache", SKIP, f"/{QCNL_CACHE} does not exist yet (created at the first quote)")
        if not stat.S_ISDIR(st.st_mode) or not st.st_mode & stat.S_IXUSR:
            return result(
                "qcnl_cache",
                FAIL,
                f"/{QCNL_CACHE} has mode {stat.S_IMODE(st.st_mode):04o}: qgsd cannot enter its own collateral cache "
                "(DCAP 1.26's UMask=0117), so every cache write fails",
                f"chmod u+x,g-w /{QCNL_CACHE}; set UMask=0077 for qgsd (the role's drop-in does)",
            )
        return result("qcnl_cache", PASS, f"/{QCNL_CACHE} is usable by its owner (mode {stat.S_IMODE(st.st_mode):04o})")

    # ------------------------------------------------------------------ QCNL and PCCS

    def check_qcnl(self) -> dict:
        rel = self.request.qcnl_path.lstrip("/")
        read = self.reader.read(rel, record=False)
        if read.problem:
            return result("qcnl_config", FAIL, read.problem.describe(), f"make {self.request.qcnl_path} a regular file")
        view = qcnl_effective(read.text() if read.data is not None else None)
        self.qcnl = view["settings"]
        url, secure = self.qcnl["pccs_url"], self.qcnl["use_secure_cert"]
        summary = f"pccs_url {url}, use_secure_cert {str(secure).lower()}"
        if view["problems"]:
            return result(
                "qcnl_config",
                FAIL,
                f"{self.request.qcnl_path}: " + "; ".join(view["problems"]) + f" (QCNL uses {summary})",
                "fix the file (or run the role, which edits it keeping comments) and restart qgsd",
                format=view["format"],
            )
        expected = self.request.expect_pccs_url
        if expected and url != expected:
            return result(
                "qcnl_config",
                FAIL,
                f"pccs_url is {url}, expected {expected}",
                f"set pccs_url to {expected} in {self.request.qcnl_path} and restart qgsd",
            )
        if not url.endswith("/"):
            return result(
                "qcnl_config",
                FAIL,
                f"pccs_url {url} does not end in '/': QCNL appends 'pckcert?...' to it and every request gets 404",
                "add the trailing '/' (https://<pccs>:8081/sgx/certification/v4/)",
            )
        return result("qcnl_config", PASS, f"{self.request.qcnl_path} parses as QCNL reads it: {summary}")

    def _pccs_url(self) -> str | None:
        return self.qcnl["pccs_url"] if self.qcnl else None

    def check_pccs_tls(self) -> dict:
        url = self._pccs_url()
        if not url:
            return result("pccs_tls", SKIP, "no pccs_url (qcnl_config)")
        if not url.startswith("https://"):
            return result("pccs_tls", SKIP, f"{url} is plain HTTP: no certificate to trust")
        cadata, cafile = https_probe.host_ca_bundle(self.reader, self.request.ca_bundle)
        if cadata is None:
            return result("pccs_tls", FAIL, cafile, "install the distribution's CA certificates (ca-certificates)")
        answer = https_probe.request(url + "rootcacrl", True, cadata, self.request.timeout)
        secure = self.qcnl["use_secure_cert"]
        if answer["error_kind"] not in ("certificate", "tls"):
            if answer["error"]:
                return result("pccs_tls", SKIP, f"no TLS handshake with {url}: {answer['error']} (pccs_reachable)")
            advice = "" if secure else "; use_secure_cert could be true"
            return result("pccs_tls", PASS, f"the certificate of {url} is trusted by {cafile}{advice}")
        if not secure:
            return result(
                "pccs_tls",
                PASS,
                f"QCNL accepts the certificate of {url} only because use_secure_cert is false "
                f"({answer['error']} against {cafile}); not for production",
                ca_bundle=cafile,
            )
        return result(
            "pccs_tls",
            FAIL,
            f"QCNL (use_secure_cert true) will refuse {url}: {answer['error']} against {cafile} (curl error 60)",
            "add the PCCS CA certificate to the host's trust store (/usr/local/share/ca-certificates/ then "
            "update-ca-certificates, or /etc/pki/ca-trust/source/anchors/ then update-ca-trust), or serve a "
            "certificate from a trusted CA; use_secure_cert false only for tests",
            ca_bundle=cafile,
        )

    def check_pccs_answers(self) -> dict:
        url = self._pccs_url()
        if not url:
            return result("pccs_reachable", SKIP, "no pccs_url (qcnl_config)")
        secure = bool(self.qcnl["use_secure_cert"])
        cadata, _bundle = https_probe.host_ca_bundle(self.reader, self.request.ca_bundle)
        target = url + "rootcacrl"
        answer = https_probe.request(target, secure, cadata, self.request.timeout)
        if answer["status"] is not None:
            if answer["status"] >= 500:
                return result(
                    "pccs_reachable",
                    FAIL,
                    f"GET {target} answered HTTP {answer['status']}: the PCCS is up but failing",
                    "journalctl -u pccs; check ApiKey and the PCCS database",
                )
            return result("pccs_reachable", PASS, f"GET {target} answered HTTP {answer['status']} as QCNL would ask it")
        if answer["error_kind"] in ("certificate", "tls"):
            return result(
                "pccs_reachable",
                FAIL,
                f"QCNL's TLS handshake with {url} fails: {answer['error']}",
                "see pccs_tls: trust the PCCS CA on this host (or, for tests only, use_secure_cert false)",
            )
        local = "localhost" in url or "127.0.0.1" in url
        fix = (
            "pccs_url still points at this host: point it at your PCCS (https://<pccs>:8081/sgx/certification/v4/)"
            if local and not self.request.pccs_local
            else "start the PCCS (systemctl status pccs) or point pccs_url at one that answers"
        )
        return result("pccs_reachable", FAIL, f"QCNL cannot reach {url}: {answer['error']}", fix)

    def check_pccs_config(self) -> dict:
        if not self.request.pccs_local:
            return result("pccs_config", SKIP, "no PCCS on this host (pccs_local is false)")
        base = self.request.pccs_dir.strip("/")
        default = self.reader.read(f"{base}/config/default.json", limit=1024 * 1024, record=False)
        production = self.reader.read(f"{base}/config/production.json", limit=1024 * 1024, record=False)
        config, problems = effective_config(default.text(), production.text())
        if config is not None:
            problems += config_problems(config)
        for name in overrides_on_host(self.reader, base):
            problems.append(f"config/{name} exists and overrides production.json (node-config merges it later)")
        st = self.reader.stat(f"{base}/config/production.json")
        if st and stat.S_IMODE(st.st_mode) & 0o077:
            problems.append(f"config/production.json is mode {stat.S_IMODE(st.st_mode):04o}: it holds the API key")
        key = self.reader.stat(f"{base}/ssl_key/private.pem")
        if not key:
            problems.append("ssl_key/private.pem is missing: PCCS stops ('The private key or certificate ... missing')")
        elif stat.S_IMODE(key.st_mode) & 0o077:
            problems.append(f"ssl_key/private.pem is mode {stat.S_IMODE(key.st_mode):04o}, readable beyond its owner")
        else:
            problems += self._key_readable(base)
        if not self.reader.exists(f"{base}/ssl_key/file.crt"):
            problems.append("ssl_key/file.crt is missing: PCCS stops")
        self.pccs_config = config
        if problems:
            return result(
                "pccs_config",
                FAIL,
                f"{self.request.pccs_dir}: " + "; ".join(problems),
                "run the role with the PCCS settings (it writes config/production.json, never default.json)",
            )
        return result(
            "pccs_config",
            PASS,
            f"{self.request.pccs_dir} config valid: HTTPS_PORT {config['HTTPS_PORT']}, hosts {config.get('hosts')}, "
            f"CachingFillMode {config['CachingFillMode']}, DB_CONFIG {config['DB_CONFIG']}",
        )

    def _key_readable(self, base: str) -> list[str]:
        """pccs_server.js reads ssl_key/private.pem as the service user (pccs.service User=pccs): can it?"""
        user = self.request.pccs_user
        who = socket_access.host_identity(self.reader, user)
        if who is None:
            return [f"the PCCS service user {user!r} is not in the host's /etc/passwd: pccs.service cannot start"]
        verdict = socket_access.can_read(self.reader, f"/{base}/ssl_key/private.pem", who)
        if verdict["allowed"]:
            return []
        return [
            f"ssl_key/private.pem cannot be read by {user} (uid {who.uid}): {verdict['reason']}; PCCS stops at "
            f"start (give it owner {user}, mode 0600, and search permission on ssl_key/)"
        ]

    def check_pccs_tokens(self) -> dict:
        tokens = {"user": self.request.user_token, "admin": self.request.admin_token}
        if not any(tokens.values()):
            return result("pccs_tokens", SKIP, "no tokens given to compare")
        config = self.pccs_config
        if not config:
            return result("pccs_tokens", SKIP, "no readable PCCS configuration on this host (pccs_config)")
        wrong = [
            name
            for name, token in tokens.items()
            if token and not token_matches(token, config.get(f"{name.capitalize()}TokenHash"))
        ]
        if wrong:
            return result(
                "pccs_tokens",
                FAIL,
                f"{' and '.join(f'{n.capitalize()}TokenHash' for n in wrong)} in the PCCS configuration is not the "
                "SHA-512 of the token given: PCCS answers 401 to it",
                "run the role with the tokens (it writes their SHA-512 to config/production.json) and restart pccs",
            )
        given = " and ".join(name for name, token in tokens.items() if token)
        return result(
            "pccs_tokens", PASS, f"the {given} token hash(es) in the PCCS configuration match the tokens given"
        )

    # ------------------------------------------------------------------ registration

    def check_registration(self) -> dict:
        mode = self.request.registration
        if mode == "none":
            return result("registration", SKIP, "registration is not managed on this host (registration: none)")
        status = registration_status(self.reader.read(STATUS_VARIABLE, limit=4096, record=False).data)
        if status["known"]:
            if status["registration_complete"]:
                return result("registration", PASS, "the MPA reports the platform registered (SgxRegistrationStatus)")
            return result(
                "registration",
                FAIL,
                f"the MPA has not completed registration: {status['error']} (code {status['error_code']:#04x})",
                "journalctl -u mpa_registration_tool; check /etc/mpa_registration.conf (proxy, subscription key)",
            )
        marker = self.reader.read(PCK_MARKER.lstrip("/"), record=False)
        if marker.data is not None:
            return result("registration", PASS, f"registered with the PCK ID retrieval tool: {marker.text().strip()}")
        if mode == "auto":
            return result(
                "registration",
                SKIP,
                f"registration status unknown: {status['reason']} and no {PCK_MARKER} (set registration to mpa or "
                "pck_retrieval to require one)",
            )
        return result(
            "registration",
            FAIL,
            f"registration ({mode}) status unknown: {status['reason']} and no {PCK_MARKER}",
            "run the role with tdx_attestation_registration set on the TDX host itself (it needs the SGX devices)",
        )


def check_chain(request: ChainRequest, host: HostReader) -> list[dict]:
    """Every link of the chain on ``host`` (the module's, from ``open_host``), in order."""
    return Chain(request, host).run()


def summarize(results: list[dict]) -> dict:
    counts = {PASS: 0, FAIL: 0, SKIP: 0}
    for item in results:
        counts[item["status"]] += 1
    return {"pass": counts[PASS], "fail": counts[FAIL], "skip": counts[SKIP], "ok": counts[FAIL] == 0}


def report_lines(results: list[dict]) -> list[str]:
    lines = []
    for item in results:
        lines.append(f"{item['status']} {item['name']}: {item['message']}")
        if item["fix"] and item["status"] == FAIL:
            lines.append(f"     fix: {item['fix']}")
    return lines
