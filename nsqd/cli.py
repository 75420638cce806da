"""``nsqd`` console script: nsqd's flags in Go flag syntax, then run until a signal."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import trio

from goflag.flags import parse_or_exit

from . import __version__
from .app import NSQD_VERSION, main as run_main
from .option_flags import nsqd_flagset, options_from_flags
from .options import OptionsError

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags (exit 2 on a bad one, as Go's flag package does) and run nsqd."""
    args = sys.argv[1:] if argv is None else list(argv)
    parsed = parse_or_exit(nsqd_flagset(), args)
    try:
        options = options_from_flags(parsed)
    except OptionsError as exc:
        print(f"FATAL: {exc}", file=sys.stderr)  # noqa: T201 - the CLI's own output
        raise SystemExit(1) from exc
    if options.show_version:
        print(f"nsqd v{NSQD_VERSION} (pnsq {__version__})")  # noqa: T201
        return
    logging.basicConfig(
        level=_LEVELS.get(options.log_level, logging.INFO),
        format=f"{options.log_prefix}%(asctime)s %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    trio.run(run_main, options)


if __name__ == "__main__":
    main()
