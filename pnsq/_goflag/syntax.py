"""Go's value syntax: parsing and printing ints, floats, bools and durations exactly as Go does.

The daemons' users pass values in Go syntax and expect Go's error texts back, so
:mod:`pnsq._goflag.flags` (and the daemons' own flag types) parse and print values with these
ports of
Go's ``strconv`` and ``time`` functions (checked against Go 1.26):

* int: ``strconv.ParseInt(s, 0, 64)``: ``0x``/``0o``/``0b`` prefixes, a leading ``0`` means octal,
  ``_`` digit separators;
* float: ``strconv.ParseFloat(s, 64)``, including hex floats and ``inf``/``nan``;
* bool: ``1 0 t f T F true false TRUE FALSE True False``;
* duration: ``time.ParseDuration`` (``"1h30m"``, ``"250ms"``, ``"-1s"``, a bare ``"0"``), returned
  as nanoseconds;
* printing: ``%q`` (:func:`go_quote`), ``time.Duration.String`` and ``%v`` of a float64.

A parser raises :class:`FlagValueError` whose message is the reason Go's flag package prints
after the final colon.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import cast

PARSE_ERROR = "parse error"  # Go flag's errParse
RANGE_ERROR = "value out of range"  # Go flag's errRange
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_NS_PER_UNIT = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000}  # µ, μ
_NS_PER_UNIT.update(s=1_000_000_000, m=60_000_000_000, h=3_600_000_000_000)
_QUOTE_ESCAPES = {ch: "\\" + letter for ch, letter in zip("\a\b\f\n\r\t\v", "abfnrtv", strict=True)}


class FlagValueError(ValueError):
    """Raised by a value parser; the message is the reason Go prints after the final colon."""


def go_quote(text: str) -> str:
    """Quote like Go's ``strconv.Quote`` (``%q``); surrogate-escaped bytes become ``\\xNN``."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif ch in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _time_quote(text: str) -> str:
    """Quote like Go's ``time`` package: bytes outside printable ASCII become ``\\xNN``."""
    out = ['"']
    for ch in text:
        if " " <= ch < "\x80":
            out.append("\\" + ch if ch in '"\\' else ch)
        else:
            out.extend(f"\\x{byte:02x}" for byte in ch.encode("utf-8", "surrogateescape"))
    out.append('"')
    return "".join(out)


def parse_go_bool(text: str) -> bool:
    """Parse like ``strconv.ParseBool``."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise FlagValueError(PARSE_ERROR)


def _underscore_ok(text: str) -> bool:
    """Port of strconv's ``underscoreOK``: ``_`` only between digits (or after a base prefix)."""
    saw = "^"
    i = 0
    if text[:1] in ("+", "-"):
        text = text[1:]
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1] in "bBoOxX":
        i, saw, hexadecimal = 2, "0", text[1] in "xX"
    for ch in text[i:]:
        if "0" <= ch <= "9" or (hexadecimal and ch in "abcdefABCDEF"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def parse_go_int(text: str, bits: int = 64) -> int:
    """Parse like ``strconv.ParseInt(text, 0, bits)``; errors carry Go flag's reason text."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body:
        raise FlagValueError(PARSE_ERROR)
    base, digits = 10, body
    if body[0] == "0":
        if len(body) >= 3 and body[1] in "bBoOxX":
            base, digits = {"b": 2, "o": 8, "x": 16}[body[1].lower()], body[2:]
        else:
            base, digits = 8, body[1:]
    magnitude, underscores = 0, False
    for ch in digits:
        if ch == "_":
            underscores = True
            continue
        if "0" <= ch <= "9":
            digit = ord(ch) - ord("0")
        elif ch.isascii() and ch.isalpha():
            digit = ord(ch.lower()) - ord("a") + 10
        else:
            raise FlagValueError(PARSE_ERROR)
        if digit >= base:
            raise FlagValueError(PARSE_ERROR)
        magnitude = magnitude * base + digit
        if magnitude >= 1 << 64:
            raise FlagValueError(RANGE_ERROR)
    if underscores and not _underscore_ok(body):
        raise FlagValueError(PARSE_ERROR)
    negative = text[0] == "-"
    limit = 1 << (bits - 1)
    if magnitude > limit or (magnitude == limit and not negative):
        raise FlagValueError(RANGE_ERROR)
    return -magnitude if negative else magnitude


def _scan_go_float(text: str) -> bool:
    """Check ``text`` against strconv's ``readFloat`` grammar; return whether it is hex."""
    i, end = 0, len(text)
    if i < end and text[i] in "+-":
        i += 1
    hexadecimal = i + 2 < end and text[i] == "0" and text[i + 1] in "xX"
    i += 2 if hexadecimal else 0
    saw_dot = saw_digits = underscores = False
    while i < end:
        ch = text[i]
        if ch == "_":
            underscores = True
        elif ch == ".":
            if saw_dot:
                break
            saw_dot = True
        elif "0" <= ch <= "9" or (hexadecimal and ch in "abcdefABCDEF"):
            saw_digits = True
        else:
            break
        i += 1
    if not saw_digits:
        raise FlagValueError(PARSE_ERROR)
    if i < end and text[i] in ("pP" if hexadecimal else "eE"):
        i += 1
        if i < end and text[i] in "+-":
            i += 1
        if i >= end or not "0" <= text[i] <= "9":
            raise FlagValueError(PARSE_ERROR)
        while i < end and ("0" <= text[i] <= "9" or text[i] == "_"):
            underscores = underscores or text[i] == "_"
            i += 1
    elif hexadecimal:
        raise FlagValueError(PARSE_ERROR)  # a hex mantissa needs a 'p' exponent
    if i != end or (underscores and not _underscore_ok(text)):
        raise FlagValueError(PARSE_ERROR)
    return hexadecimal


def parse_go_float(text: str) -> float:
    """Parse like ``strconv.ParseFloat(text, 64)``; overflow is an error, underflow is not."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if body.lower() in ("inf", "infinity"):
        return -math.inf if text[0] == "-" else math.inf
    if text.lower() == "nan":  # Go accepts no sign on NaN
        return math.nan
    hexadecimal = _scan_go_float(text)
    clean = text.replace("_", "")
    try:
        value = float.fromhex(clean) if hexadecimal else float(clean)
    except OverflowError:
        raise FlagValueError(RANGE_ERROR) from None
    if math.isinf(value):
        raise FlagValueError(RANGE_ERROR)
    return value


def parse_go_duration(text: str) -> int:
    """Parse like ``time.ParseDuration``; returns nanoseconds. Errors carry Go's ``time`` text."""
    quoted = _time_quote(text)
    invalid = FlagValueError(f"time: invalid duration {quoted}")
    rest, negative = text, False
    if rest[:1] in ("+", "-"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise invalid
    total = 0
    while rest:
        if not (rest[0] == "." or "0" <= rest[0] <= "9"):
            raise invalid
        i = 0
        while i < len(rest) and "0" <= rest[i] <= "9":
            i += 1
        digits = rest[:i].lstrip("0") or "0"
        whole = int(digits) if len(digits) <= 19 else 1 << 64
        if whole > 1 << 63:
            raise invalid
        pre, rest = i > 0, rest[i:]
        frac, scale, post = 0, 1.0, False
        if rest[:1] == ".":
            i = 1
            overflow = False
            while i < len(rest) and "0" <= rest[i] <= "9":
                candidate = frac * 10 + ord(rest[i]) - ord("0")
                if not overflow and frac <= ((1 << 63) - 1) // 10 and candidate <= 1 << 63:
                    frac, scale = candidate, scale * 10
                else:
                    overflow = True
                i += 1
            post, rest = i > 1, rest[i:]
        if not pre and not post:
            raise invalid
        i = 0
        while i < len(rest) and not (rest[i] == "." or "0" <= rest[i] <= "9"):
            i += 1
        if i == 0:
            raise FlagValueError(f"time: missing unit in duration {quoted}")
        unit_name, rest = rest[:i], rest[i:]
        unit = _NS_PER_UNIT.get(unit_name)
        if unit is None:
            raise FlagValueError(
                f"time: unknown unit {_time_quote(unit_name)} in duration {quoted}"
            )
        if whole > (1 << 63) // unit:
            raise invalid
        value = whole * unit
        if frac > 0:
            value += int(float(frac) * (float(unit) / scale))
            if value > 1 << 63:
                raise invalid
        total += value
        if total > 1 << 63:
            raise invalid
    if negative:
        return -total
    if total > (1 << 63) - 1:
        raise invalid
    return total


def _frac_digits(value: int, precision: int) -> tuple[str, int]:
    """Port of time's ``fmtFrac``: drop ``precision`` digits, keep them minus trailing zeros."""
    digits: list[str] = []
    for _ in range(precision):
        if digits or value % 10:
            digits.append(str(value % 10))
        value //= 10
    return ("." + "".join(reversed(digits)) if digits else ""), value


def format_go_duration(nanoseconds: int) -> str:
    """Format like Go's ``time.Duration.String`` (``"1m0s"``, ``"250ms"``, ``"1h30m0s"``)."""
    u = abs(nanoseconds)
    if u == 0:
        return "0s"
    if u < 1_000_000_000:
        precision, unit = (0, "ns") if u < 1_000 else (3, "\u00b5s") if u < 1_000_000 else (6, "ms")
        frac, u = _frac_digits(u, precision)
        text = f"{u}{frac}{unit}"
    else:
        frac, u = _frac_digits(u, 9)
        text = f"{u % 60}{frac}s"
        if u >= 60:
            text = f"{u // 60 % 60}m{text}"
            if u >= 3600:
                text = f"{u // 3600}h{text}"
    return "-" + text if nanoseconds < 0 else text


def format_go_float(value: float) -> str:
    """Format like Go's ``%v`` (``strconv.FormatFloat(v, 'g', -1, 64)``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    parsed = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, parsed.digits))
    point = len(digits) + cast(int, parsed.exponent)  # value = 0.<digits> * 10**point
    digits = digits.rstrip("0")
    exponent = point - 1
    if exponent < -4 or exponent >= 6:  # Go's %e threshold for the shortest precision
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"
