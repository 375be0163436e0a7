# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""BLS Type #1 entries (``/boot/loader/entries/*.conf``), read the way each of their readers reads them.

* The UAPI.1 Boot Loader Specification 1.0 (https://uapi-group.org/specifications/specs/boot_loader_specification/,
  "Type #1 Boot Loader Entry Keys"): one key and its value per line, separated by whitespace (spaces or tabs);
  lines starting with ``#`` are comments and empty lines are ignored; ``options`` may appear more than once, and
  its lines are joined in order. systemd-boot (``src/boot/boot.c`` ``line_get_key_value``) also skips leading
  whitespace and a carriage return at the end of a line.
* GRUB's ``blscfg`` (the Fedora/RHEL grub2 patch, ``grub-core/commands/blscfg.c`` ``bls_parse_keyvals``): skips
  leading blanks and ``#`` lines, ends the key at the first space of the line (at the first tab only when the
  line has no space), stops reading the entry at a key without a value, and uses the first ``options`` only.
* grubby on BLS hosts (``grubby-bls``, rhboot/grubby eed6ef6 ``get_bls_value`` and ``set_bls_value``, since
  carried in Fedora's grubby package): reads the lines matching ``^options[ \\t]`` (so never an indented one)
  and rewrites every line that *starts* with ``options`` as ``options <new arguments>``.

The entry is read as the specification says: a tab or several blanks after the key, leading blanks, CRLF line
ends, comments and an ``options`` key without a value. Before grubby runs, :func:`with_options` writes the
``options`` line with the planned arguments in the one shape all of them read alike and grubby writes itself (a
plain file write, proven by reading it back), so grubby never meets a line it would read differently and the entry
is the same before and after it (:func:`normalized` only reshapes, for entries whose arguments live in grubenv).
Where the readers disagree about the arguments themselves (several ``options`` lines, another key that starts
with ``options``), :func:`options_text` refuses with the file, the line and the fix, before anything is written or
run.
"""

from __future__ import annotations

import re

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

BLANKS = " \t"
_KEY_VALUE = re.compile(r"([^ \t]+)(?:[ \t]+(.*))?\Z", re.S)


class BlsError(TeeError):
    """An entry whose arguments its readers would read differently; the message names the line and the fix."""


def entry_lines(text: str) -> list[tuple[int, str, str, str]]:
    """``(line number, raw line, key, value)`` of every key line, as the specification reads them."""
    found = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.lstrip(BLANKS)
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY_VALUE.match(stripped)
        if match:
            found.append((number, line, match.group(1), (match.group(2) or "").rstrip(BLANKS)))
    return found


def _grub_sees_options(line: str) -> bool:
    """Whether GRUB's blscfg reads ``line`` (an ``options`` line) under the key ``options``."""
    stripped = line.lstrip(BLANKS)
    cut = stripped.find(" ")
    if cut < 0:
        cut = stripped.find("\t")
    return cut >= 0 and stripped[:cut] == "options"


def normalized(text: str) -> str:
    """``text`` with its ``options`` line written ``options <value>``: the one shape every reader and every grubby
    version reads alike (no indentation, one space, no carriage return). Every other byte stays as it was."""
    lines = text.split("\n")
    for number, _line, key, value in entry_lines(text):
        raw = lines[number - 1]
        # Already "options " at the start and no CR: every reader splits it alike; leave its bytes alone.
        if key == "options" and (not raw.startswith("options ") or raw.endswith("\r")):
            lines[number - 1] = "options " + value
    return "\n".join(lines)


def with_options(text: str, words: list[str]) -> str:
    """``text`` with its ``options`` line written ``options <words joined by one space>``, every other byte as it was;
    an entry without one gets it as its last line. This is the shape grubby writes (grubby-bls ``set_bls_value``:
    ``options ${new_args}``, the words re-joined by the shell), so an entry already in it is one grubby leaves alone.
    """
    line = "options " + " ".join(words) if words else "options"
    lines = text.split("\n")
    found = [number for number, _line, key, _value in entry_lines(text) if key == "options"]
    if found:
        lines[found[0] - 1] = line
        return "\n".join(lines)
    ending = "" if text.endswith("\n") or not text else "\n"
    return f"{text}{ending}{line}\n"


def options_text(path: str, text: str, warnings: list[str] | None = None) -> str:
    """The ``options`` value of one entry, or :class:`BlsError` where its readers would disagree about it."""
    lines = entry_lines(text)
    options = [(number, line, value) for number, line, key, value in lines if key == "options"]
    if len(options) > 1:
        raise BlsError(
            f"{path} has {len(options)} 'options' lines (lines {', '.join(str(o[0]) for o in options)}): "
            "systemd-boot joins them, GRUB's blscfg reads only the first and grubby would write every argument "
            "into each of them, so the effective command line depends on the tool. Merge them into one line"
        )
    for number, line, key, _value in lines:
        if key != "options" and line.startswith("options"):
            raise BlsError(
                f"line {number} of {path} starts with 'options' but its key is {key!r}: grubby rewrites every line "
                "that starts with 'options' and would replace it. Rename or remove that line"
            )
    if not options:
        return ""
    number, line, value = options[0]
    if warnings is not None and value and not _grub_sees_options(line):
        warnings.append(
            f"line {number} of {path} separates 'options' from its value with a tab while the value has spaces: "
            "GRUB's blscfg ends the key at the first space and does not see these arguments; grubby rewrites the "
            "line with a space when it changes the entry"
        )
    return value
