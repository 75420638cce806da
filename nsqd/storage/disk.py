"""How full the data directory's file system is (``statvfs``), as ``df`` reports it."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DiskUsage", "disk_usage", "is_out_of_space"]

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """Bytes of one file system as an unprivileged user sees them."""

    used: int  # blocks in use, by anyone
    available: int  # blocks a non-root writer may still use

    @property
    def percent(self) -> float:
        """``df``'s Use%: used / (used + available); root's reserve does not count as free."""
        total = self.used + self.available
        return 100.0 * self.used / total if total else 100.0

    def headroom(self, max_percent: float) -> int:
        """Bytes that may still be written before usage reaches ``max_percent``."""
        total = self.used + self.available
        return max(int(total * max_percent / 100.0) - self.used, 0)


def disk_usage(path: Path) -> DiskUsage:
    """The usage of the file system holding ``path``. Raises OSError."""
    st = os.statvfs(path)
    return DiskUsage(
        used=(st.f_blocks - st.f_bfree) * st.f_frsize, available=st.f_bavail * st.f_frsize
    )


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is the file system being full."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return True
        seen = seen.__cause__
    return False
