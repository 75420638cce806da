"""nsqd's ``--config`` file, read as nsqd 1.3.0 reads it.

The file is TOML; each key is an option's name: its flag's with ``-`` → ``_``, except the four
nsqd names otherwise (``id`` for ``--node-id``, ``nsqlookupd_tcp_addresses``,
``auth_http_addresses``, ``e2e_processing_latency_percentiles``). A flag given on the command
line wins over the file, the file over the default (go-options' ``Resolve``). Keys that name no
option are ignored, as are the flags that are not options (``version``, ``config``,
``verbose``, ``worker-id``).

A value is taken as nsqd takes it: a string is read as its flag would read it (``"60s"``, a
bare ``"100"`` for an integer, ``"true"``, ``"a:1,b:2"`` for a list); an integer for a
duration counts milliseconds; an integer for a boolean is true when it is 0 (go-options
compares it with 0: nsqd reads ``snappy = 1`` as false, and so does pnsq, so that one file
means the same to both); a list of strings or numbers for the repeatable options. Where nsqd
cannot take a value (a float for an integer, a table anywhere) it exits with a fatal error, and
so does pnsq (:class:`~nsqd.config.options.OptionsError`); a string option given a number or a
boolean, which nsqd would set to Go's ``%!s(int64=5)``, is refused too.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pnsq._goflag.flags import Flag, FlagSet, FlagValueError, ParseResult
from pnsq._goflag.syntax import format_go_float

from .options import OptionsError, attribute_name
from .runtime import OPTIONS

#: each option's key in the file, by its :class:`~nsqd.config.options.Options` attribute: nsqd's
#: config names, those ``GET /config/<name>`` answers to (the flag's name with ``-`` → ``_``
#: but where nsqd's Options has a ``cfg`` tag); a flag with none (``version``, ``config``,
#: ``verbose``, ``worker-id``) is not an option and is not read from the file
_KEYS = {attribute: key for key, (attribute, _) in OPTIONS.items()}


def load_config(path: str) -> dict[str, Any]:
    """The TOML document at ``path``; nsqd's fatal error if it cannot be read or parsed."""
    try:
        with Path(path).open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise OptionsError(f"failed to load config file {path} - {exc}") from exc


def resolve(
    parsed: ParseResult, flags: FlagSet, kinds: Mapping[str, str], document: Mapping[str, Any]
) -> dict[str, object]:
    """Every flag's value: the command line's where given, else the file's, else the default.
    ``kinds`` maps each flag to its kind in nsqd's flag table (``string``, ``int``, ``bool``,
    ``duration``, ``list`` or one of nsqd's own flag types)."""
    values = dict(parsed.values)
    for name, kind in kinds.items():
        key = _KEYS.get(attribute_name(name))
        if key is None or key not in document or name in parsed.explicit:
            continue
        flag = flags.lookup(name)
        assert flag is not None, name
        try:
            values[name] = _coerce(flag, kind, document[key])
        except (FlagValueError, TypeError) as exc:
            raise OptionsError(
                f"failed to resolve config file option {key} = {document[key]!r} - {exc}"
            ) from None
    return values


def _coerce(flag: Flag, kind: str, value: object) -> object:
    """``value`` from the file as the option ``flag`` (of ``kind``) holds it."""
    if kind == "list" or kind == "percentiles":
        items = value.split(",") if isinstance(value, str) else _items(value)
        current: object = ()
        for item in items:
            current = flag.setter(item, current)
        return current
    if kind == "string" and not isinstance(value, str):
        raise TypeError(f"a {type(value).__name__} is no value for a string option")
    if isinstance(value, bool):
        return flag.setter("true" if value else "false", flag.default)
    if isinstance(value, int):
        if kind == "duration":
            return value / 1000  # milliseconds
        if kind == "bool":
            return value == 0  # go-options: an integer is a boolean when it is 0
        return flag.setter(str(value), flag.default)
    if isinstance(value, str):
        if kind == "int" and not value.lstrip("+-").isdigit():  # strconv.ParseInt, base 10
            raise FlagValueError(f"strconv.ParseInt: parsing {value!r}: invalid syntax")
        return flag.setter(value, flag.default)
    raise TypeError(f"a {type(value).__name__} is no value for a {kind or 'bool'} option")


def _items(value: object) -> list[str]:
    """A TOML array of strings or numbers as the texts a repeatable flag takes."""
    if not isinstance(value, list):
        raise TypeError(f"a {type(value).__name__} is no value for a list option")
    texts: list[str] = []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            texts.append(format_go_float(float(item)))
        else:
            raise TypeError(f"a {type(item).__name__} is no value in a list option")
    return texts
