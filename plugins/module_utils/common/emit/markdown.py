# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Markdown text that a CommonMark renderer shows as exactly that text: no tag, link, emphasis or block.

CommonMark spec 0.31.2, "2.4 Backslash escapes": any ASCII punctuation character may be backslash-escaped and
is then literal. :func:`text` escapes every character that opens inline syntax wherever it stands: ``\\``,
backtick, ``*``, ``[``, ``]``, ``<``, ``>``, ``&``, ``#``, ``|``, ``~``, ``!``, ``{``, ``}``, and ``_`` unless
it stands between letters or digits. It escapes those that only start a block where they can: ``-``, ``+``,
``=`` first ("4.1 Thematic breaks", "4.3 Setext headings", "5.2 List items") and ``.`` or ``)`` after leading
digits. Elsewhere ``-``, ``.``, ``(``, ``)`` are plain text in CommonMark (a link destination needs ``](``
and ``]`` is always escaped), so ordinary names such as ``tdx-1`` or ``machine.slice (6)`` stay readable.

Line breaks become spaces (the text is one inline run) and blanks at either end are dropped (CommonMark strips
them from paragraphs, headings and cells). NUL (CommonMark replaces it with U+FFFD) and the other C0 controls
but tab and line breaks are refused, as for HTML.

Standard library only.
"""

from __future__ import annotations

import re
import unicodedata

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import control_characters, describe, refuse

_ALWAYS = frozenset("\\`*[]<>&#|~!{}")
_AT_START = frozenset("-+=")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# "5.2 List items": 1-9 digits and '.' or ')' followed by a blank or the end start an ordered list.
_ORDERED_MARKER = re.compile(r"[0-9]{1,9}([.)])(?=[ \t]|\Z)")


def _inline(string: str) -> list[str]:
    out = []
    for index, ch in enumerate(string):
        if ch in _ALWAYS or (ch == "_" and not _between_alphanumerics(string, index)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return out


def _between_alphanumerics(string: str, index: int) -> bool:
    # "6.2 Emphasis and strong emphasis", rules 2 and 4: an '_' with an ASCII letter or digit on both sides can
    # neither open nor close emphasis (tdx_host_platform stays as it is).
    before, after = string[index - 1 : index], string[index + 1 : index + 2]
    return before.isascii() and before.isalnum() and after.isascii() and after.isalnum()


def _prepared(value: object, name: str) -> str:
    string = "" if value is None else str(value)
    bad = control_characters(string, allowed="\t\n\r")
    if bad:
        raise refuse(name, "holds control characters (%s), which Markdown cannot show" % describe(bad))
    return _strip_ends(_LINE_BREAK.sub(" ", string))


def _strip_ends(string: str) -> str:
    """Without the blanks a renderer drops around a paragraph: spaces, tabs and every other Unicode space (Zs,
    such as U+00A0, which also keeps a ``**`` next to it from opening emphasis: CommonMark's flanking rule)."""
    start, end = 0, len(string)
    while start < end and (string[start] in " \t" or unicodedata.category(string[start]) == "Zs"):
        start += 1
    while end > start and (string[end - 1] in " \t" or unicodedata.category(string[end - 1]) == "Zs"):
        end -= 1
    return string[start:end]


def text(value: object, name: str = "text") -> str:
    """``value`` as literal Markdown wherever it stands, also at the start of a line (``None`` is empty)."""
    string = _prepared(value, name)
    out = _inline(string)
    # A bullet ("- x", "-"), a thematic break ("---", "- - -") or a setext underline ("===").
    if string[:1] in _AT_START and (string[1:2] in ("", " ", "\t") or not string.strip(string[0] + " \t")):
        out[0] = "\\" + string[0]
    marker = _ORDERED_MARKER.match(string)
    if marker:
        out[marker.start(1)] = "\\" + marker.group(1)
    return "".join(out)


def cell(value: object, name: str = "table cell") -> str:
    """``value`` as literal Markdown inside a pipe-table cell, which holds inline content only (GFM 0.29
    "4.10 Tables"): a leading ``-`` or ``1.`` starts no block there, so only inline syntax is escaped."""
    return "".join(_inline(_prepared(value, name)))


def shown(value: object) -> str:
    """What a CommonMark renderer shows for ``text(value)``: for tests and for checks of a report."""
    string = "" if value is None else str(value)
    return _strip_ends(_LINE_BREAK.sub(" ", string))


def table(rows, header) -> str:
    """A pipe table (GitHub Flavored Markdown 0.29 "4.10 Tables") of literal cells; ``rows`` hold raw values."""
    lines = ["| %s |" % " | ".join(cell(value) for value in header), "|%s" % ("---|" * len(header))]
    for row in rows:
        if len(row) != len(header):
            raise refuse("table row", "has %d cells for %d columns" % (len(row), len(header)))
        lines.append("| %s |" % " | ".join(cell(value) for value in row))
    return "\n".join(lines) + "\n"


def code_block(lines) -> str:
    """Literal lines in a fenced code block whose fence no line can close (CommonMark 0.31.2 "4.5 Fenced code
    blocks": the closing fence is at least as long as the opening one, so the fence outgrows every backtick run).
    """
    lines = [str(line) for line in lines]
    if any("\x00" in line for line in lines):
        raise refuse("code block", "holds a NUL character, which Markdown cannot show")
    longest = max([len(run) for line in lines for run in re.findall(r"`+", line)] + [2])
    fence = "`" * (longest + 1)
    return "\n".join([fence, *(_LINE_BREAK.sub(" ", line) for line in lines), fence])
