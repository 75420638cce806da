"""The C allocator's settings for the daemon: glibc's ``malloc`` keeps large blocks instead of
returning them to the system after every message.

glibc serves a request above its mmap threshold with a fresh mapping and gives it back on
``free``; after the first such block is freed it raises the threshold to that block's size and
keeps at most twice that free at the top of its heap (``M_TRIM_THRESHOLD``), returning the rest.
A 1 MB message makes about 4 MB of short-lived blocks on its way through the daemon (the
socket reads, the parsed body, the encoded record, the disk read, the frames), so with 1 MB
messages the heap grew and shrank by megabytes for each one, and every page of it was faulted
in again: 3,000 x 1 MB published and consumed at once took 0.65-1.8 million page faults and
7.5-11 s of CPU (docs/benchmarks.md). Blocks up to :data:`MMAP_THRESHOLD` from the heap, and
up to :data:`TRIM_THRESHOLD` of it kept free, took that to 15,000-20,000 faults and 4.7-5.7 s,
for 4-5 MiB more resident memory.

Only glibc has these knobs (``mallopt``'s parameter numbers are its own): on another C library
(musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Final

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_malloc"]

log = logging.getLogger("nsqd.allocator")

#: blocks up to this size come from the heap, not from a mapping of their own
MMAP_THRESHOLD: Final = 4 * 1024 * 1024
#: free bytes kept at the top of the heap before the rest is returned to the system
TRIM_THRESHOLD: Final = 8 * 1024 * 1024

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3


def tune_malloc() -> bool:
    """Apply :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD` to glibc's allocator; False,
    changing nothing, when the process does not run on glibc (or it refused a setting)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None)  # the C library the interpreter is linked with
    if not hasattr(libc, "gnu_get_libc_version"):  # not glibc: its parameters mean nothing
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    done = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and done
    if not done:
        log.warning("glibc refused the allocator settings; large messages cost more CPU")
    return done
