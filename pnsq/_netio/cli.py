"""The daemons' console-script bootstrap: Go flag syntax, options, logging, then ``trio.run``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import trio

from pnsq._goflag.flags import FlagSet, ParseResult, parse_or_exit

from .limits import raise_open_files_limit

__all__ = [
    "LOG_LEVELS",
    "DaemonOptions",
    "describe_os_error",
    "fatal_exit",
    "run_daemon",
    "version_line",
]

#: the daemons' ``--log-level`` names as Python logging levels
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


def version_line(daemon: str, speaks: str, pnsq_version: str) -> str:
    """Go's ``<daemon> v<version> (built w/go1.x)`` shape: ``nsqd v1.3.0 (built w/pnsq-0.1.0)``
    (what ``--version`` prints and the first start-up log line says)."""
    return f"{daemon} v{speaks} (built w/pnsq-{pnsq_version})"


class DaemonOptions(Protocol):
    """What the bootstrap reads of a daemon's options."""

    @property
    def show_version(self) -> bool: ...

    @property
    def log_level(self) -> str: ...

    @property
    def log_prefix(self) -> str: ...


OptionsT = TypeVar("OptionsT", bound=DaemonOptions)


def run_daemon(
    argv: Sequence[str] | None,
    flagset: FlagSet,
    options_from_flags: Callable[[ParseResult], OptionsT],
    options_error: type[Exception],
    version_line: str,
    run: Callable[[OptionsT], Awaitable[object]],
) -> None:
    """Parse flags (exit 2 on a bad one, as Go's flag package does), build the options (exit 1
    with ``FATAL: <error>`` on an ``options_error``), print ``version_line`` for ``--version``,
    else set up logging, log ``version_line`` first (as nsqd does), raise the open-files limit
    to the hard limit (as Go does) and run ``run(options)`` on Trio. A start that fails on the
    machine (port in use, unusable data directory) prints one ``FATAL:`` line and exits 1,
    without a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    parsed = parse_or_exit(flagset, args)
    try:
        options = options_from_flags(parsed)
    except options_error as exc:
        print(f"FATAL: {exc}", file=sys.stderr)  # noqa: T201 - the CLI's own output
        raise SystemExit(1) from exc
    if options.show_version:
        print(version_line)  # noqa: T201
        return
    logging.basicConfig(
        level=LOG_LEVELS.get(options.log_level, logging.INFO),
        format=f"{options.log_prefix}%(asctime)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger(flagset.name).info("%s", version_line)  # Go's first line
    raise_open_files_limit(logging.getLogger(flagset.name))
    try:
        trio.run(run, options)
    except (OSError, SystemExit, BaseExceptionGroup) as exc:
        fatal = fatal_exit(exc)
        if fatal is None:
            raise
        line, status = fatal
        if line:
            print(line, file=sys.stderr)  # noqa: T201
        raise SystemExit(status) from None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def describe_os_error(exc: OSError) -> str:
    """``<strerror>`` (``: <filename>`` when it names one): what the user can act on, without
    Python's ``[Errno N]`` prefix."""
    text = exc.strerror or str(exc)
    return f"{text}: {exc.filename}" if exc.filename else text


def fatal_exit(exc: BaseException) -> tuple[str, int] | None:
    """The one stderr line and the exit status for a daemon that stopped at start on an
    ``OSError`` (a port in use, an unusable data directory) or a ``SystemExit`` (the daemon
    already logged why), however deep in Trio's exception groups; ``None`` for anything else
    (a bug: its traceback is the report). The line is empty when nothing more is to be said."""
    leaves = _leaves(exc)
    if not all(isinstance(leaf, OSError | SystemExit) for leaf in leaves):
        return None
    for leaf in leaves:
        if isinstance(leaf, OSError):
            return f"FATAL: {describe_os_error(leaf)}", 1
    for leaf in leaves:
        assert isinstance(leaf, SystemExit)
        if isinstance(leaf.code, str):
            return leaf.code, 1
        if leaf.code:
            return "", int(leaf.code)
    return "", 0
