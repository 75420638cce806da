"""``nsqlookupd`` console script: nsqlookupd's flags in Go flag syntax, then run until a signal."""

from __future__ import annotations

from collections.abc import Sequence

from pnsq._netio.cli import run_daemon, version_line

from . import __version__
from .app import LOOKUPD_VERSION, main as run_main
from .config.options import OptionsError, lookupd_flagset, options_from_flags


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags (exit 2 on a bad one, as Go's flag package does) and run nsqlookupd."""
    run_daemon(
        argv,
        lookupd_flagset(),
        options_from_flags,
        OptionsError,
        version_line("nsqlookupd", LOOKUPD_VERSION, __version__),
        run_main,
    )


if __name__ == "__main__":
    main()
