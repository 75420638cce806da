"""Process limits set at daemon start: the open-files limit raised as Go programs do.

Go (since 1.19) raises its soft ``RLIMIT_NOFILE`` to the hard limit at start; nsqd and
nsqlookupd in Go therefore run with the hard limit, and so do pnsq's daemons.
"""

from __future__ import annotations

import logging
import resource

__all__ = ["open_files_limit", "raise_open_files_limit"]


def open_files_limit() -> int:
    """The current soft ``RLIMIT_NOFILE`` (``RLIM_INFINITY`` as is)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_open_files_limit(log: logging.Logger) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit and log the result once (a WARNING if
    the raise was refused); return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:  # e.g. a hard limit above the kernel's nr_open
            log.warning("open files limit: cannot raise %d to %d: %s", soft, hard, exc)
            return soft
    log.info("open files limit: %d (was %d, hard limit %d)", hard, soft, hard)
    return hard
