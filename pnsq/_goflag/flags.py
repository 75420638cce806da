"""Command-line flags with the semantics of Go's ``flag`` package.

nsqd and nsqlookupd are Go programs, and their users (and the stock clients' test harnesses) pass
flags in Go syntax: ``-flag=value``, ``--flag value``, bare booleans, repeatable flags. This module
reproduces that behaviour, with Go's exact error texts and usage layout (checked against Go 1.26
and a real nsqd 1.3.0 binary). It knows no daemon's flags: :mod:`lookupd.config.options` holds
nsqlookupd's table (and :mod:`nsqd.config.flags` nsqd's).
Values are read and shown in Go's syntax (:mod:`pnsq._goflag.syntax`); durations are
float seconds.

``FlagSet.parse`` is pure: it raises :class:`FlagError` (``str()`` is Go's message) or
:class:`HelpRequested`. :func:`parse_or_exit` adds Go's ``ExitOnError`` behaviour: the message and
the usage go to stderr, then exit status 2 (0 for ``-h``/``-help``). A flag's setter signals a
bad value by raising :class:`FlagValueError` (re-exported from :mod:`pnsq._goflag.syntax`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TextIO, TypeVar, cast

from pnsq._goflag.syntax import (
    PARSE_ERROR,
    FlagValueError as FlagValueError,
    format_go_duration,
    format_go_float,
    go_quote,
    parse_go_bool,
    parse_go_duration,
    parse_go_float,
    parse_go_int,
)

T = TypeVar("T")


class FlagError(Exception):
    """The command line is invalid; ``str(exc)`` is exactly what Go's flag package prints."""


class HelpRequested(Exception):
    """``-h``/``-help`` was given and no flag of that name is defined."""


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
