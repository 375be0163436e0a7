# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""``/etc/sgx_default_qcnl.conf`` as QCNL reads it, and edits that keep the administrator's comments.

Follows ``QuoteGeneration/qcnl/qcnl_config.cpp`` and ``linux/qcnl_config_impl.cpp`` (intel/
confidential-computing.tee.dcap): the file is parsed as JSON with comments; a value of the wrong JSON type is
silently ignored (the default stays); a ``tcb_update_type`` other than ``early``/``standard`` or a file that is
not valid JSON makes QCNL fall back to its legacy ``KEY=VALUE`` reader, which finds nothing in a JSON file and
leaves every default in place, ``pccs_url`` ``https://localhost:8081/sgx/certification/v4/`` included.
QCNL appends ``pckcert?...`` to ``pccs_url`` as is, so the URL must end with ``/``.

Standard library only.
"""

from __future__ import annotations

from ansible_collections.confidential.tee.plugins.module_utils.attestation import jsonc
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

QCNL_PATH = "/etc/sgx_default_qcnl.conf"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
CACHE_MAX_EXPIRY_HOURS = 2160

DEFAULTS = {
    "pccs_url": "https://localhost:8081/sgx/certification/v4/",
    "use_secure_cert": True,
    "collateral_service": None,
    "pccs_api_version": "3.0",
    "retry_times": 0,
    "retry_delay": 0,
    "local_pck_url": "",
    "pck_cache_expire_hours": 0,
    "verify_collateral_cache_expire_hours": 0,
    "local_cache_only": False,
    "tcb_update_type": "standard",
    "custom_request_options": None,
}

# RapidJSON type tests QCNL applies before it takes a value (anything else is ignored).
_TYPES = {
    "pccs_url": "string",
    "use_secure_cert": "bool",
    "collateral_service": "string",
    "pccs_api_version": "string",
    "retry_times": "int",
    "retry_delay": "int",
    "local_pck_url": "string",
    "pck_cache_expire_hours": "number",
    "verify_collateral_cache_expire_hours": "number",
    "local_cache_only": "bool",
    "tcb_update_type": "string",
    "custom_request_options": "object",
}
SETTINGS = tuple(_TYPES)

_LEGACY = {
    "PCCS_URL": "pccs_url",
    "COLLATERAL_SERVICE": "collateral_service",
    "PCCS_API_VERSION": "pccs_api_version",
    "RETRY_TIMES": "retry_times",
    "RETRY_DELAY": "retry_delay",
    "LOCAL_PCK_URL": "local_pck_url",
    "PCK_CACHE_EXPIRE_HOURS": "pck_cache_expire_hours",
    "VERIFY_COLLATERAL_CACHE_EXPIRE_HOURS": "verify_collateral_cache_expire_hours",
}


class QcnlConfigError(TeeError):
    """A QCNL setting QCNL would ignore or misread."""


def _type_ok(kind: str, value: object) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, dict)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind == "int":
        return isinstance(value, int) and INT32_MIN <= value <= INT32_MAX
    # "number": qcnl_config.cpp (DCAP 1.15 to 1.25 alike) takes it only when RapidJSON's IsDouble() or IsInt():
    # an integer outside int32 is neither (RapidJSON stores it as int64/uint64) and is ignored.
    return isinstance(value, float) or INT32_MIN <= value <= INT32_MAX


def qcnl_effective(text: str | None) -> dict:
    """``{"settings": what QCNL uses, "format": json|legacy|missing, "problems": [...]}``."""
    settings = dict(DEFAULTS)
    problems: list[str] = []
    if text is None:
        problems.append(f"{QCNL_PATH} is missing: QCNL uses its defaults (pccs_url {DEFAULTS['pccs_url']})")
        return {"settings": _finish(settings), "format": "missing", "problems": problems}
    try:
        doc = jsonc.parse(text)
    except jsonc.JsoncError as exc:
        problems.append(
            f"not valid JSON ({exc}): QCNL falls back to its legacy KEY=VALUE reader"
            + (" and, for a JSON file, to its defaults" if text.lstrip().startswith("{") else "")
        )
        settings.update(_legacy(text))
        return {"settings": _finish(settings), "format": "legacy", "problems": problems}
    values = doc.first()
    for key in doc.duplicates():
        problems.append(f"{key!r} appears more than once: QCNL uses the first, other tools the last")
    for key, kind in _TYPES.items():
        if key not in values:
            continue
        if _type_ok(kind, values[key]):
            settings[key] = values[key]
        else:
            problems.append(f"{key} = {values[key]!r} is ignored by QCNL (it must be a JSON {kind})")
    if settings["pccs_url"] == "":
        problems.append("pccs_url is empty: every collateral request fails")
    tcb = settings["tcb_update_type"]
    if isinstance(tcb, str) and tcb.lower() not in ("early", "standard"):
        problems.append(
            f"tcb_update_type {tcb!r} is not early or standard: QCNL rejects the JSON file and falls back to its "
            f"defaults (pccs_url {DEFAULTS['pccs_url']})"
        )
        fallback = dict(DEFAULTS)
        fallback.update(_legacy(text))
        return {"settings": _finish(fallback), "format": "legacy", "problems": problems}
    settings["tcb_update_type"] = tcb.lower()
    return {"settings": _finish(settings), "format": "json", "problems": problems}


def _finish(settings: dict) -> dict:
    for key in ("pck_cache_expire_hours", "verify_collateral_cache_expire_hours"):
        settings[key] = min(settings[key], CACHE_MAX_EXPIRY_HOURS)
    if settings["collateral_service"] is None:
        settings["collateral_service"] = settings["pccs_url"]
    return settings


def _legacy(text: str) -> dict:
    """QcnlConfigLegacy::load_config: whitespace removed, ``#`` comments, ``NAME=value`` (upper-case names)."""
    found: dict = {}
    for raw in text.split("\n"):
        line = "".join(raw.split())
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _equals, value = line.partition("=")
        if name == "USE_SECURE_CERT" and value in ("FALSE", "false"):
            found["use_secure_cert"] = False
        elif name == "LOCAL_CACHE_ONLY" and value in ("TRUE", "true"):
            found["local_cache_only"] = True
        elif name in _LEGACY:
            key = _LEGACY[name]
            if _TYPES[key] in ("int", "number"):
                digits = _leading_int(value)
                if digits is not None:
                    found[key] = digits
            else:
                found[key] = value
    return found


def _leading_int(value: str) -> int | None:
    """``std::stoi``: an optional sign and digits at the start, the rest ignored."""
    sign = -1 if value[:1] == "-" else 1
    body = value[1:] if value[:1] in "+-" else value
    digits = ""
    for ch in body:
        if not ch.isdigit():
            break
        digits += ch
    return sign * int(digits) if digits else None


def check_settings(settings: dict) -> None:
    """Refuse a setting QCNL would ignore or misread, naming it and saying what it must be."""
    for key, value in settings.items():
        if key not in _TYPES:
            raise QcnlConfigError(
                f"unknown QCNL setting {key!r}; QCNL reads {', '.join(SETTINGS)}", option=f"settings.{key}"
            )
        if value is None:
            continue
        if not _type_ok(_TYPES[key], value):
            limit = " within int32 (RapidJSON IsInt), or a decimal number" if _TYPES[key] == "number" else ""
            raise QcnlConfigError(
                f"QCNL setting {key} must be a JSON {_TYPES[key]}{limit}, got {value!r}: QCNL would ignore it and keep "
                "its default",
                option=f"settings.{key}",
            )
    if settings.get("pccs_url") == "":
        raise QcnlConfigError(
            "QCNL setting pccs_url is empty: QCNL would send every collateral request to an empty URL and every "
            "quote would fail; give the PCCS URL (https://<pccs>:8081/sgx/certification/v4/)",
            option="settings.pccs_url",
        )
    for key in ("pccs_url", "collateral_service", "local_pck_url"):
        url = settings.get(key)
        if url and not (url.startswith(("https://", "http://")) and url.endswith("/")):
            raise QcnlConfigError(
                f"QCNL setting {key} {url!r} must be an http(s) URL ending in '/': QCNL appends 'pckcert?...' to it",
                option=f"settings.{key}",
            )
    tcb = settings.get("tcb_update_type")
    if tcb is not None and tcb.lower() not in ("early", "standard"):
        raise QcnlConfigError(
            f"tcb_update_type must be early or standard, got {tcb!r}", option="settings.tcb_update_type"
        )
    version = settings.get("pccs_api_version")
    if version is not None and version not in ("3.0", "3.1"):
        raise QcnlConfigError(
            f"pccs_api_version must be '3.0' or '3.1', got {version!r}", option="settings.pccs_api_version"
        )


def qcnl_warnings(settings: dict) -> list[str]:
    """What QCNL accepts but no production host should run with (effective settings)."""
    if settings.get("use_secure_cert") is False:
        return [
            f"use_secure_cert is false: QCNL accepts any certificate from {settings.get('pccs_url')} (curl without "
            "peer or host verification), so anyone on the path can serve PCK collateral; trust the PCCS CA instead "
            "(tdx_attestation_pccs_trust_ca) and keep tdx_attestation_qcnl_use_secure_cert true outside tests"
        ]
    return []


def update_qcnl(text: str | None, settings: dict) -> str:
    """The file with ``settings`` applied (``None`` removes a key); comments and other keys are kept.

    A missing file is created; a file that does not parse raises :class:`jsonc.JsoncError` (never replaced
    silently).
    """
    check_settings(settings)
    if text is None or not text.strip():
        text = (
            "{\n    // Managed by confidential.tee.tdx_attestation: JSON with comments, read by QCNL "
            "(qcnl_config.cpp).\n}\n"
        )
    jsonc.parse(text)
    for key in SETTINGS:
        if key not in settings:
            continue
        value = settings[key]
        text = jsonc.remove_member(text, key) if value is None else jsonc.set_member(text, key, value)
    return text
