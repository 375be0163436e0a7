# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""PCCS's configuration: ``config/production.json`` written over the package's ``config/default.json``.

Follows intel/confidential-computing.tee.dcap.pccs (``service/``): ``pccs.service`` runs
``node pccs_server.js`` as user ``pccs`` in ``/opt/intel/sgx-dcap-pccs`` with ``NODE_ENV=production``, so
node-config merges ``config/default.json`` (a package conffile: never edited here) with
``config/production.json`` (objects merged key by key, everything else replaced). ``middleware/auth.js``
compares the SHA-512 of the ``user-token``/``admin-token`` header with ``UserTokenHash``/``AdminTokenHash``
(128 hex digits); ``pccs_server.js`` serves HTTPS with ``ssl_key/private.pem`` and ``ssl_key/file.crt``;
``apputil.js`` accepts only PCS API v3 or v4 in ``uri``.

Standard library only.
"""

from __future__ import annotations

import hashlib
import re

from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

PCCS_DIR = "/opt/intel/sgx-dcap-pccs"
CACHING_MODES = ("LAZY", "REQ", "OFFLINE")
LOG_LEVELS = ("error", "warn", "info", "http", "verbose", "debug", "silly")
SECRET_PATHS = [("ApiKey",), ("UserTokenHash",), ("AdminTokenHash",), ("mysql", "password")]
_HEX128 = re.compile(r"^[0-9a-fA-F]{128}\Z")
_API_VERSION = re.compile(r"/v([1-9][0-9]*)/")
# node-config 3.3 (lib/config.js, loadFileConfigs): for each base name in turn -- default, {NODE_ENV},
# {short hostname}, {short hostname}-{NODE_ENV}, {full hostname}, {full hostname}-{NODE_ENV}, local,
# local-{NODE_ENV} (the -{NODE_APP_INSTANCE} forms only when that variable is set, which pccs.service does not) --
# every extension in this order, each file merged over the ones before. pccs.service sets NODE_ENV=production.
NODE_CONFIG_EXTENSIONS = (
    "js", "cjs", "ts", "json", "jsonc", "json5", "hjson", "toml", "coffee", "iced", "yaml", "yml", "cson",
    "properties", "xml", "boolean", "number",
)  # fmt: skip

_TYPES = {
    "HTTPS_PORT": int,
    "hosts": str,
    "uri": str,
    "proxy": str,
    "RefreshSchedule": str,
    "CachingFillMode": str,
    "LogLevel": str,
    "DB_CONFIG": str,
    "sqlite": dict,
    "mysql": dict,
    "MaxRequestBodySize": str,
    "HeadersTimeoutSeconds": int,
    "RequestTimeoutSeconds": int,
    "KeepAliveTimeoutSeconds": int,
    "OPENSSL_FIPS_MODE": bool,
}
SETTINGS = tuple(_TYPES)


class PccsConfigError(TeeError):
    """A PCCS setting PCCS would refuse or misread."""


def token_hash(token: str) -> str:
    """SHA-512 hex of a token, as PCCS's install.sh writes it (``echo -n token | sha512sum``)."""
    return hashlib.sha512(token.encode("utf-8")).hexdigest()


def _node_hex(text: str) -> bytes:
    """``Buffer.from(text, 'hex')``: pairs of hex digits up to the first pair that is not one."""
    out = bytearray()
    for i in range(0, len(text) - 1, 2):
        pair = text[i : i + 2]
        if not all(ch in "0123456789abcdefABCDEF" for ch in pair):
            break
        out.append(int(pair, 16))
    return bytes(out)


def token_matches(token: str, configured_hash: object) -> bool:
    """Whether PCCS's auth.js would accept ``token`` against ``configured_hash``."""
    if not isinstance(configured_hash, str):
        return False
    expected = _node_hex(configured_hash)
    return len(expected) == 64 and hashlib.sha512(token.encode("utf-8")).digest() == expected


def merge(base: object, override: object) -> object:
    """node-config's deep merge: objects key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = merge(base.get(key), value) if key in base else value
        return merged
    return override


def _check_types(settings: dict) -> None:
    for key, value in settings.items():
        if key not in _TYPES:
            raise PccsConfigError(
                f"unknown PCCS setting {key!r}; this role writes {', '.join(SETTINGS)}", option=f"settings.{key}"
            )
        if value is None:
            continue
        wanted = _TYPES[key]
        if (isinstance(value, bool) and wanted is not bool) or not isinstance(value, wanted):
            raise PccsConfigError(
                f"PCCS setting {key} must be a {wanted.__name__}, got {value!r}", option=f"settings.{key}"
            )


def config_problems(config: dict) -> list[str]:
    """Everything in an effective PCCS configuration that stops PCCS or breaks its clients."""
    problems = []
    port = config.get("HTTPS_PORT")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(f"HTTPS_PORT must be a port number 1..65535, got {port!r}")
    uri = config.get("uri")
    version = _API_VERSION.search(uri) if isinstance(uri, str) else None
    if not version or version.group(1) not in ("3", "4"):
        problems.append(f"uri {uri!r} must name Intel PCS API v3 or v4 (…/sgx/certification/v4/): PCCS stops otherwise")
    mode = config.get("CachingFillMode")
    if mode not in CACHING_MODES:
        problems.append(f"CachingFillMode {mode!r} must be one of {', '.join(CACHING_MODES)}: PCCS stops otherwise")
    database = config.get("DB_CONFIG")
    if database not in ("sqlite", "mysql"):
        problems.append(f"DB_CONFIG {database!r} must be sqlite or mysql")
    elif not isinstance(config.get(database), dict):
        problems.append(f"DB_CONFIG is {database} but the {database!r} block is missing")
    elif database == "mysql":
        missing = [key for key in ("database", "username", "password", "options") if key not in config["mysql"]]
        if missing:
            problems.append(f"the mysql block lacks {', '.join(missing)}")
    for key in ("UserTokenHash", "AdminTokenHash"):
        if not isinstance(config.get(key), str) or not _HEX128.match(config[key]):
            problems.append(
                f"{key} is not 128 hex digits (the SHA-512 of the token): every {key[:-9].lower()} call fails"
            )
    listen = listen_problem(config.get("hosts"))
    if listen:
        problems.append(listen)
    level = config.get("LogLevel", "info")
    if level not in LOG_LEVELS:
        problems.append(f"LogLevel {level!r} is not one of {', '.join(LOG_LEVELS)}")
    if config.get("CachingFillMode") in ("LAZY", "REQ") and not config.get("ApiKey"):
        problems.append("ApiKey is empty: in LAZY and REQ mode PCCS fetches from Intel PCS, which needs the API key")
    return problems


def overriding_files(names: list[str], hostname: str | None, deployment: str = "production") -> list[str]:
    """The files of ``config/`` (``names``) node-config merges *after* ``{deployment}.json``, in its load order.

    ``hostname``: the host's name as ``os.hostname()`` gives it to PCCS (``None`` when unknown: then every file
    whose base name could be a host name is listed too, since it may be this host's)."""
    later = [deployment]
    if hostname:
        short = hostname.split(".")[0]
        later += [short, f"{short}-{deployment}"]
        if hostname != short:
            later += [hostname, f"{hostname}-{deployment}"]
    later += ["local", f"local-{deployment}"]
    after_json = NODE_CONFIG_EXTENSIONS.index("json") + 1
    found = []
    for base in later:
        extensions = NODE_CONFIG_EXTENSIONS[after_json:] if base == deployment else NODE_CONFIG_EXTENSIONS
        found += [f"{base}.{ext}" for ext in extensions if f"{base}.{ext}" in names]
    if hostname is None:
        known = {"default", deployment, "local", f"local-{deployment}", "custom-environment-variables"}
        for name in sorted(names):
            base, _dot, ext = name.rpartition(".")
            if ext in NODE_CONFIG_EXTENSIONS and base and base not in known and not base.startswith("default-"):
                found.append(name)
    return found


def overrides_on_host(reader, base: str) -> list[str]:
    """The files in the PCCS ``config/`` under ``base`` that node-config merges after ``production.json``."""
    names = reader.listdir(f"{base}/config".strip("/")) or []
    # os.hostname() is the kernel's nodename, which /etc/hostname sets at boot (None: unknown, see above).
    hostname = (reader.read_text("etc/hostname", limit=4096, record=False) or "").strip() or None
    return overriding_files(names, hostname)


def listen_problem(hosts: object) -> str | None:
    """Why PCCS's ``hosts`` would not mean one listening address, or ``None``.

    pccs_server.js passes it to ``https.Server.listen(port, hosts)``; Node's ``net.Server.listen`` treats an empty
    (falsy) host as no host and listens on every interface (``::`` or ``0.0.0.0``), the opposite of a private
    PCCS."""
    if hosts is None:
        return None
    if not isinstance(hosts, str) or not hosts.strip():
        return (
            f"hosts {hosts!r} makes Node listen on every interface (net.Server.listen with an empty host); "
            "set tdx_attestation_pccs_listen to 127.0.0.1, or to 0.0.0.0 if every interface is really meant"
        )
    return None


def render_settings(settings: dict, secrets: dict) -> dict:
    """Top-level production.json members from role settings and secrets (tokens hashed, never stored)."""
    _check_types(settings)
    members = {key: value for key, value in settings.items() if value is not None}
    if secrets.get("api_key") is not None:
        members["ApiKey"] = secrets["api_key"]
    if secrets.get("user_token"):
        members["UserTokenHash"] = token_hash(secrets["user_token"])
    if secrets.get("admin_token"):
        members["AdminTokenHash"] = token_hash(secrets["admin_token"])
    if secrets.get("db_password") is not None:
        if not isinstance(members.get("mysql"), dict):
            raise PccsConfigError(
                "a database password needs the mysql block (DB_CONFIG: mysql)", option="secrets.db_password"
            )
        members["mysql"] = dict(members["mysql"], password=secrets["db_password"])
    return members


def update_production(text: str | None, members: dict) -> str:
    """production.json with ``members`` set; the administrator's other keys and comments stay."""
    if text is None or not text.strip():
        text = (
            "{\n    // Managed by confidential.tee.tdx_attestation: overrides config/default.json "
            "(NODE_ENV=production).\n}\n"
        )
    jsonc.parse(text, trailing_commas=True)
    for key in sorted(members):
        text = jsonc.set_member(text, key, members[key], trailing_commas=True)
    return text


def effective_config(default_text: str | None, production_text: str | None) -> tuple[dict | None, list[str]]:
    """``(merged configuration, problems)`` as node-config builds it (last duplicate wins, as in JSON5)."""
    problems: list[str] = []
    layers = []
    for name, text in (("config/default.json", default_text), ("config/production.json", production_text)):
        if text is None:
            if name.endswith("default.json"):
                problems.append(f"{name} is missing: the sgx-dcap-pccs package is not installed")
            continue
        try:
            layers.append(jsonc.parse(text, trailing_commas=True).last())
        except jsonc.JsoncError as exc:
            problems.append(f"{name} does not parse ({exc}): PCCS stops at start")
            return None, problems
    config: dict = {}
    for layer in layers:
        config = merge(config, layer)
    return config, problems
