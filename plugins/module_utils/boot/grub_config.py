# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""GRUB's ``/etc/default/grub`` and ``grub.d/*.cfg``, evaluated the way ``grub-mkconfig`` does.

``grub-mkconfig`` is a ``/bin/sh`` script running under ``set -e``: it sources ``/etc/default/grub``,
then every ``/etc/default/grub.d/*.cfg`` in glob order, and ``10_linux`` puts
``${GRUB_CMDLINE_LINUX} ${GRUB_CMDLINE_LINUX_DEFAULT}`` on every normal ``linux`` line. The files are
shell: quotes, escapes, continuations, ``${VAR:+...}`` expansions and command substitutions all count.
So nothing here imitates a shell. :func:`evaluate` runs ``/bin/sh`` over a copy of the files with the
very sourcing loop of ``grub-mkconfig``, in a clean environment and with a time limit, and the kernel
tokenizer of :mod:`cmdline` splits the result. Edits are planned as text changes and then *evaluated
again* before anything is written; a change whose evaluated effect is not exactly the intended one is
never used.

Pure Python, standard library only (it runs ``/bin/sh`` through :mod:`process`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError
from ansible_collections.confidential.tee.plugins.module_utils.common.process import clean_environment, run_bounded
from ansible_collections.confidential.tee.plugins.module_utils.host.cmdline import Arg, kernel_args, tokenize

GRUB_MAIN = "/etc/default/grub"
GRUB_DIR = "/etc/default/grub.d"
SHELL = "/bin/sh"
EVALUATION_TIMEOUT = 20

# grub-mkconfig's own sourcing loop (set -e, sysconfdir, the .cfg glob), then the two values behind a
# random marker so that anything the files print themselves is ignored.
_EVALUATE = """set -e
sysconfdir="$1"
__tee_marker="$2"
shift 2
if test -f ${sysconfdir}/default/grub ; then
  . ${sysconfdir}/default/grub
fi
for x in ${sysconfdir}/default/grub.d/*.cfg ; do
  if [ -e "${x}" ]; then
    . "${x}"
  fi
done
printf '%s\\n%s\\0%s\\0' "$__tee_marker" "${GRUB_CMDLINE_LINUX}" "${GRUB_CMDLINE_LINUX_DEFAULT}"
"""

# After evaluation the value is pasted into grub.cfg, whose own script parser treats these specially.
GRUB_SCRIPT_SPECIAL = re.compile(r"[$\\';|&<>{}`]")
_ASSIGNMENT = re.compile(r"(?m)^[ \t]*(?:export[ \t]+)?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=")
_DROPIN_LINE = re.compile(r'^GRUB_CMDLINE_LINUX="\$\{GRUB_CMDLINE_LINUX\} ([^"$`\\]*)"$')


class GrubError(TeeError):
    """The files cannot be evaluated or changed safely; the message says where and how to fix it."""


def decode(data: bytes) -> str:
    """File bytes as text that encodes back to the very same bytes (non-UTF-8 bytes survive)."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@dataclass
class GrubValue:
    """The two variables after sourcing, and the kernel arguments of a normal boot entry."""

    linux: str
    default: str

    @property
    def line(self) -> str:
        return f"{self.linux} {self.default}"

    def args(self) -> list[Arg]:
        return kernel_args(tokenize(self.line))

    def raws(self) -> list[str]:
        return [arg.raw for arg in self.args()]


def source_order(names: list[str]) -> list[str]:
    """``grub.d`` entries the ``*.cfg`` glob matches, in the C locale's order (bytes)."""
    matched = [name for name in names if name.endswith(".cfg") and not name.startswith(".")]
    return sorted(matched, key=lambda name: name.encode("utf-8", "surrogateescape"))


def evaluate(files: dict[str, str], runner=run_bounded) -> GrubValue:
    """Evaluate ``files`` (host path -> text, ``/etc/default/grub`` and ``grub.d`` entries) with /bin/sh.

    ``runner(argv, timeout, env=..., cwd=...)`` returns a :class:`process.Completed`.
    """
    workdir = tempfile.mkdtemp(prefix="confidential-tee-grub-")
    try:
        etc = os.path.join(workdir, "etc")
        os.makedirs(os.path.join(etc, "default", "grub.d"))
        for path, text in files.items():
            with open(os.path.join(workdir, path.lstrip("/")), "wb") as handle:
                handle.write(encode(text))
        marker = "confidential-tee-" + secrets.token_hex(8)
        try:
            done = runner(
                [SHELL, "-c", _EVALUATE, "sh", etc, marker],
                EVALUATION_TIMEOUT,
                env=clean_environment(),
                cwd=workdir,
            )
        except OSError as exc:
            raise GrubError(f"cannot run {SHELL} to evaluate the GRUB files: {exc}") from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _parse_output(done, marker, sorted(files))


def _parse_output(done, marker: str, paths: list[str]) -> GrubValue:
    where = ", ".join(paths)
    errors = decode(done.stderr).strip().replace(os.linesep, "; ")[-500:]
    if done.timed_out:
        raise GrubError(
            f"evaluating {where} with {SHELL} took longer than {EVALUATION_TIMEOUT} s (grub-mkconfig would hang "
            "too): look for commands that wait for input or the network in those files"
        )
    if done.rc != 0:
        raise GrubError(
            f"{SHELL} failed (exit {done.rc}) sourcing {where} the way grub-mkconfig does, so update-grub would "
            f"fail as well: {errors or 'no error message'}. Fix the shell error in those files first"
        )
    _output, found, tail = done.stdout.rpartition(encode(marker) + b"\n")
    if not found:
        raise GrubError(
            f"sourcing {where} ended before the GRUB variables could be read (a file calls exit?): "
            "grub-mkconfig would stop there too"
        )
    values = tail.split(b"\0")
    if len(values) < 3:
        raise GrubError(f"unexpected output evaluating {where}: {tail[:200]!r}")
    return GrubValue(decode(values[0]), decode(values[1]))


# ---------------------------------------------------------------------------------------------------
# Where an argument is spelled in the files
# ---------------------------------------------------------------------------------------------------


def _closing(text: str, i: int, close: str) -> int:
    """Index after the construct opened just before ``i`` and closed by ``close`` (nesting-aware)."""
    n = len(text)
    while i < n:
        char = text[i]
        if char == "\\":
            i += 2
        elif char == close:
            return i + 1
        elif char == "'" and close != '"':
            end = text.find("'", i + 1)
            i = n if end < 0 else end + 1
        elif char == '"' and close != '"':
            i = _closing(text, i + 1, '"')
        elif char == "`" and close != "`":
            i = _closing(text, i + 1, "`")
        elif char == "$" and text[i + 1 : i + 2] in ("(", "{"):
            i = _closing(text, i + 2, ")" if text[i + 1] == "(" else "}")
        else:
            i += 1
    return n


def _word_end(text: str, i: int) -> int:
    """End of the shell word starting at ``i`` (the value of an assignment)."""
    n = len(text)
    while i < n:
        char = text[i]
        if char in " \t\n;&|<>()":
            return i
        if char == "\\":
            i += 2
        elif char == "'":
            end = text.find("'", i + 1)
            i = n if end < 0 else end + 1
        elif char in '"`':
            i = _closing(text, i + 1, char)
        elif char == "$" and text[i + 1 : i + 2] in ("(", "{"):
            i = _closing(text, i + 2, ")" if text[i + 1] == "(" else "}")
        else:
            i += 1
    return n


def assignments(text: str) -> list[tuple[str, int, int]]:
    """``(variable, value_start, value_end)`` of every assignment to the GRUB command-line variables."""
    found = []
    for match in _ASSIGNMENT.finditer(text):
        start = match.end()
        found.append((match.group(1), start, _word_end(text, start)))
    return found


def spellings(raw: str) -> list[str]:
    """How an argument can be written in a shell word: as is, or escaped inside double quotes."""
    escaped = re.sub(r'(["\\$`])', r"\\\1", raw)
    return list(dict.fromkeys([raw, escaped]))


_LEFT = frozenset(" \t\n\"'}")
_RIGHT = frozenset(" \t\n\"'$")


def occurrences(text: str, raw: str) -> list[tuple[int, int]]:
    """Spans in assignment values where ``raw`` is spelled as a whole word."""
    spans = []
    for _var, start, end in assignments(text):
        for spelling in spellings(raw):
            at = text.find(spelling, start, end)
            while at >= 0:
                stop = at + len(spelling)
                left_ok = at == start or text[at - 1] in _LEFT
                right_ok = stop == end or text[stop] in _RIGHT
                if left_ok and right_ok:
                    spans.append((at, stop))
                at = text.find(spelling, at + 1, end)
    return sorted(set(spans))


def without_span(text: str, start: int, end: int) -> str:
    """``text`` with ``[start, end)`` removed together with one neighbouring blank."""
    if start > 0 and text[start - 1] in " \t":
        start -= 1
    elif end < len(text) and text[end] in " \t":
        end += 1
    return text[:start] + text[end:]


# ---------------------------------------------------------------------------------------------------
# The collection's own drop-in
# ---------------------------------------------------------------------------------------------------


def dropin_text(name: str, raws: list[str]) -> str:
    return (
        f"# Managed by confidential.tee.kernel_cmdline ({name}); changes here are overwritten.\n"
        "# Extends the kernel command line of every GRUB entry; run update-grub after editing.\n"
        f'GRUB_CMDLINE_LINUX="${{GRUB_CMDLINE_LINUX}} {" ".join(raws)}"\n'
    )


def dropin_args(path: str, text: str | None) -> list[str]:
    """The arguments a drop-in written by :func:`dropin_text` adds; refuses one edited by hand."""
    if text is None:
        return []
    found: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _DROPIN_LINE.match(line)
        if not match or found:
            raise GrubError(
                f"{path} is managed by confidential.tee.kernel_cmdline but was changed by hand ({line.strip()!r}): "
                "move your own settings to another file in /etc/default/grub.d, then delete it or restore it"
            )
        found = match.group(1).split()
    return found
