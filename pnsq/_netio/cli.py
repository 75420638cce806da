"""The daemons' console-script bootstrap: Go flag syntax, options, logging, then ``trio.run``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import trio

from pnsq._goflag.flags import FlagSet, ParseResult, parse_or_exit

from .limits import raise_open_files_limit

__all__ = ["LOG_LEVELS", "DaemonOptions", "run_daemon", "version_line"]

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
    to the hard limit (as Go does) and run ``run(options)`` on Trio."""
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
    trio.run(run, options)
