"""The disk high-water mark (``--max-disk-usage-percent``): past it nsqd refuses writes.

Past the mark every publish gets ``E_FAILED_ON_NOT_WRITABLE`` (nothing is appended, so nothing
half-acknowledged) and ``/ping`` answers ``500 NOK - <reason>``, as Go nsqd does when unhealthy;
consumers go on, and retention or an operator freeing space lifts the refusal by itself at the
next check. The file system's usage is read once per :data:`CHECK_INTERVAL` and, between two
reads, again as soon as the bytes appended since the last read exceed a quarter of the headroom
left then, so a burst of publishes cannot run far past the mark. A write the file system refuses
for lack of space (``ENOSPC``: a mark of 100, or another writer filling the disk) trips the same
state at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import trio

from ..core.errors import NotWritableError
from ..storage.disk import DiskUsage, disk_usage

__all__ = ["CHECK_INTERVAL", "DiskGuard"]

log = logging.getLogger("nsqd.disk")

CHECK_INTERVAL = 1.0  # seconds between two statvfs calls when nothing is written


class DiskGuard:
    """Whether the data path's file system still takes writes."""

    def __init__(
        self,
        path: Path,
        max_percent: int,
        usage: Callable[[Path], DiskUsage] = disk_usage,
    ) -> None:
        self.path = path
        self.max_percent = max_percent
        self._usage = usage
        #: why writes are refused (None: writable); ``/ping`` shows it after ``NOK - ``
        self.reason: str | None = None
        self.percent = 0.0  # usage at the last check
        self._budget = 0  # bytes that may be appended before the next check is due

    def check(self) -> None:
        """Read the usage now and update the state (one log line per change)."""
        try:
            usage = self._usage(self.path)
        except OSError as exc:
            log.error("disk usage of %s unknown: %s", self.path, exc)
            return
        self.percent = usage.percent
        self._budget = usage.headroom(self.max_percent) // 4
        if usage.percent >= self.max_percent:
            self._trip(
                f"disk usage {usage.percent:.1f}% >= --max-disk-usage-percent="
                f"{self.max_percent} on {self.path}"
            )
        elif self.reason is not None:
            log.info("disk usage %.1f%% on %s: writes resume", usage.percent, self.path)
            self.reason = None

    def out_of_space(self, exc: BaseException) -> None:
        """A write failed for lack of space: refuse writes until a check finds room."""
        self._budget = 0
        self._trip(f"no space left on {self.path}: {exc}")

    def _trip(self, reason: str) -> None:
        if self.reason is None:
            log.warning("refusing writes: %s", reason)
        self.reason = reason

    def require_writable(self) -> None:
        """Raise :class:`NotWritableError` past the mark."""
        if self.reason is not None:
            raise NotWritableError(self.reason)

    def appended(self, nbytes: int) -> None:
        """Count bytes just appended; re-check early once they use up the budget."""
        self._budget -= nbytes
        if self._budget < 0:
            self.check()

    async def run(self, interval: float = CHECK_INTERVAL) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            await trio.to_thread.run_sync(self.check)
            await trio.sleep(interval)
