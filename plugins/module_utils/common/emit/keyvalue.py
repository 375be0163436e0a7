# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""``key = value`` lines for the DCAP daemons' files (``/etc/qgs.conf``, ``/etc/mpa_registration.conf``).

Both readers are line based: QGS (``QuoteGeneration/quote_wrapper/qgs/server_main.cpp``) drops every
whitespace character of a line and skips lines starting with ``#``; the MPA
(``tools/SGXPlatformRegistration/src/agent/src/AgentConfiguration.cpp``) trims blanks around the value, ends it at
a blank and reads ``#`` as the start of a comment. :func:`parse` is the rule both agree on: one setting a line,
split at the first ``=``, blanks trimmed, ``#`` comments and blank lines skipped. A value is written only when
it reads back identically through :func:`parse` *and* through both daemons, so it may hold no whitespace
(QGS would drop it, the MPA would stop at it), no ``#`` and no control character: none can add a line or a
setting.

Standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import (
    EmitError,
    control_characters,
    describe,
    refuse,
)

# Lower-case words separated by single spaces: "port", "number_threads", "proxy url".
_KEY = re.compile(r"[a-z][a-z0-9_]*( [a-z][a-z0-9_]*)*\Z")


def line(key: str, value: object, name: str) -> str:
    """``key = value``, or :class:`EmitError` naming ``name`` when the value would not read back."""
    if not _KEY.match(key):
        raise EmitError("%r is not a key these files use" % key)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise refuse(name, "must be a string or an integer, got %s" % type(value).__name__)
    text = str(value)
    bad = control_characters(text)
    if bad:
        raise refuse(name, "holds control characters (%s): a line break would add a setting" % describe(bad))
    if "#" in text:
        raise refuse(name, "holds '#', which starts a comment in this file")
    if any(ch.isspace() for ch in text):
        raise refuse(name, "holds blanks, which the daemon drops or stops at")
    rendered = "%s = %s" % (key, text)
    if parse(rendered) != [(key, text)]:  # pragma: no cover - the checks above make this unreachable
        raise refuse(name, "would not read back as written")
    return rendered


def parse(text: str) -> list[tuple[str, str]]:
    """``(key, value)`` pairs as the readers' common line rule sees ``text``."""
    pairs = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or "=" not in stripped:
            continue
        key, _equals, rest = stripped.partition("=")
        pairs.append((key.strip(), rest.split("#", 1)[0].strip()))
    return pairs


# QGS's own line rule (QuoteGeneration/quote_wrapper/qgs/server_main.cpp, every release 1.14 to 1.27): every
# isspace() character of a line is removed first, a line then empty or starting with '#' is skipped, a line
# without '=' is skipped, the name is what precedes the first '='. ``po rt = 1`` is a port line to QGS.
_QGS_BLANKS = " \t\n\v\f\r"


def qgs_name(raw: str) -> str | None:
    """The setting name QGS sees on one line, or ``None`` for a line QGS skips (comment, blank, no '=')."""
    squeezed = "".join(ch for ch in raw if ch not in _QGS_BLANKS)
    if not squeezed or squeezed.startswith("#") or "=" not in squeezed:
        return None
    return squeezed.partition("=")[0]


def qgs_edit(text: str, settings: dict, names: dict) -> str:
    """``text`` (an existing qgs.conf) with only the keys of ``settings`` changed, every other line kept as is.

    ``settings`` maps a key QGS reads to its value, or to ``None`` to remove every line QGS reads as that key.
    A key's first line is replaced in place and its other lines removed (one line per key: no release can then
    pick a different one, whether it keeps the first nonzero or the last); a key without a line is appended.
    ``names`` maps each key to the variable named when its value is refused (see :func:`line`)."""
    rendered = {key: None if value is None else line(key, value, names[key]) for key, value in settings.items()}
    lines = text.split("\n")
    trailing = lines[-1] == ""
    if trailing:
        lines.pop()
    out: list[str] = []
    placed: set[str] = set()
    for raw in lines:
        name = qgs_name(raw)
        if name not in rendered:
            out.append(raw)
        elif name not in placed:
            placed.add(name)
            if rendered[name] is not None:
                out.append(rendered[name])
    out += [rendered[key] for key in settings if key not in placed and rendered[key] is not None]
    return "\n".join(out) + ("\n" if trailing else "")


# PCKIDRetrievalTool's network_setting.conf (intel/confidential-computing.tee.dcap,
# tools/PCKRetrievalTool/App/linux/network_wrapper.cpp, process_configuration_setting): each line has every
# isspace() character removed, a line starting with '#' is skipped, the name before the first '=' is compared
# upper-cased, and the value is the rest of the line as it stands ('=' and '#' included).
_PCK_KEYS = ("PCCS_URL", "USE_SECURE_CERT", "PROXY_TYPE", "PROXY_URL", "USER_TOKEN", "TCB_UPDATE_TYPE")


def pck_setting(key: str, value: object, name: str) -> str:
    """One ``KEY=value`` line of ``network_setting.conf``, or :class:`EmitError` naming ``name``.

    The value is never repeated in the message: it may be the PCCS user token."""
    if key.upper() not in _PCK_KEYS:
        raise EmitError("%r is not a setting PCKIDRetrievalTool reads" % key)
    if not isinstance(value, str):
        raise refuse(name, "must be a string, got %s" % type(value).__name__)
    if control_characters(value) or any(ch.isspace() for ch in value):
        raise refuse(name, "holds blanks or control characters, which the tool removes or reads as a new line")
    if not value:
        raise refuse(name, "is empty")
    rendered = "%s=%s" % (key, value)
    if pck_parse(rendered) != [(key.upper(), value)]:  # pragma: no cover - the checks above make this unreachable
        raise refuse(name, "would not read back as written")
    return rendered


def pck_parse(text: str) -> list[tuple[str, str]]:
    """``(NAME, value)`` pairs as PCKIDRetrievalTool reads ``network_setting.conf`` (see above)."""
    pairs = []
    for raw in text.split("\n"):
        line_ = "".join(ch for ch in raw if ch not in " \t\n\v\f\r")
        if not line_ or line_.startswith("#"):
            continue
        key, _equals, value = line_.partition("=")
        pairs.append((key.upper(), value))
    return pairs


def pck_network_setting(pccs_url: str, use_secure_cert: bool, user_token: str) -> str:
    """The whole ``network_setting.conf`` the roles and the Kubernetes form write for PCKIDRetrievalTool."""
    return (
        "\n".join(
            [
                "# Managed by confidential.tee.tdx_attestation: read by PCKIDRetrievalTool from its working directory.",
                pck_setting("PCCS_URL", "%splatforms" % (pccs_url or ""), "tdx_attestation_pccs_url"),
                pck_setting(
                    "USE_SECURE_CERT", "TRUE" if use_secure_cert else "FALSE", "tdx_attestation_qcnl_use_secure_cert"
                ),
                pck_setting("user_token", user_token, "tdx_attestation_pccs_user_token"),
            ]
        )
        + "\n"
    )
