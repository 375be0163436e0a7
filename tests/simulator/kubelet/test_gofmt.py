"""Go's ``%q`` and grpc-go's error text, as the kubelet prints them (``teesim.kubelet.gofmt``)."""

from __future__ import annotations

import ast
import json

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from teesim.kubelet.gofmt import GO_CODE_NAMES, _escape_rune, go_quote, go_rpc_error


# Go src/strconv/quote_test.go (go1.24), the ``quotetests`` table's ``in`` and ``out`` columns.
@pytest.mark.parametrize(
    ("go_string", "quoted"),
    [
        (b"\a\b\f\r\n\t\v", r'"\a\b\f\r\n\t\v"'),
        (b"\\", r'"\\"'),
        (b"abc\xffdef", r'"abc\xffdef"'),
        ("\u263a".encode(), '"\u263a"'),
        ("\U0010ffff".encode(), r'"\U0010ffff"'),
        (b"\x04", r'"\x04"'),
        ("!\u00a0!\u2000!\u3000!".encode(), r'"!\u00a0!\u2000!\u3000!"'),
        (b"\x7f", r'"\x7f"'),
    ],
)
def test_go_quote_matches_go_strconv_quote_tests(go_string, quoted):
    assert go_quote(go_string) == quoted
    if go_string != b"abc\xffdef":  # the one that is not UTF-8 has no str form
        assert go_quote(go_string.decode()) == quoted


# Invalid UTF-8 is written byte by byte, \xNN, decoding resuming at the next byte: utf8.DecodeRuneInString
# returns (RuneError, 1) for each (Go src/unicode/utf8/utf8.go, the ``first`` and ``acceptRanges`` tables).
@pytest.mark.parametrize(
    ("go_string", "quoted"),
    [
        (b"\xe2\x82", r'"\xe2\x82"'),  # a three-byte sequence cut short
        (b"\xe2\x82(", r'"\xe2\x82("'),  # broken by an ASCII byte, which is kept
        (b"\xc0\xaf", r'"\xc0\xaf"'),  # overlong '/'
        (b"\xe0\x80\xaf", r'"\xe0\x80\xaf"'),  # overlong, three bytes
        (b"\xed\xa0\x80", r'"\xed\xa0\x80"'),  # UTF-8 of the surrogate U+D800
        (b"\xf4\x90\x80\x80", r'"\xf4\x90\x80\x80"'),  # above U+10FFFF
        (b"\xf5\x80", r'"\xf5\x80"'),  # lead byte no rune starts with
        ("\ufffd".encode(), '"\ufffd"'),  # a real U+FFFD is valid and printable: kept
    ],
)
def test_go_quote_escapes_invalid_utf8_byte_by_byte(go_string, quoted):
    assert go_quote(go_string) == quoted


def test_go_quote_differs_from_json_where_go_does():
    # The JSON quoting teesim used before: same for plain names, different for everything else.
    assert go_quote("tdx.intel.com/keys") == json.dumps("tdx.intel.com/keys")
    assert go_quote("\x07") == r'"\a"' != json.dumps("\x07")  # JSON: "\u0007"
    assert go_quote("\x1b") == r'"\x1b"'  # JSON: "\u001b"
    assert go_quote("\u2028") == r'"\u2028"'  # a line separator is not printable (Zl)
    assert go_quote("\ufeff\u200b") == r'"\ufeff\u200b"'  # format characters (Cf)
    assert go_quote("\U000e0001") == r'"\U000e0001"'  # above the BMP: \U and eight digits
    assert go_quote("\U0001f600") == '"\U0001f600"'  # a printable symbol (So) stays
    assert go_quote("\ud800") == r'"\xed\xa0\x80"', "a lone surrogate is the three invalid bytes Go would hold"
    assert go_quote("") == '""'


@given(st.text(st.characters(exclude_categories=["Cs"])))
def test_go_quote_round_trips_and_never_breaks_a_line(text):
    quoted = go_quote(text)
    # Go's escapes for valid UTF-8 are all valid Python string escapes with the same meaning.
    assert ast.literal_eval(quoted) == text
    assert not any(ch in quoted for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _quote_through_python_decoder(data: bytes) -> str:
    """A second reading of the same rule: Python's UTF-8 decoder marks each maximal ill-formed subpart
    (a lead byte and the continuation bytes it accepted), and Go rejects each of those bytes on its own."""
    out, at = [], 0
    while at < len(data):
        try:
            text = data[at:].decode()
            out.extend(_escape_rune(ord(ch)) for ch in text)
            break
        except UnicodeDecodeError as exc:
            out.extend(_escape_rune(ord(ch)) for ch in data[at : at + exc.start].decode())
            out.extend(f"\\x{byte:02x}" for byte in data[at + exc.start : at + exc.end])
            at += exc.end
    return '"' + "".join(out) + '"'


@given(st.binary(max_size=40))
def test_go_quote_of_any_bytes_agrees_with_the_python_decoder(data):
    assert go_quote(data) == _quote_through_python_decoder(data)


@pytest.mark.parametrize(
    ("code", "message", "text"),
    [
        (grpc.StatusCode.INTERNAL, "no key left", "rpc error: code = Internal desc = no key left"),
        (grpc.StatusCode.CANCELLED, "x", "rpc error: code = Canceled desc = x"),
        # grpcio's own deadline wording becomes grpc-go's (status.FromContextError).
        (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "Deadline Exceeded",
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
        ),
        (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "plugin said so",
            "rpc error: code = DeadlineExceeded desc = plugin said so",
        ),
        (grpc.StatusCode.UNAUTHENTICATED, "", "rpc error: code = Unauthenticated desc = "),
    ],
)
def test_go_rpc_error_reads_like_grpc_go(code, message, text):
    # google.golang.org/grpc internal/status/status.go: "rpc error: code = %s desc = %s".
    assert go_rpc_error(code.value[0], message) == text


def test_go_code_names_cover_every_grpc_status_code():
    assert len(GO_CODE_NAMES) == len(grpc.StatusCode)
    assert go_rpc_error(99, "m") == "rpc error: code = Code(99) desc = m"
