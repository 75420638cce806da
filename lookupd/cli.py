"""``nsqlookupd`` console script: nsqlookupd's flags in Go flag syntax, then run until a signal."""

from __future__ import annotations

from collections.abc import Sequence

from pnsq._netio.cli import run_daemon, version_line

from . import LOOKUPD_VERSION, __version__
from .config.options import Options, OptionsError, lookupd_flagset, options_from_flags


async def _run(options: Options) -> None:
    # the daemon itself, imported only to run it: ``--version`` and a bad flag answer without
    # its ~300 modules (a client's test harness asks ``nsqlookupd --version`` before each start)
    from .app import main

    await main(options)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags (exit 2 on a bad one, as Go's flag package does) and run nsqlookupd."""
    run_daemon(
        argv,
        lookupd_flagset(),
        options_from_flags,
        OptionsError,
        version_line("nsqlookupd", LOOKUPD_VERSION, __version__),
        _run,
    )


if __name__ == "__main__":
    main()
