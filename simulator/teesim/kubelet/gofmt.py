"""How the Go kubelet words what it prints: ``%q`` quoting and gRPC status errors.

The kubelet builds its refusals with ``fmt.Errorf``; a plugin, a log reader or a test that matches
them sees Go's formatting, not Python's. Two pieces matter here:

* ``%q`` of a string is ``strconv.Quote`` (Go ``src/strconv/quote.go``, ``appendQuotedWith`` and
  ``appendEscapedRune``; unchanged since Go 1.12): the bytes are read as UTF-8 one rune at a time;
  a byte that does not start a valid sequence is written ``\\xNN`` and decoding resumes at the next
  byte; ``"`` and ``\\`` get a backslash; a printable rune (``unicode.IsPrint``: categories L, M, N,
  P, S and the ASCII space) is copied; ``\\a \\b \\f \\n \\r \\t \\v`` have short escapes; any other
  rune below U+0020 and U+007F is ``\\xNN``; the rest is ``\\uNNNN`` or ``\\UNNNNNNNN`` (lower-case
  hex). JSON quoting differs on all of these (``\\u0007``, no ``\\x``, U+2028 and NBSP unescaped).
* A gRPC error's text in grpc-go (``internal/status/status.go``, ``(*Status).String``) is
  ``rpc error: code = <Code> desc = <message>``, the code spelled as ``codes.Code.String`` spells it
  (``Canceled`` with one l, ``DeadlineExceeded``, ...). A deadline the Go client itself enforced reads
  ``context deadline exceeded`` (``status.FromContextError``); grpcio says ``Deadline Exceeded``.

What is printable comes from Python's ``unicodedata`` (Unicode 14.0 on Python 3.11); Go 1.21 and
later use Unicode 15.0 tables, so a character first assigned in 15.0 is escaped here and printed by Go.
"""

from __future__ import annotations

import unicodedata

__all__ = ["GO_CODE_NAMES", "go_quote", "go_rpc_error"]

_SHORT_ESCAPES = {0x07: r"\a", 0x08: r"\b", 0x0C: r"\f", 0x0A: r"\n", 0x0D: r"\r", 0x09: r"\t", 0x0B: r"\v"}
_PRINTABLE_CLASSES = frozenset("LMNPS")

# google.golang.org/grpc/codes/code_string.go, indexed by the status code number.
GO_CODE_NAMES = (
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
)
DEADLINE_EXCEEDED = 4
# What grpcio writes for a deadline its own client enforced, and what grpc-go writes instead.
_PY_CLIENT_DEADLINE = "Deadline Exceeded"
_GO_CLIENT_DEADLINE = "context deadline exceeded"


def _decode_rune(data: bytes, at: int) -> tuple[int | None, int]:
    """``utf8.DecodeRune``: (rune, width), or (None, 1) when the byte at ``at`` starts no valid sequence
    (bad lead byte, short or broken sequence, overlong form, surrogate, above U+10FFFF)."""
    lead = data[at]
    if lead < 0x80:
        return lead, 1
    if 0xC2 <= lead <= 0xDF:
        size, low, high, rune = 2, 0x80, 0xBF, lead & 0x1F
    elif 0xE0 <= lead <= 0xEF:
        # E0 needs A0.. (no overlong forms), ED stops at 9F (no surrogates): utf8.go's accept ranges.
        size, rune = 3, lead & 0x0F
        low, high = (0xA0 if lead == 0xE0 else 0x80), (0x9F if lead == 0xED else 0xBF)
    elif 0xF0 <= lead <= 0xF4:
        size, rune = 4, lead & 0x07
        low, high = (0x90 if lead == 0xF0 else 0x80), (0x8F if lead == 0xF4 else 0xBF)
    else:
        return None, 1
    if at + size > len(data) or not low <= data[at + 1] <= high:
        return None, 1
    for index in range(at + 1, at + size):
        if not 0x80 <= data[index] <= 0xBF:
            return None, 1
        rune = (rune << 6) | (data[index] & 0x3F)
    return rune, size


def _escape_rune(rune: int) -> str:
    if rune in (0x22, 0x5C):  # '"' and '\\' are always backslashed
        return "\\" + chr(rune)
    if rune == 0x20 or unicodedata.category(chr(rune))[0] in _PRINTABLE_CLASSES:
        return chr(rune)
    if rune in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[rune]
    if rune < 0x20 or rune == 0x7F:
        return f"\\x{rune:02x}"
    if rune < 0x10000:
        return f"\\u{rune:04x}"
    return f"\\U{rune:08x}"


def go_quote(value: str | bytes) -> str:
    """Go's ``%q`` (``strconv.Quote``) of ``value``.

    ``bytes`` are a Go string as it is (possibly invalid UTF-8). A ``str`` is encoded as UTF-8 first;
    a lone surrogate in it becomes the three bytes Go would hold for it, each of them invalid.
    """
    data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    out = ['"']
    at = 0
    while at < len(data):
        rune, width = _decode_rune(data, at)
        out.append(f"\\x{data[at]:02x}" if rune is None else _escape_rune(rune))
        at += width
    out.append('"')
    return "".join(out)


def go_rpc_error(code: int, message: str) -> str:
    """The text of a grpc-go status error (what ``%v`` of the kubelet's RPC error prints).

    ``code`` is the numeric status code (``grpc.StatusCode.X.value[0]``).
    """
    name = GO_CODE_NAMES[code] if 0 <= code < len(GO_CODE_NAMES) else f"Code({code})"
    if code == DEADLINE_EXCEEDED and message == _PY_CLIENT_DEADLINE:
        message = _GO_CLIENT_DEADLINE
    return f"rpc error: code = {name} desc = {message}"
