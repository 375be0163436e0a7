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
# node-config also reads these after production.json: they would silently override what the role writes.
OVERRIDING_FILES = ("local.json", "local-production.json", "production.json5", "local.json5")

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
            raise PccsConfigError(f"unknown PCCS setting {key!r}; this role writes {', '.join(SETTINGS)}")
        if value is None:
            continue
        wanted = _TYPES[key]
        if (isinstance(value, bool) and wanted is not bool) or not isinstance(value, wanted):
            raise PccsConfigError(f"PCCS setting {key} must be a {wanted.__name__}, got {value!r}")


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
    level = config.get("LogLevel", "info")
    if level not in LOG_LEVELS:
        problems.append(f"LogLevel {level!r} is not one of {', '.join(LOG_LEVELS)}")
    if config.get("CachingFillMode") in ("LAZY", "REQ") and not config.get("ApiKey"):
        problems.append("ApiKey is empty: in LAZY and REQ mode PCCS fetches from Intel PCS, which needs the API key")
    return problems


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
            raise PccsConfigError("a database password needs the mysql block (DB_CONFIG: mysql)")
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
