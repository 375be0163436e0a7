"""quantity: Kubernetes quantities exactly as apimachinery v0.36.3 (pkg/api/resource) parses them, in bounded time.

The tables re-express the expectations of apimachinery's own ``quantity_test.go`` (``TestQuantityParse``,
``TestQuantityString``, ``TestQuantityParseEmit``, ``TestJSONWhitespace``) as data: ``(mantissa, exponent)``
means mantissa * 10**exponent.
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from ansible_collections.confidential.tee.plugins.module_utils.fleet.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    INT64_MAX,
    Quantity,
    QuantityError,
    parse_count,
    parse_quantity,
    parse_text,
)
from hypothesis import given, settings
from hypothesis import strategies as st

SI, BIN, EXP = DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT
# TestQuantityParse: input, (mantissa, exponent), format.
APIMACHINERY_PARSE = [
    ("0", (0, 0), SI),
    ("0n", (0, 0), SI),
    ("0u", (0, 0), SI),
    ("0m", (0, 0), SI),
    ("0Ki", (0, 0), BIN),
    ("0k", (0, 0), SI),
    ("0Mi", (0, 0), BIN),
    ("0M", (0, 0), SI),
    ("0Gi", (0, 0), BIN),
    ("0G", (0, 0), SI),
    ("0Ti", (0, 0), BIN),
    ("0T", (0, 0), SI),
    ("1", (1, 0), SI),
    ("1Ki", (1024, 0), BIN),
    ("8Ki", (8 * 1024, 0), BIN),
    ("7Mi", (7 * 1024**2, 0), BIN),
    ("6Gi", (6 * 1024**3, 0), BIN),
    ("5Ti", (5 * 1024**4, 0), BIN),
    ("4Pi", (4 * 1024**5, 0), BIN),
    ("3Ei", (3 * 1024**6, 0), BIN),
    ("10Ti", (10 * 1024**4, 0), BIN),
    ("100Ti", (100 * 1024**4, 0), BIN),
    ("5n", (5, -9), SI),
    ("4u", (4, -6), SI),
    ("3m", (3, -3), SI),
    ("9", (9, 0), SI),
    ("8k", (8, 3), SI),
    ("50k", (5, 4), SI),
    ("7M", (7, 6), SI),
    ("6G", (6, 9), SI),
    ("5T", (5, 12), SI),
    ("40T", (4, 13), SI),
    ("300T", (3, 14), SI),
    ("2P", (2, 15), SI),
    ("1E", (1, 18), SI),
    ("1E-3", (1, -3), EXP),
    ("1e3", (1, 3), EXP),
    ("1E6", (1, 6), EXP),
    ("1e9", (1, 9), EXP),
    ("1E12", (1, 12), EXP),
    ("1e15", (1, 15), EXP),
    ("1E18", (1, 18), EXP),
    ("1e14", (1, 14), EXP),
    ("1e13", (1, 13), EXP),
    ("100.035k", (100035, 0), SI),
    ("0.001", (1, -3), SI),
    ("0.0005k", (5, -1), SI),
    ("0.005", (5, -3), SI),
    ("0.05", (5, -2), SI),
    ("0.5", (5, -1), SI),
    ("0.00050k", (5, -1), SI),
    ("0.00500", (5, -3), SI),
    ("0.05000", (5, -2), SI),
    ("0.50000", (5, -1), SI),
    ("0.5e0", (5, -1), EXP),
    ("0.5e-1", (5, -2), EXP),
    ("0.5e-2", (5, -3), EXP),
    ("10.035M", (10035, 3), SI),
    ("1.2e3", (12, 2), EXP),
    ("1.3E+6", (13, 5), EXP),
    ("1.40e9", (14, 8), EXP),
    ("1.53E12", (153, 10), EXP),
    ("1.6e15", (16, 14), EXP),
    ("1.7E18", (17, 17), EXP),
    ("9.01", (901, -2), SI),
    ("8.1k", (81, 2), SI),
    ("7.123456M", (7123456, 0), SI),
    ("6.987654321G", (6987654321, 0), SI),
    ("5.444T", (5444, 9), SI),
    ("40.1T", (401, 11), SI),
    ("300.2T", (3002, 11), SI),
    ("2.5P", (25, 14), SI),
    ("1.01E", (101, 16), SI),
    # Rounded up to the next nano, or capped (binary only).
    ("3.001n", (4, -9), SI),
    ("1.1E-9", (2, -9), EXP),
    ("0.0000000001", (1, -9), SI),
    ("0.0000000005", (1, -9), SI),
    ("0.00000000050", (1, -9), SI),
    ("0.5e-9", (1, -9), EXP),
    ("0.9n", (1, -9), SI),
    ("0.00000012345", (124, -9), SI),
    ("0.00000012354", (124, -9), SI),
    ("9Ei", (INT64_MAX, 0), BIN),
    ("9223372036854775807Ki", (INT64_MAX, 0), BIN),
    ("12E", (12, 18), SI),
    ("100.035Ki", (10243584, -2), BIN),
    ("0.5Mi", (512 * 1024, 0), BIN),
    ("0.05Gi", (536870912, -1), BIN),
    ("0.025Ti", (274877906944, -1), BIN),
    ("0.000000000001Ki", (2, -9), SI),
    (".001", (1, -3), SI),
    (".0001k", (100, -3), SI),
    ("1.", (1, 0), SI),
    ("1.G", (1, 9), SI),
]
# TestQuantityParse's invalid list, then what the fleet report met in the field.
APIMACHINERY_INVALID = ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 "]
INVALID = [
    "",
    "Non-Numeric",
    "1e",
    "1Ex",
    "1ee3",
    "1e3e",
    "1k3",
    "1e+",
    "1E-",
    "--1",
    "1\u0663",  # an Arabic-Indic digit: Go reads ASCII digits only
    "\u0661",
    "1_000",
    "1e9223372036854775808",  # the exponent must fit 64 bits
    "1e-9223372036854775809",
    "Ei",  # no digits, and the slow path needs one
    "Pi",
    ".e-10",
    "-e-10",
]


def value(mantissa, exponent):
    return Decimal(mantissa).scaleb(exponent)


@pytest.mark.parametrize(("text", "expected", "fmt"), APIMACHINERY_PARSE)
def test_apimachinery_parse_table_with_every_sign(text, expected, fmt):
    for sign, factor in (("", 1), ("+", 1), ("-", -1)):
        quantity, problem = parse_quantity(sign + text)
        assert problem is None, sign + text
        assert quantity.amount == factor * value(*expected), sign + text
        assert quantity.format == fmt, sign + text


@pytest.mark.parametrize("text", APIMACHINERY_INVALID + INVALID)
def test_invalid_quantities_are_problems(text):
    with pytest.raises(QuantityError):
        parse_text(text)
    # Read from JSON, white space around the value is trimmed first (UnmarshalJSON): " 1" is 1 there.
    if text.strip() == text:
        quantity, problem = parse_quantity(text)
        assert quantity is None and problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("+", 0),  # parseQuantityString: an empty number is 0
        ("-", 0),
        (".", 0),
        ("-.", 0),
        ("e5", 0),
        ("k", 0),
        ("Ti", 0),  # the binary fast path takes it; Pi and Ei go to the slow path, which needs a digit
        (".Ki", 0),
        ("0Ei", 0),
        ("0000", 0),
        ("1e4294967296", 1),  # the exponent is truncated to 32 bits
        ("1e4294967299", 1000),
        ("1.5e-1000000000", value(1, -9)),  # rounded up to one nano without rescaling
        ("-1e-30", value(-1, -9)),
    ],
)
def test_apimachinery_quirks(text, expected):
    quantity, problem = parse_quantity(text)
    assert problem is None and quantity == expected


def test_json_white_space_is_trimmed_as_go_trims_it():
    for text in (" 1", "1 ", "\t1\n", "\u30001\u2028", "\x851"):
        assert parse_quantity(text) == (Quantity(Decimal(1)), None), repr(text)
    # Python's str.strip() also strips \x1c..\x1f; Go's TrimSpace does not.
    assert parse_quantity("\x1c1")[0] is None


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        # TestQuantityString (the value written as its expected form and its alternate) and TestQuantityParseEmit.
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("300Mi", "300Mi"),
        ("307200Ki", "300Mi"),
        ("6Ki", "6Ki"),
        ("1025024Mi", "1001Gi"),
        ("1024Gi", "1Ti"),
        ("1000M", "1G"),
        ("0.001T", "1G"),
        ("1000u", "1m"),
        ("1.08", "1080m"),
        ("1080000000n", "1080m"),
        ("1234567M", "1234567M"),
        ("3k", "3k"),
        ("1025", "1025"),
        ("0", "0"),
        ("00", "0"),
        ("-0", "0"),
        (".001e12", "1e9"),
        ("0.001e0", "1e-3"),
        ("1000e-12", "1e-9"),
        ("80e-3", "80e-3"),
        ("300e6", "300e6"),
        ("1Ki", "1Ki"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("-1Gi", "-1Gi"),
        ("-1.08", "-1080m"),
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("9Ei", "9223372036854775807"),
        ("1000E", "1e21"),  # apimachinery v0.36 writes "1" here (no SI letter above E); the value is kept
    ],
)
def test_canonical_forms(text, canonical):
    assert parse_quantity(text)[0].canonical() == canonical


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(63, 63), (-2, -2), (0, 0), (0.25, Decimal("0.25")), (1e16, 10**16), (1e-10, value(1, -9))],
)
def test_json_numbers_are_exact(raw, expected):
    assert parse_quantity(raw) == (expected, None)


def test_a_json_integer_longer_than_python_prints_is_exact():
    quantity, problem = parse_quantity(10**5000)
    assert problem is None and quantity.canonical() == "100e4998"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (float("inf"), "not a finite number"),  # Python's json reads 1e400 as inf
        (float("-inf"), "not a finite number"),
        (float("nan"), "not a finite number"),
        (True, "is a bool"),
        (None, "JSON null"),
        ([1], "is a list"),
        ({"value": 1}, "is a dict"),
    ],
)
def test_json_values_that_are_no_quantities(raw, words):
    quantity, problem = parse_quantity(raw)
    assert quantity is None and words in problem


def test_huge_values_in_bounded_time():
    cases = {
        "1e1000000000": (True, "10e999999999"),
        "1" * 10000: (True, None),
        "1" * 10000 + "e1000000000": (True, None),
        "1" * 10000 + "e-2147483648": (True, None),
        "0." + "0" * 10000 + "1": (True, "1n"),
        "9" * 10000 + "Ei": (True, "9223372036854775807"),
        "1e" + "9" * 10000: (False, None),
    }
    for text, (valid, canonical) in cases.items():
        started = time.monotonic()
        quantity, problem = parse_quantity(text)
        if valid:
            assert problem is None and len(quantity.canonical()) < 10100
        else:
            assert quantity is None and len(problem) < 200, problem
        if canonical:
            assert quantity.canonical() == canonical
        assert parse_count(text)[0] in (None, INT64_MAX)
        # Microseconds of work: 10 s holds on any machine, while a value expanded digit by digit never returns.
        assert time.monotonic() - started < 10, text[:30]


@pytest.mark.parametrize(("raw", "count"), [("63", 63), ("1k", 1000), ("0", 0), ("2000m", 2), (7, 7), ("1e3", 1000)])
def test_counts(raw, count):
    assert parse_count(raw) == (count, None)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("1500m", "not a whole number"),
        ("1.5", "not a whole number"),
        ("1n", "not a whole number"),
        ("-1", "negative"),
        ("9223372036854775808", "more than the scheduler can count"),
        ("1e1000000000", "more than the scheduler can count"),
        ("1e", "unknown suffix"),
        (1.5, "not a whole number"),
    ],
)
def test_counts_must_be_whole_non_negative_int64(raw, words):
    count, problem = parse_count(raw)
    # Above int64 the count is known to be larger than any count: 2^63-1 and the problem, never unknown.
    assert count == (INT64_MAX if "can count" in words else None) and words in problem


def test_a_long_value_is_clipped_in_the_problem():
    problem = parse_count("1" * 10000 + "x")[1]
    assert "(10001 characters)" in problem and len(problem) < 200


QUANTITYISH = st.text(alphabet="0123456789.+-eEinumkKMGTPx \u0663", max_size=200)
SHAPED = st.builds(
    lambda sign, whole, fraction, suffix: sign + whole + fraction + suffix,
    st.sampled_from(["", "+", "-"]),
    st.text(alphabet="0123456789", max_size=60),
    st.one_of(st.just(""), st.text(alphabet="0123456789", max_size=60).map(lambda d: "." + d)),
    st.one_of(
        st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
        st.integers(-(2**40), 2**40).map(lambda e: f"e{e}"),
    ),
)


@settings(max_examples=300, deadline=500)
@given(st.one_of(QUANTITYISH, SHAPED))
def test_any_text_gives_a_value_or_a_clean_problem_quickly(text):
    quantity, problem = parse_quantity(text)
    assert (quantity is None) != (problem is None)
    if quantity is not None:
        assert quantity.canonical()


@settings(max_examples=300, deadline=500)
@given(SHAPED)
def test_canonical_forms_round_trip(text):
    quantity, problem = parse_quantity(text)
    if quantity is None:
        return
    canonical = quantity.canonical()
    _sign, _digits, exponent = Decimal(canonical.rstrip("KMGTPEinumk") or "0").as_tuple()
    if not -(2**31) <= exponent < 2**31:
        return  # beyond int32, apimachinery's own exponent wraps
    again, problem = parse_quantity(canonical)
    assert problem is None and again == quantity and again.canonical() == canonical
