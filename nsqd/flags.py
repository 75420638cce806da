"""Command-line flags with the semantics of Go's ``flag`` package.

nsqd and nsqlookupd are Go programs, and their users (and the stock clients' test harnesses) pass
flags in Go syntax: ``-flag=value``, ``--flag value``, bare booleans, repeatable flags. This module
reproduces that behaviour, with Go's exact error texts and usage layout (checked against Go 1.26
and a real nsqd 1.3.0 binary). It knows nothing about nsqd; :mod:`nsqd.options` holds its table.

Value syntax follows Go's parsers:

* int: ``strconv.ParseInt(s, 0, 64)``: ``0x``/``0o``/``0b`` prefixes, a leading ``0`` means octal,
  ``_`` digit separators;
* float: ``strconv.ParseFloat(s, 64)``, including hex floats and ``inf``/``nan``;
* bool: ``1 0 t f T F true false TRUE FALSE True False``;
* duration: ``time.ParseDuration`` (``"1h30m"``, ``"250ms"``, ``"-1s"``, a bare ``"0"``), returned
  as float seconds.

``FlagSet.parse`` is pure: it raises :class:`FlagError` (``str()`` is Go's message) or
:class:`HelpRequested`. :func:`parse_or_exit` adds Go's ``ExitOnError`` behaviour: the message and
the usage go to stderr, then exit status 2 (0 for ``-h``/``-help``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import TextIO, TypeVar, cast

T = TypeVar("T")

PARSE_ERROR = "parse error"  # Go flag's errParse
RANGE_ERROR = "value out of range"  # Go flag's errRange
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_NS_PER_UNIT = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000}  # µ, μ
_NS_PER_UNIT.update(s=1_000_000_000, m=60_000_000_000, h=3_600_000_000_000)
_QUOTE_ESCAPES = {ch: "\\" + letter for ch, letter in zip("\a\b\f\n\r\t\v", "abfnrtv", strict=True)}


class FlagError(Exception):
    """The command line is invalid; ``str(exc)`` is exactly what Go's flag package prints."""


class HelpRequested(Exception):
    """``-h``/``-help`` was given and no flag of that name is defined."""


class FlagValueError(ValueError):
    """Raised by a value parser; the message is the reason Go prints after the final colon."""


# ---------------------------------------------------------------- Go value syntax


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


# ---------------------------------------------------------------- flag sets


@dataclass(frozen=True, slots=True)
class Flag:
    """One defined flag. ``setter(text, current)`` returns the new value or raises
    :class:`FlagValueError`; ``default_text``/``zero_text`` are Go's ``DefValue`` and the zero
    value's ``String()``: the usage shows ``(default …)`` only when they differ."""

    name: str
    usage: str
    default: object
    setter: Callable[[str, object], object]
    type_name: str  # shown after the name in the usage; "" for boolean flags
    is_bool: bool  # may be given bare (``-flag`` means ``-flag=true``)
    default_text: str
    zero_text: str
    quoted: bool = False  # string flags show their default %q-quoted


@dataclass(frozen=True, slots=True)
class ParseResult:
    """What :meth:`FlagSet.parse` found: every flag's value, the positional arguments left
    after the flags, and the names of the flags given explicitly (Go's ``Visit``)."""

    values: Mapping[str, object]
    args: tuple[str, ...]
    explicit: frozenset[str]

    def _get(self, name: str, kind: type[T]) -> T:
        value = self.values[name]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"flag -{name} is {type(value).__name__}, not {kind.__name__}")
        return value

    def get_str(self, name: str) -> str:
        """The value of a string flag."""
        return self._get(name, str)

    def get_int(self, name: str) -> int:
        """The value of an int flag."""
        return self._get(name, int)

    def get_float(self, name: str) -> float:
        """The value of a float or duration flag (durations are in seconds)."""
        return self._get(name, float)

    def get_bool(self, name: str) -> bool:
        """The value of a boolean flag."""
        return self._get(name, bool)

    def get_list(self, name: str) -> tuple[str, ...]:
        """The values of a repeatable string flag, in command-line order."""
        return tuple(str(item) for item in self._get(name, tuple))


class FlagSet:
    """A named set of flags, parsed with Go ``flag`` semantics (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._flags: dict[str, Flag] = {}

    def __iter__(self) -> Iterator[Flag]:
        """The flags in lexical order, as Go's ``VisitAll``."""
        return iter(sorted(self._flags.values(), key=lambda flag: flag.name))

    def lookup(self, name: str) -> Flag | None:
        """The flag called ``name``, if defined."""
        return self._flags.get(name)

    def add(self, flag: Flag) -> None:
        """Define ``flag``; defining a name twice is a programming error, as in Go."""
        if flag.name in self._flags:
            raise ValueError(f"{self.name} flag redefined: {flag.name}")
        self._flags[flag.name] = flag

    def add_string(self, name: str, default: str, usage: str) -> None:
        """A string flag."""
        self.add(Flag(name, usage, default, lambda t, _: t, "string", False, default, "", True))

    def add_int(self, name: str, default: int, usage: str) -> None:
        """A 64-bit int flag (Go's ``Int``/``Int64``)."""
        self.add(Flag(name, usage, default, _set_int, "int", False, str(default), "0"))

    def add_float(self, name: str, default: float, usage: str) -> None:
        """A float64 flag."""
        text = format_go_float(default)
        self.add(Flag(name, usage, float(default), _set_float, "float", False, text, "0"))

    def add_bool(self, name: str, default: bool, usage: str) -> None:
        """A boolean flag: bare ``-name`` sets it; ``-name=false`` clears it."""
        text = "true" if default else "false"
        self.add(Flag(name, usage, default, _set_bool, "", True, text, "false"))

    def add_duration(self, name: str, default: float, usage: str) -> None:
        """A ``time.Duration`` flag; ``default`` and the parsed value are float seconds."""
        text = format_go_duration(round(default * 1e9))
        self.add(Flag(name, usage, float(default), _set_duration, "duration", False, text, "0s"))

    def add_list(self, name: str, usage: str, default: Sequence[str] = ()) -> None:
        """A repeatable string flag (nsq's ``StringArray``): each occurrence appends."""
        self.add_var(name, tuple(default), usage, _append, text=",".join)

    def add_var(
        self,
        name: str,
        default: T,
        usage: str,
        setter: Callable[[str, T], T],
        *,
        text: Callable[[T], str] = str,
        zero_text: str = "",
        type_name: str = "value",
        is_bool: bool = False,
    ) -> None:
        """A custom flag (Go's ``flag.Var``): ``setter(text, current)`` returns the new value.
        ``text`` renders a value as Go's ``String()``; ``is_bool`` is Go's ``IsBoolFlag``."""
        store = cast(Callable[[str, object], object], setter)
        type_shown = "" if is_bool else type_name
        self.add(Flag(name, usage, default, store, type_shown, is_bool, text(default), zero_text))

    def defaults(self) -> dict[str, object]:
        """Every flag's default value."""
        return {name: flag.default for name, flag in self._flags.items()}

    def parse(self, argv: Sequence[str]) -> ParseResult:
        """Parse ``argv`` (without the program name) like Go's ``FlagSet.Parse``."""
        values = self.defaults()
        explicit: set[str] = set()
        i = 0
        while i < len(argv):
            arg = argv[i]
            if len(arg) < 2 or arg[0] != "-":
                break
            if arg == "--":
                i += 1
                break
            name = arg[2:] if arg[1] == "-" else arg[1:]
            if not name or name[0] in "-=":
                raise FlagError(f"bad flag syntax: {arg}")
            i += 1
            equals = name.find("=", 1)
            has_value = equals > 0
            value = name[equals + 1 :] if has_value else ""
            name = name[:equals] if has_value else name
            flag = self._flags.get(name)
            if flag is None:
                if name in ("help", "h"):
                    raise HelpRequested
                raise FlagError(f"flag provided but not defined: -{name}")
            if flag.is_bool:
                try:
                    values[name] = flag.setter(value if has_value else "true", values[name])
                except FlagValueError as exc:
                    if has_value:
                        message = f"invalid boolean value {go_quote(value)} for -{name}: {exc}"
                        raise FlagError(message) from None
                    raise FlagError(f"invalid boolean flag {name}: {exc}") from None
            else:
                if not has_value:
                    if i >= len(argv):
                        raise FlagError(f"flag needs an argument: -{name}")
                    value, i = argv[i], i + 1
                try:
                    values[name] = flag.setter(value, values[name])
                except FlagValueError as exc:
                    message = f"invalid value {go_quote(value)} for flag -{name}: {exc}"
                    raise FlagError(message) from None
            explicit.add(name)
        return ParseResult(MappingProxyType(values), tuple(argv[i:]), frozenset(explicit))

    def usage(self) -> str:
        """Go's default usage text: ``Usage of <name>:`` then ``PrintDefaults``."""
        lines = [f"Usage of {self.name}:\n" if self.name else "Usage:\n"]
        for flag in self:
            type_name, usage = flag.type_name, flag.usage
            start = usage.find("`")
            end = usage.find("`", start + 1) if start >= 0 else -1
            if end > start:  # a back-quoted word in the usage names the argument
                type_name = usage[start + 1 : end]
                usage = usage[:start] + type_name + usage[end + 1 :]
            head = f"  -{flag.name}" + (f" {type_name}" if type_name else "")
            line = head + ("\t" if len(head.encode()) <= 4 else "\n    \t")
            line += usage.replace("\n", "\n    \t")
            if flag.default_text != flag.zero_text:
                shown = go_quote(flag.default_text) if flag.quoted else flag.default_text
                line += f" (default {shown})"
            lines.append(line + "\n")
        return "".join(lines)


def _set_int(text: str, _current: object) -> int:
    return parse_go_int(text)


def _set_float(text: str, _current: object) -> float:
    return parse_go_float(text)


def _set_bool(text: str, _current: object) -> bool:
    return parse_go_bool(text)


def _set_duration(text: str, _current: object) -> float:
    try:
        return parse_go_duration(text) / 1e9
    except FlagValueError:
        raise FlagValueError(PARSE_ERROR) from None


def _append(text: str, current: tuple[str, ...]) -> tuple[str, ...]:
    return (*current, text)


def parse_or_exit(
    flagset: FlagSet, argv: Sequence[str], *, stderr: TextIO | None = None
) -> ParseResult:
    """Parse ``argv`` with Go's ``ExitOnError`` behaviour: on an error, print the message and the
    usage to stderr and exit with status 2; on ``-h``/``-help``, print the usage and exit 0."""
    out = sys.stderr if stderr is None else stderr
    try:
        return flagset.parse(argv)
    except HelpRequested:
        out.write(flagset.usage())
        out.flush()
        raise SystemExit(0) from None
    except FlagError as exc:
        out.write(f"{exc}\n{flagset.usage()}")
        out.flush()
        raise SystemExit(2) from None
