# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Markdown text that a CommonMark renderer shows as exactly that text: no tag, link, emphasis or block.

CommonMark 0.31.2 "2.4 Backslash escapes": any ASCII punctuation character may be backslash-escaped and is then
literal. :func:`text` escapes every character that opens inline syntax wherever it stands (``\\``, backtick,
``*``, ``_``, ``[``, ``]``, ``<``, ``>``, ``&``, ``#``, ``|``, ``~``, ``!``, ``{``, ``}``) and the ones that only
start a block at the start of a line where they can (``-``, ``+``, ``=`` first; ``.`` or ``)`` after leading
digits: "5.2 List items", "4.1 Thematic breaks", "4.3 Setext headings"). Elsewhere ``-``, ``.``, ``(``, ``)``
are plain text in CommonMark (a link destination needs ``](``, and ``]`` is always escaped), so ordinary names
such as ``tdx-1`` or ``machine.slice (6)`` stay readable in the raw file.

Line breaks become spaces (the text is one inline run) and blanks at either end are dropped (CommonMark strips
them from paragraphs, headings and cells). NUL is refused (CommonMark replaces it with U+FFFD).

Standard library only.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import refuse

_ALWAYS = frozenset("\\`*_[]<>&#|~!{}")
_AT_START = frozenset("-+=")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ORDERED_MARKER = re.compile(r"([0-9]+)([.)])")


def text(value: object, name: str = "text") -> str:
    """``value`` as literal inline Markdown (``None`` is empty)."""
    string = "" if value is None else str(value)
    if "\x00" in string:
        raise refuse(name, "holds a NUL character, which Markdown cannot show")
    string = _LINE_BREAK.sub(" ", string).strip(" \t")
    out = ["\\" + ch if ch in _ALWAYS else ch for ch in string]
    if string and string[0] in _AT_START:
        out[0] = "\\" + string[0]
    marker = _ORDERED_MARKER.match(string)
    if marker:
        position = marker.end(1)
        out[position] = "\\" + string[position]
    return "".join(out)


def shown(value: object) -> str:
    """What a CommonMark renderer shows for ``text(value)``: for tests and for checks of a report."""
    string = "" if value is None else str(value)
    return _LINE_BREAK.sub(" ", string).strip(" \t")


def table(rows, header) -> str:
    """A pipe table (GitHub Flavored Markdown 0.29 "4.10 Tables") of literal cells; ``rows`` hold raw values."""
    lines = ["| %s |" % " | ".join(text(cell) for cell in header), "|%s" % ("---|" * len(header))]
    for row in rows:
        if len(row) != len(header):
            raise refuse("table row", "has %d cells for %d columns" % (len(row), len(header)))
        lines.append("| %s |" % " | ".join(text(cell) for cell in row))
    return "\n".join(lines) + "\n"
