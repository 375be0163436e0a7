# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""systemd unit files and drop-ins: values, command lines and sections that read back as written.

Rules followed (systemd.syntax(7), systemd.unit(5) "Specifiers", systemd.service(5) "Command lines",
systemd.exec(5) ``Environment=``, systemd v255):

- A line ending in a backslash continues on the next line, and a line is a setting, a comment or a
  section header: so a value may hold no line break or other control character and may not end in ``\\``.
- Whitespace around a value is stripped: a value with leading or trailing blanks cannot read back.
- ``%`` starts a specifier in almost every setting; ``%%`` is a literal ``%``.
- A command line is split into words; double quotes group a word and C escapes (``\\\\``, ``\\"``) are
  decoded inside them; ``$VAR``/``${VAR}`` are substituted in arguments and ``$$`` is a literal ``$``;
  a lone ``;`` separates commands.

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

# Words that need no quotes: nothing systemd's word splitter, C unescaping, specifier or variable
# expansion treats specially. Anything else is double-quoted, so ordinary paths and names stay as they were.
_BARE_WORD = re.compile(r"[A-Za-z0-9_./:,=+@-]+\Z")
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_SECTION = re.compile(r"[A-Za-z][A-Za-z0-9-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_line_safe(text: str, name: str) -> None:
    if not isinstance(text, str):
        raise refuse(name, "must be a string for a systemd unit, got %s" % type(text).__name__)
    bad = control_characters(text)
    if bad:
        raise refuse(name, "holds control characters (%s) that would break the unit file's lines" % describe(bad))
    unclean = sorted({ch for ch in text if not _systemd_unichar(ord(ch))})
    if unclean:
        # systemd drops the whole assignment ("String is not UTF-8 clean, ignoring assignment").
        raise refuse(name, "holds characters systemd rejects as not UTF-8 clean (%s)" % describe(unclean))


def _systemd_unichar(code: int) -> bool:
    """systemd's unichar_is_valid() (src/basic/utf8.c, v252): no surrogates and no Unicode noncharacters."""
    return not (0xD800 <= code <= 0xDFFF or 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE)


def value(text: str, name: str) -> str:
    """``text`` as the right-hand side of a setting that takes it verbatim (``Description=``, paths)."""
    _check_line_safe(text, name)
    if text != text.strip(" \t"):
        raise refuse(name, "has leading or trailing blanks, which systemd strips: %r" % text)
    if text.endswith("\\"):
        raise refuse(name, "ends in a backslash, which continues the setting on the next line: %r" % text)
    return text.replace("%", "%%")


def path(text: str, name: str) -> str:
    """An absolute path setting (``WorkingDirectory=``): a leading ``-`` or ``~`` would change its meaning."""
    if not isinstance(text, str) or not text.startswith("/"):
        raise refuse(name, "must be an absolute path, got %r" % (text,))
    return value(text, name)


def _word(text: str, name: str) -> str:
    _check_line_safe(text, name)
    if _BARE_WORD.match(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"%s"' % escaped


def exec_args(argv: list, name: str) -> str:
    """A command line for ``ExecStart=`` and friends: each argument is one word, exactly as given.

    The executable must be an absolute path, so no prefix character (``-``, ``+``, ``@``, ``!``, ``:``) can
    come from a value; the caller writes the prefix it means before the result.
    """
    if not argv or not isinstance(argv[0], str) or not argv[0].startswith("/"):
        raise refuse(name, "must give an absolute executable path, got %r" % (argv[0] if argv else None,))
    words = []
    for arg in argv:
        if arg == ";":
            raise refuse(name, "has an argument ';', which systemd reads as a command separator")
        word = _word(arg, name)
        # $ is substituted in arguments even inside quotes; $$ is a literal $.
        words.append(word.replace("$", "$$"))
    return " ".join(words)


def environment(variable: str, text: str, name: str) -> str:
    """One ``Environment=`` assignment ``variable=text``, quoted when it needs to be (no ``$`` expansion there)."""
    if not isinstance(variable, str) or not _ENV_NAME.match(variable):
        raise refuse(name, "names an environment variable %r that is not an identifier" % (variable,))
    return _word("%s=%s" % (variable, text), name)


def comment(text: str) -> str:
    """A comment line; only the collection's own text goes here, never a value."""
    if "\n" in text or "\r" in text:
        raise EmitError("a unit file comment must be one line: %r" % text)
    return "# " + text


def section(name: str, pairs) -> str:
    """``[name]`` and one ``Key=value`` line per pair; a pair ``(None, text)`` is a comment line.

    Values must already come from :func:`value`, :func:`path`, :func:`exec_args` or :func:`environment`
    (or be the collection's own constants); a line break in one is refused here as a second guard.
    """
    if not _SECTION.match(name):
        raise EmitError("%r is not a systemd section name" % name)
    lines = ["[%s]" % name]
    for key, rendered in pairs:
        if key is None:
            lines.append(comment(rendered))
            continue
        if not _KEY.match(key):
            raise EmitError("%r is not a systemd setting name" % key)
        _check_line_safe(rendered, key)
        lines.append("%s=%s" % (key, rendered))
    return "\n".join(lines) + "\n"


def split_exec(rendered: str) -> list[str]:
    """The argv systemd runs for a command line :func:`exec_args` wrote (the reverse, for checks and tests).

    Handles what :func:`exec_args` produces: bare words and double-quoted words with ``\\\\``/``\\"``
    escapes, then ``%%`` and ``$$``.
    """
    words, i = [], 0
    while i < len(rendered):
        if rendered[i] == " ":
            i += 1
            continue
        word = []
        if rendered[i] == '"':
            i += 1
            while rendered[i] != '"':
                if rendered[i] == "\\":
                    i += 1
                word.append(rendered[i])
                i += 1
            i += 1
        else:
            while i < len(rendered) and rendered[i] != " ":
                word.append(rendered[i])
                i += 1
        words.append("".join(word).replace("%%", "%").replace("$$", "$"))
    return words
