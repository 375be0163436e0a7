# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""HTML text and attribute values: ``&``, ``<``, ``>``, ``"`` and ``'`` escaped, so no value opens a tag,
closes an attribute or starts a character reference (HTML Living Standard, "13.1 Writing HTML documents").

Control characters other than tab, line feed and carriage return are refused: they are parse errors in HTML
and NUL is replaced by U+FFFD, so they cannot read back.

Standard library only.
"""

from __future__ import annotations

import html as _html

from ansible_collections.confidential.tee.plugins.module_utils.common.emit import control_characters, describe, refuse


def _checked(value: object, name: str) -> str:
    string = "" if value is None else str(value)
    bad = control_characters(string, allowed="\t\n\r")
    if bad:
        raise refuse(name, "holds control characters (%s) that HTML cannot show" % describe(bad))
    return string


def text(value: object, name: str = "text") -> str:
    """``value`` (``None`` is empty) as element content."""
    return _html.escape(_checked(value, name), quote=True)


def attr(value: object, name: str = "attribute") -> str:
    """``value`` for a double-quoted attribute value."""
    return _html.escape(_checked(value, name), quote=True)
