"""``nsqd`` console script: nsqd's flags in Go flag syntax, then run until a signal."""

from __future__ import annotations

from collections.abc import Sequence

from pnsq._netio.cli import run_daemon, version_line

from . import NSQD_VERSION, __version__
from .config.flags import nsqd_flagset, options_from_flags
from .config.options import Options, OptionsError


async def _run(options: Options) -> None:
    # the daemon itself, imported only to run it: ``--version`` and a bad flag answer without
    # its ~300 modules (a client's test harness asks ``nsqd --version`` before each start)
    from .app import main

    await main(options)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags (exit 2 on a bad one, as Go's flag package does) and run nsqd."""
    run_daemon(
        argv,
        nsqd_flagset(),
        options_from_flags,
        OptionsError,
        version_line("nsqd", NSQD_VERSION, __version__),
        _run,
    )


if __name__ == "__main__":
    main()
