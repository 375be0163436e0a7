# Copyright: confidential.tee contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes quantities, read exactly as the API server reads them, in bounded time.

Pure Python, standard library only. The rules follow ``k8s.io/apimachinery`` v0.36.3 (Kubernetes 1.36),
``pkg/api/resource/quantity.go`` (``ParseQuantity``, ``parseQuantityString``, ``UnmarshalJSON``,
``CanonicalizeBytes``) and ``suffix.go``; their own test table is ``quantity_test.go``.

* Syntax: an optional sign, ASCII digits with an optional ``.`` and fraction (``1.``, ``.5`` and even ``.`` or
  an empty number are accepted), then a suffix: binary ``Ki Mi Gi Ti Pi Ei``, decimal ``n u m "" k M G T P E``,
  or ``e``/``E`` and a signed integer. ``1e`` is refused (a lone ``e`` is no suffix), ``1E`` is one exa,
  ``1Ex`` is refused. Text around the quantity is trimmed only when it comes from JSON (``UnmarshalJSON``
  trims Go's white space), so this module trims the same characters.
* Limits: the exponent must fit a 64-bit integer and is then truncated to 32 bits (``int32(parsed)``), so
  ``1e4294967296`` is 1; a value with more than 9 decimal places is rounded away from zero to the next
  nano (``0.1n`` is ``1n``); a binary-suffixed value is capped at 2^63-1 in magnitude; a decimal one is not
  capped at all (``1e1000000000`` is exactly 10^1000000000).
* A JSON number is read from its text, like a string (``UnmarshalJSON`` strips only the quotes). Python's
  ``json`` has already turned it into an ``int`` or a ``float`` by then: an ``int`` is exact, a finite
  ``float`` is read from its shortest text, and ``inf``/``nan`` (the JSON ``1e400``, ``NaN``) are refused.

Values are :class:`decimal.Decimal` (exact, any length, any exponent) and are never expanded into an
integer unless they are known to be small, so ``1e1000000000`` or a 10,000-digit string cost microseconds
where a naive ``10 ** exponent`` never returns (apimachinery itself rescales such values digit by digit).
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal

from ansible_collections.confidential.tee.plugins.module_utils.common.errors import TeeError

DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
INT64_MAX = 2**63 - 1
NANO = Decimal("1E-9")
# parseQuantityString's scan: sign, digits, an optional fraction, then letters of the suffix alphabet, an
# optional sign and digits, and nothing else. ASCII digits only (Python's \d would take any script's digits).
_SYNTAX = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_EXPONENT = re.compile(r"[eE]([+-]?)0*([0-9]+)")
# Go's unicode.IsSpace (strings.TrimSpace): Python's str.strip() would also take \x1c-\x1f.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
# ParseQuantity's fast path keeps values of at most 18 digits (maxInt64Factors) exact without rounding.
_FAST_DIGITS = 18


class QuantityError(TeeError):
    """Text that the API server would refuse as a quantity; the message says why."""


def _wrap32(number: int) -> int:
    """Go's int32 conversion and arithmetic: two's complement, 32 bits."""
    return (number + 2**31) % 2**32 - 2**31


def _context(digits: int) -> Context:
    """Exact arithmetic on ``digits`` significant digits, with every exponent a quantity can have."""
    return Context(prec=max(digits, 1) + 2, rounding=ROUND_UP, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _clip(text: str) -> str:
    """At most about 40 characters of ``text`` (a 10,000-digit value would swamp the report)."""
    return text if len(text) <= 40 else "%s... (%d characters)" % (text[:24], len(text))


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else "%r... (%d characters)" % (text[:24], len(text))


class Quantity:
    """An exact quantity: ``amount`` (:class:`~decimal.Decimal`) and the ``format`` its suffix chose."""

    __slots__ = ("amount", "format")

    def __init__(self, amount: Decimal, fmt: str = DECIMAL_SI):
        self.amount = amount
        self.format = fmt

    def __eq__(self, other):
        if isinstance(other, Quantity):
            return self.amount == other.amount
        return self.amount == other

    def __hash__(self):
        return hash(self.amount)

    def __repr__(self):
        return "Quantity(%r)" % self.canonical()

    def __str__(self):
        return self.canonical()

    def is_whole(self) -> bool:
        _sign, digits, exponent = self.amount.as_tuple()
        return exponent >= 0 or not any(digits[exponent:])

    def canonical(self) -> str:
        """The form the API server writes back (``CanonicalizeBytes``): ``1.5`` is ``1500m``, ``1.5Gi`` ``1536Mi``.

        One deliberate difference: a DecimalSI value whose exponent has no SI letter (above ``E``, say
        ``1000E``) is written with ``e`` here; apimachinery v0.36 writes the bare mantissa (``1``), losing it.
        """
        if self.amount.is_zero():
            return "0"
        sign = "-" if self.amount.is_signed() else ""
        magnitude = self.amount.copy_abs()
        if self.format == BINARY_SI and magnitude >= 1024 and self.is_whole():
            # Binary amounts are capped at 2^63-1, so the integer is small.
            mantissa, power = int(magnitude), 0
            while mantissa % 1024 == 0:
                mantissa, power = mantissa // 1024, power + 10
            suffix = {exp: name for name, exp in BINARY_SUFFIXES.items()}.get(power, "")
            return sign + str(mantissa) + suffix
        _sign, digits, exponent = magnitude.as_tuple()
        text = "".join(map(str, digits)).rstrip("0")
        exponent += len(digits) - len(text)
        text += "0" * (exponent % 3)
        exponent -= exponent % 3
        if self.format == DECIMAL_EXPONENT or exponent not in DECIMAL_SUFFIXES.values():
            return sign + text + ("e%d" % exponent if exponent else "")
        return sign + text + {exp: name for name, exp in DECIMAL_SUFFIXES.items()}[exponent]


def _suffix(suffix: str) -> tuple[int, int, str]:
    """``(base, exponent, format)`` of a suffix (``suffix.go`` ``interpret``), or :class:`QuantityError`."""
    if suffix in DECIMAL_SUFFIXES:
        return 10, DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in BINARY_SUFFIXES:
        return 2, BINARY_SUFFIXES[suffix], BINARY_SI
    match = _EXPONENT.fullmatch(suffix)
    if match is None:
        raise QuantityError("unknown suffix %s" % _shown(suffix))
    sign, digits = match.groups()
    # strconv.ParseInt(..., 64): beyond 64 bits is an error; within, Go keeps the low 32 bits.
    exponent = int(digits) * (-1 if sign == "-" else 1) if len(digits) <= 19 else 2**64
    if not -(2**63) <= exponent <= INT64_MAX:
        raise QuantityError("exponent %s that does not fit 64 bits" % _shown(suffix[1:]))
    return 10, _wrap32(exponent), DECIMAL_EXPONENT


def _round_up_to_nano(amount: Decimal) -> Decimal:
    """Away from zero to a whole number of nanos, as ParseQuantity rounds (``inf.RoundUp`` at scale 9)."""
    if amount.is_zero() or amount.as_tuple().exponent >= -9:
        return amount
    if amount.adjusted() < -9:
        # Smaller than one nano: computed without rescaling, whatever the exponent.
        return NANO.copy_sign(amount)
    return amount.quantize(NANO, context=_context(amount.adjusted() + 10))


def _decimal(negative: bool, digits: str, exponent: int) -> Decimal:
    return Decimal("%s%sE%d" % ("-" if negative else "", digits or "0", exponent))


def parse_text(text: str) -> Quantity:
    """``ParseQuantity``: a :class:`Quantity`, or :class:`QuantityError` saying why the API server refuses it."""
    if not text:
        raise QuantityError("an empty string is not a quantity")
    match = _SYNTAX.fullmatch(text)
    if match is None:
        raise QuantityError("%s is not a quantity: expected a number with an optional SI suffix" % _shown(text))
    sign, whole, fraction, suffix = match.groups()
    negative, fraction = sign == "-", fraction or ""
    try:
        base, exponent, fmt = _suffix(suffix)
    except QuantityError as exc:
        raise QuantityError("%s has an %s" % (_shown(text), exc)) from None
    number = whole.lstrip("0")
    if base == 10 and len(number or "0") + len(fraction) <= _FAST_DIGITS:
        scale = _wrap32(exponent - len(fraction))
        if scale >= -9:
            # The fast path: an exact int64 mantissa and scale, no rounding and no cap.
            return Quantity(_decimal(negative, number + fraction, scale), fmt)
    # The binary fast path (its precision estimate is 15 - digits - exponent*3/10 - 1): exact unless the
    # product overflows int64, which sends it to the slow path below.
    fast_binary = base == 2 and not fraction and len(number or "0") <= 14 - 3 * (exponent // 10)
    if fast_binary and int(number or "0") << exponent <= INT64_MAX:
        return Quantity(_decimal(negative, str(int(number or "0") << exponent), 0), fmt)
    if not whole and not fraction:
        # The slow path reads the number with inf.Dec, which needs a digit (".e-10", "Ei" are refused).
        raise QuantityError("%s has no digits" % _shown(text))
    digits = (number + fraction) or "0"
    if base == 10:
        amount = _decimal(negative, digits, -_wrap32(len(fraction) + _wrap32(-exponent)))
    else:
        amount = _decimal(negative, digits, -len(fraction))
        amount = amount.fma(2**exponent, 0, context=_context(len(digits) + 19))
    amount = _round_up_to_nano(amount)
    if fmt == BINARY_SI:
        if amount.copy_abs() > INT64_MAX:
            amount = Decimal(INT64_MAX).copy_sign(amount)
        if 0 < amount.copy_abs() < 1:
            fmt = DECIMAL_SI
    return Quantity(amount, fmt)


def parse_quantity(value) -> tuple[Quantity | None, str | None]:
    """``(quantity, None)`` or ``(None, problem)`` for a value of a ResourceList as JSON gives it."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None, "%s is a %s, not a quantity (a string such as '1' or '100m')" % (
            _clip(repr(value)),
            "JSON null" if value is None else type(value).__name__,
        )
    if isinstance(value, int):
        return Quantity(Decimal(value)), None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, (
                "the JSON number %r is not a finite number (a number too large for a float, such as 1e400, or NaN): "
                "write quantities as strings" % value
            )
        value = repr(value)
    try:
        return parse_text(value.strip(_GO_SPACE)), None
    except QuantityError as exc:
        return None, str(exc)


def parse_count(value) -> tuple[int | None, str | None]:
    """A whole, non-negative count (extended resources), else ``(None, problem)``; a count above the scheduler's
    int64 is ``(2^63-1, problem)``: known to be larger than any count, whatever its spelling, never unknown.

    The scheduler reads extended resources with ``Quantity.Value()`` (an int64), and the API server refuses a
    fraction of an integer resource: ``1500m`` of ``tdx.intel.com/keys`` is a problem, never rounded.
    """
    quantity, problem = parse_quantity(value)
    if quantity is None:
        return None, problem
    shown = _shown(value if isinstance(value, str) else quantity.canonical())
    if quantity.amount < 0:
        return None, "%s is negative (extended resources are counts)" % shown
    if not quantity.is_whole():
        return None, "%s is not a whole number (extended resources are counts)" % shown
    if quantity.amount > INT64_MAX:
        # Known to be more than any int64, however it is spelled ("99999999999999999999999", "1e23", 10,000 digits):
        # counted as the most an int64 holds, so comparisons, findings and metrics keep working, and said.
        return INT64_MAX, (
            "%s is more than the scheduler can count: counted here as 2^63-1 (%d); the scheduler reads it with "
            "Quantity.Value(), which overflows int64 (apimachinery v0.37.2 scale_int.go scaledValue), so what it "
            "schedules there is unpredictable: fix the advertiser" % (shown, INT64_MAX)
        )
    return int(quantity.amount), None
