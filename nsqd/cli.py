"""``nsqd`` console script: nsqd's flags in Go flag syntax, then run until a signal."""

from __future__ import annotations

from collections.abc import Sequence

from pnsq._netio.cli import run_daemon, version_line

from . import __version__
from .app import NSQD_VERSION, main as run_main
from .config.flags import nsqd_flagset, options_from_flags
from .config.options import OptionsError


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags (exit 2 on a bad one, as Go's flag package does) and run nsqd."""
    run_daemon(
        argv,
        nsqd_flagset(),
        options_from_flags,
        OptionsError,
        version_line("nsqd", NSQD_VERSION, __version__),
        run_main,
    )


if __name__ == "__main__":
    main()
