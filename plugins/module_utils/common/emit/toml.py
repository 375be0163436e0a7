# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""A small, deterministic TOML 1.0 writer (standard library only).

Managed hosts may run a Python without a TOML writer (``tomllib`` only parses, and only from 3.11), so
the documents this collection produces (Kata initdata, containerd drop-ins) are written here. The output
is canonical: keys are sorted, scalars come before sub-tables, so the same data always gives the same
bytes, which is what makes an initdata digest stable.
"""

from __future__ import annotations

import math
import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import EmitError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
# Control characters a TOML multi-line literal string may not hold (tab and newline are allowed).
_LITERAL_FORBIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class TomlError(EmitError):
    """Data that has no TOML representation; the message names the key path."""


def quote_key(key: object, where: str = "") -> str:
    if not isinstance(key, str):
        raise TomlError("key %r%s must be a string" % (key, _at(where)))
    return key if _BARE_KEY.match(key) else basic_string(key)


def basic_string(text: str) -> str:
    """A TOML basic string: escapes backslash, quote and every control character."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[char])
        elif code < 0x20 or code == 0x7F:
            out.append("\\u%04x" % code)
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def multiline_string(text: str) -> str:
    """A multi-line literal string when the text allows one (readable), else a basic string.

    The newline right after the opening quotes is trimmed by every TOML parser, so the value read
    back is exactly ``text``.
    """
    if "'''" not in text and not _LITERAL_FORBIDDEN.search(text) and "\r" not in text and not text.endswith("'"):
        return "'''\n" + text + "'''"
    return basic_string(text)


def _at(where: str) -> str:
    return " at %s" % where if where else ""


def scalar(value: object, where: str = "", multiline: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise TomlError("integer %d%s does not fit TOML's 64-bit range" % (value, _at(where)))
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise TomlError("%r%s: only finite numbers are written" % (value, _at(where)))
        return repr(value)
    if isinstance(value, str):
        return multiline_string(value) if multiline and "\n" in value else basic_string(value)
    if value is None:
        raise TomlError("%s is null: TOML has no null; omit the key instead" % (where or "a value"))
    raise TomlError("%s: %s values have no TOML form" % (where or "value", type(value).__name__))


def inline(value: object, where: str = "") -> str:
    """A value on one line: scalar, array, or inline table."""
    if isinstance(value, dict):
        parts = ["%s = %s" % (quote_key(k, where), inline(value[k], _join(where, k))) for k in sorted(value)]
        return "{" + ", ".join(parts) + "}" if parts else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(inline(item, "%s[%d]" % (where, i)) for i, item in enumerate(value)) + "]"
    return scalar(value, where)


def _join(where: str, key: str) -> str:
    return "%s.%s" % (where, key) if where else key


def _is_table_array(value: object) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(i, dict) for i in value)


def _emit_table(table: dict, path: list, lines: list, multiline_keys: frozenset) -> None:
    where = ".".join(path)
    plain, tables, arrays = [], [], []
    for key in sorted(table, key=lambda k: (not isinstance(k, str), str(k))):
        quote_key(key, where)
        value = table[key]
        if isinstance(value, dict):
            tables.append(key)
        elif _is_table_array(value):
            arrays.append(key)
        else:
            plain.append(key)
    for key in plain:
        value = table[key]
        rendered = (
            scalar(value, _join(where, key), multiline=key in multiline_keys)
            if not isinstance(value, (list, tuple))
            else inline(value, _join(where, key))
        )
        lines.append("%s = %s" % (quote_key(key), rendered))
    for key in tables:
        sub = table[key]
        # A table holding only sub-tables needs no header of its own: theirs define it.
        if not sub or any(not isinstance(v, dict) and not _is_table_array(v) for v in sub.values()):
            header = ".".join(quote_key(p) for p in [*path, key])
            lines.extend(["", "[%s]" % header])
        _emit_table(sub, [*path, key], lines, multiline_keys)
    for key in arrays:
        header = ".".join(quote_key(p) for p in [*path, key])
        for item in table[key]:
            lines.extend(["", "[[%s]]" % header])
            _emit_table(item, [*path, key], lines, multiline_keys)


def dumps(data: dict, multiline_keys=()) -> str:
    """``data`` as a TOML document ending in a newline.

    Strings under a key listed in ``multiline_keys`` are written as multi-line literal strings when
    they contain a newline (embedded documents such as ``policy.rego`` stay readable).
    """
    if not isinstance(data, dict):
        raise TomlError("a TOML document is a mapping, got %s" % type(data).__name__)
    lines: list = []
    _emit_table(data, [], lines, frozenset(multiline_keys))
    while lines and lines[0] == "":
        lines.pop(0)
    return "\n".join(lines) + "\n"
