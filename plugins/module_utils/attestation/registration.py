# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Platform registration: the MPA's ``/etc/mpa_registration.conf`` and the registration status it leaves.

Follows ``tools/SGXPlatformRegistration`` of intel/confidential-computing.tee.dcap:
``src/agent/src/AgentConfiguration.cpp`` matches each line, case-insensitively, against one of
``subscription key = <32 hex digits>``, ``proxy type = default|direct|manual``, ``proxy url = <url>``,
``uefi path = <dir>/`` and ``log level = none|error|warn|info|debug`` (``#`` starts a comment); any other
line is a format error. The agent records its outcome in the UEFI variable
``SgxRegistrationStatus-f236c5dc-a491-4bbe-bcdd-88885770df45`` (``src/common/inc/UefiVar.h``): after the 4-byte
efivarfs attribute word, a packed ``{u16 version; u16 size; u16 status; u8 errorCode}`` where status bit 0 is
"registration complete" and bit 1 "package info complete" (``src/uefi/src/MPUefi.cpp``).

Standard library only.
"""

from __future__ import annotations

import re
import struct

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import keyvalue
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

MPA_CONF = "/etc/mpa_registration.conf"
STATUS_VARIABLE = "sys/firmware/efi/efivars/SgxRegistrationStatus-f236c5dc-a491-4bbe-bcdd-88885770df45"
PCK_MARKER = "/var/lib/confidential-tee/pck-registration"

_KEYS = {
    "subscription_key": r"subscription key",
    "proxy_type": r"proxy[[:blank:]]*type",
    "proxy_url": r"proxy[[:blank:]]*url",
    "uefi_path": r"uefi[[:blank:]]*path",
    "log_level": r"log level",
}
_LINE = {
    "subscription_key": r"^[ \t]*subscription key[ \t]*=[ \t]*([0-9a-fA-F]{32})[ \t]*(#.*)?$",
    "proxy_type": r"^[ \t]*proxy[ \t]*type[ \t]*=[ \t]*([^ \t]+)[ \t]*(#.*)?$",
    "proxy_url": r"^[ \t]*proxy[ \t]*url[ \t]*=[ \t]*([^ \t]*)[ \t]*(#.*)?$",
    "uefi_path": r"^[ \t]*uefi[ \t]*path[ \t]*=[ \t]*(/(.*/)?)[ \t]*(#.*)?$",
    "log_level": r"^[ \t]*log level[ \t]*=[ \t]*([a-z]*)[ \t]*(#.*)?$",
}
_MATCHERS = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in _LINE.items()}
_KEY_START = {
    name: re.compile(r"^[ \t]*" + pattern.replace("[[:blank:]]", "[ \t]") + r"[ \t]*=", re.IGNORECASE)
    for name, pattern in _KEYS.items()
}
# Any line that may hold the subscription key, however it is spaced, cased or spelled (subscription_key too).
_ANY_KEY_LINE = re.compile(r"^[ \t]*subscription[ \t_-]*key", re.IGNORECASE)
# A key worth naming in a message: a few words of letters, as every MPA setting is.
_READABLE_NAME = re.compile(r"^[A-Za-z_ ]{1,24}\Z")
PROXY_TYPES = ("default", "direct", "manual")
LOG_LEVELS = ("none", "error", "warn", "info", "debug")

# RegistrationErrorCode in include/MultiPackageDefs.h.
ERROR_CODES = {
    0x00: "success",
    0x80: "unexpected agent error",
    0x81: "agent out of memory",
    0x82: "network error (proxy detection or communication): check proxy type/url",
    0x83: "invalid parameter",
    0x84: "registration server internal error",
    0x85: "registration server timeout",
    0x86: "BIOS protocol error",
    0x87: "unauthorized at the registration server: check the subscription key",
    0xA0: "registration server: malformed request",
    0xA1: "registration server: request meant for another registration server",
    0xA2: "registration server: invalid or revoked processor package",
    0xA3: "registration server: processor package not found",
    0xA4: "registration server: incompatible processor packages",
    0xA5: "registration server: invalid platform manifest",
    0xA6: "registration server: platform instance not found",
    0xA7: "registration server: invalid add-package request",
    0xA8: "registration server: unknown error",
}


class MpaConfigError(TeeError):
    """A setting the MPA would reject or misread."""


def parse_mpa_conf(text: str) -> dict:
    """``{"settings": {...}, "invalid_lines": [(number, line)]}`` as the agent reads the file."""
    settings: dict = {}
    invalid = []
    for number, line in enumerate(text.split("\n"), start=1):
        if re.match(r"^[ \t]*(#|$)", line):
            continue
        for name, matcher in _MATCHERS.items():
            match = matcher.match(line)
            if match:
                settings[name] = _read_value(name, match.group(1))
                break
        else:
            invalid.append((number, _line_name(line)))
    return {"settings": settings, "invalid_lines": invalid}


def _line_name(line: str) -> str:
    """How a rejected line is quoted: its key when it reads as one, never its value (the subscription key, or a
    proxy URL with credentials, however the line is spelled)."""
    name, equals, _value = line.partition("=")
    name = " ".join(name.split())
    if equals and _READABLE_NAME.match(name):
        return f"{name} = <redacted>"
    return "<a line without a setting name, redacted>"


def _read_value(name: str, value: str) -> str:
    if name in ("proxy_type", "log_level"):
        names = PROXY_TYPES if name == "proxy_type" else LOG_LEVELS
        # strncasecmp(name, value, len(value)): a prefix selects the first name it starts (an empty one, the first).
        for known in names:
            if known[: len(value)].lower() == value.lower() and len(value) <= len(known):
                return known
        return "direct" if name == "proxy_type" else "info"
    return value


def check_mpa_settings(settings: dict) -> None:
    for key, value in settings.items():
        if key not in _LINE:
            raise MpaConfigError(
                f"unknown MPA setting {key!r}; the agent reads {', '.join(_LINE)}", option=f"settings.{key}"
            )
        if value is None:
            continue
        if not isinstance(value, str):
            raise MpaConfigError(
                f"MPA setting {key} must be a string, got {type(value).__name__}", option=f"settings.{key}"
            )
        line = _render_line(key, value)
        if not _MATCHERS[key].match(line):
            # The value is not repeated: it may be the subscription key or a proxy URL with credentials.
            raise MpaConfigError(
                f"MPA setting {key} is not a value the agent accepts ({_hint(key)})", option=f"settings.{key}"
            )
        if key in ("proxy_type", "log_level") and value.lower() not in (PROXY_TYPES + LOG_LEVELS):
            raise MpaConfigError(
                f"MPA setting {key} must be one of {_hint(key)}, got {value!r}", option=f"settings.{key}"
            )


def _hint(key: str) -> str:
    return {
        "subscription_key": "32 hex digits",
        "proxy_type": "default, direct or manual",
        "proxy_url": "a URL without blanks",
        "uefi_path": "an absolute directory ending in '/'",
        "log_level": "none, error, warn, info or debug",
    }[key]


def _render_line(key: str, value: str) -> str:
    # A line break, '#' or blank in a value is refused naming the setting: it cannot add a second setting.
    return keyvalue.line(key.replace("_", " "), value, key)


def update_mpa_conf(text: str | None, settings: dict) -> str:
    """The file with ``settings`` set (``None`` comments a setting out); comments and other lines kept."""
    check_mpa_settings(settings)
    lines = (text or "# Managed by confidential.tee.tdx_attestation (MPA registration agent settings).\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for key in _LINE:
        if key not in settings:
            continue
        value = settings[key]
        positions = [i for i, line in enumerate(lines) if _KEY_START[key].match(line)]
        new = None if value is None else _render_line(key, value)
        if positions:
            lines[positions[0]] = new if new is not None else "#" + lines[positions[0]].lstrip()
            for extra in reversed(positions[1:]):
                del lines[extra]
        elif new is not None:
            lines.append(new)
    return "\n".join(lines) + "\n"


def redact_mpa(text: str) -> str:
    return "\n".join(
        re.sub(r"=.*", "= <redacted>", line) if _ANY_KEY_LINE.match(line) else line for line in text.split("\n")
    )


def registration_status(data: bytes | None) -> dict:
    """Decode ``SgxRegistrationStatus`` from efivarfs bytes (attributes + packed structure)."""
    if data is None:
        return {"known": False, "reason": "no SgxRegistrationStatus UEFI variable"}
    if len(data) != 4 + 7:
        return {"known": False, "reason": f"SgxRegistrationStatus has {len(data)} bytes, not the 11 the MPA writes"}
    _attributes, version, size, status, error = struct.unpack("<IHHHB", data)
    return {
        "known": True,
        "version": version,
        "size": size,
        "registration_complete": bool(status & 0x1),
        "package_info_complete": bool(status & 0x2),
        "error_code": error,
        "error": ERROR_CODES.get(error, f"unknown error code {error:#04x}"),
    }
