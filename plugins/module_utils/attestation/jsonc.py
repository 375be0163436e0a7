# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""JSON with ``//`` and ``/* */`` comments, read the way QCNL reads it and edited without losing the comments.

QCNL parses ``/etc/sgx_default_qcnl.conf`` with RapidJSON and ``kParseCommentsFlag``
(``QuoteGeneration/qcnl/qcnl_config.cpp``): comments are allowed between tokens, trailing commas, ``NaN`` and
content after the closing brace are not, and ``HasMember``/``operator[]`` find the *first* member of a name.
PCCS reads ``config/*.json`` through node-config (JSON5 or ``JSON.parse`` after stripping comments), where the
*last* duplicate wins. :class:`Document` keeps every member with its byte span so a writer can replace one
value, add or remove a member, and leave every comment and every other byte where it was; it removes
duplicates of a key it sets, so every reader then agrees.

Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import json as emit_json
from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

_WS = " \t\r\n"
REDACTED = "<redacted>"


class JsoncError(TeeError):
    """Text that is not JSON with comments; ``line``/``column`` are 1-based."""

    def __init__(self, message: str, text: str, offset: int) -> None:
        self.line = text.count("\n", 0, offset) + 1
        self.column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        self.reason = message
        super().__init__(f"line {self.line} column {self.column}: {message}")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


# RapidJSON without kParseNanAndInfFlag rejects NaN and Infinity; Python's decoder would accept them.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def strip_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces (newlines kept), so offsets stay the same."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JsoncError("unterminated /* comment", text, i)
            for j in range(i, end + 2):
                if out[j] != "\n":
                    out[j] = " "
            i = end + 2
        else:
            i += 1
    return "".join(out)


@dataclass
class Member:
    key: str
    key_start: int
    value_start: int
    value_end: int
    value: object
    # Members of an object value, for edits inside it (``mysql.password``).
    children: list[Member] = field(default_factory=list)
    # Offset of the comma that follows the value, or None.
    comma_after: int | None = None


@dataclass
class Document:
    text: str
    members: list[Member]
    open_brace: int
    close_brace: int

    def first(self) -> dict:
        """Member values as RapidJSON's ``HasMember``/``operator[]`` see them (first duplicate wins)."""
        values: dict = {}
        for member in self.members:
            values.setdefault(member.key, member.value)
        return values

    def last(self) -> dict:
        """Member values as ``JSON.parse``/JSON5 see them (last duplicate wins)."""
        return {member.key: member.value for member in self.members}

    def duplicates(self) -> list[str]:
        seen: set[str] = set()
        return sorted({m.key for m in self.members if m.key in seen or seen.add(m.key)})


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _scan_object(text: str, original: str, i: int, trailing: bool = False) -> tuple[list[Member], int]:
    """Members of the object whose ``{`` is at ``i``, and the offset of its ``}``."""
    members: list[Member] = []
    i = _skip_ws(text, i + 1)
    if i < len(text) and text[i] == "}":
        return members, i
    while True:
        if i >= len(text) or text[i] != '"':
            raise JsoncError("expected a member name in double quotes", original, i)
        try:
            key, after_key = json.decoder.scanstring(text, i + 1)
        except ValueError as exc:
            raise JsoncError(f"bad member name: {exc}", original, i) from None
        colon = _skip_ws(text, after_key)
        if colon >= len(text) or text[colon] != ":":
            raise JsoncError(f"expected ':' after {key!r}", original, colon)
        value_start = _skip_ws(text, colon + 1)
        value, value_end, children = _scan_value(text, original, value_start, trailing)
        member = Member(key, i, value_start, value_end, value, children)
        members.append(member)
        i = _skip_ws(text, value_end)
        if i < len(text) and text[i] == ",":
            member.comma_after = i
            i = _skip_ws(text, i + 1)
            if i < len(text) and text[i] == "}":
                if trailing:
                    return members, i
                raise JsoncError("trailing comma before '}' (QCNL's parser rejects it)", original, member.comma_after)
            continue
        if i < len(text) and text[i] == "}":
            return members, i
        raise JsoncError("expected ',' or '}' after a value", original, i)


def _scan_value(text: str, original: str, i: int, trailing: bool = False) -> tuple[object, int, list[Member]]:
    if i < len(text) and text[i] == "{":
        children, close = _scan_object(text, original, i, trailing)
        value: dict = {}
        for child in children:
            value.setdefault(child.key, child.value)
        return value, close + 1, children
    try:
        value, end = _DECODER.raw_decode(text, i)
    except ValueError as exc:
        raise JsoncError(f"bad value: {exc}", original, i) from None
    return value, end, []


def parse(text: str, trailing_commas: bool = False) -> Document:
    """A :class:`Document` for ``text``, or :class:`JsoncError` naming the line and column.

    ``trailing_commas`` accepts a comma before ``}`` as JSON5 does (node-config reads PCCS's files with JSON5;
    Intel's own ``config/default.json`` ends its last member with one). QCNL's RapidJSON rejects it.
    """
    if text.startswith("\ufeff"):
        raise JsoncError("starts with a byte-order mark, which QCNL's parser rejects", text, 0)
    stripped = strip_comments(text)
    start = _skip_ws(stripped, 0)
    if start >= len(stripped) or stripped[start] != "{":
        raise JsoncError("the document must be a JSON object starting with '{'", text, start)
    members, close = _scan_object(stripped, text, start, trailing_commas)
    rest = _skip_ws(stripped, close + 1)
    if rest < len(stripped):
        raise JsoncError("content after the closing '}'", text, rest)
    return Document(text, members, start, close)


def render_value(value: object, indent: str, name: str = "value") -> str:
    """``value`` as JSON through the one JSON emitter (no NaN, nothing that does not read back; refusals name
    ``name``); objects spread over lines, indented to sit under ``indent``."""
    if isinstance(value, dict) and value:
        return emit_json.dumps(value, name, indent=4).rstrip("\n").replace("\n", "\n" + indent)
    return emit_json.dumps(value, name, indent=None).rstrip("\n")


def _indent_of(text: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    prefix = text[line_start:offset]
    return prefix[: len(prefix) - len(prefix.lstrip())]


def _leading_commas(doc: Document) -> bool:
    """True when the file writes ``,"key": value`` (Intel's sgx_default_qcnl.conf style)."""
    for member in doc.members[:-1]:
        if member.comma_after is None:
            continue
        line_start = doc.text.rfind("\n", 0, member.comma_after) + 1
        if doc.text[line_start : member.comma_after].strip() == "":
            return True
    return False


def set_member(text: str, key: str, value: object, trailing_commas: bool = False) -> str:
    """``text`` with top-level ``key`` set to ``value`` (added when missing, duplicates removed)."""
    doc = parse(text, trailing_commas)
    matches = [m for m in doc.members if m.key == key]
    if matches:
        first = matches[0]
        rendered = render_value(value, _indent_of(text, first.key_start), key)
        if len(matches) > 1:
            text = remove_member(text, key, keep_first=True, trailing_commas=trailing_commas)
            doc = parse(text, trailing_commas)
            first = next(m for m in doc.members if m.key == key)
        return text[: first.value_start] + rendered + text[first.value_end :]
    if not doc.members:
        # After any comments inside the empty object, on a line of its own before the closing brace.
        indent = "    "
        head = text[: doc.close_brace].rstrip(" \t")
        head += "" if head.endswith("\n") else "\n"
        return f'{head}{indent}"{_escape(key)}": {render_value(value, indent, key)}\n' + text[doc.close_brace :]
    last = doc.members[-1]
    indent = _indent_of(text, last.key_start)
    member = f'"{_escape(key)}": {render_value(value, indent, key)}'
    # Follow the file's comma style: Intel's sgx_default_qcnl.conf starts lines with the comma.
    insertion = f"\n{indent},{member}" if _leading_commas(doc) else f",\n{indent}{member}"
    return text[: last.value_end] + insertion + text[last.value_end :]


def _escape(key: str) -> str:
    return emit_json.dumps(key, "key", indent=None).rstrip("\n")[1:-1]


def remove_member(text: str, key: str, keep_first: bool = False, trailing_commas: bool = False) -> str:
    """``text`` without top-level ``key`` (every occurrence, or all but the first)."""
    doc = parse(text, trailing_commas)
    spans = []
    seen = False
    for index, member in enumerate(doc.members):
        if member.key != key:
            continue
        if keep_first and not seen:
            seen = True
            continue
        if index > 0 and doc.members[index - 1].comma_after is not None:
            spans.append((doc.members[index - 1].comma_after, member.value_end))
        elif member.comma_after is not None:
            spans.append((member.key_start, _skip_ws(strip_comments(text), member.comma_after + 1)))
        else:
            spans.append((member.key_start, member.value_end))
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + text[end:]
    return text


def redact(text: str, paths: list[tuple[str, ...]], marker: str = REDACTED, trailing_commas: bool = True) -> str:
    """``text`` with the values at ``paths`` (``("mysql", "password")``) replaced by ``"<redacted>"``.

    Text that does not parse is redacted line by line: any line naming a secret key loses its value.
    """
    try:
        doc = parse(text, trailing_commas)
    except JsoncError:
        return _redact_lines(text, paths, marker)
    spans = []
    for path in paths:
        members = doc.members
        for depth, name in enumerate(path):
            found = [m for m in members if m.key == name]
            if depth == len(path) - 1:
                spans.extend((m.value_start, m.value_end) for m in found)
            else:
                members = [child for m in found for child in m.children]
    for start, end in sorted(set(spans), reverse=True):
        text = text[:start] + emit_json.dumps(marker, "marker", indent=None).rstrip("\n") + text[end:]
    return text


def _redact_lines(text: str, paths: list[tuple[str, ...]], marker: str) -> str:
    names = {path[-1] for path in paths}
    lines = []
    for line in text.splitlines(keepends=True):
        if any(f'"{name}"' in line for name in names):
            head = line.split(":", 1)[0]
            lines.append(f'{head}: "{marker}" (unparsable line hidden)\n')
        else:
            lines.append(line)
    return "".join(lines)
