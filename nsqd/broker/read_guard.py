"""Containing a partition's storage errors on the consume path.

A read for delivery runs inside a consumer's session: a :class:`StorageError` escaping it
(a segment file gone, an I/O error, damage that cannot be stepped over) used to end that
session, and the client's reconnect met the same error at once: a loop of closed
connections, one ERROR traceback each. Instead the :class:`ReadGuard` of the partition takes
the error: the read gives nothing (what earlier reads of the same take gave is delivered as
usual, so no cursor state is lost), the partition is not read for delivery again until a
retry time that doubles with each failure in a row (:data:`FIRST_RETRY_NS` to
:data:`MAX_RETRY_NS`), and the error is logged at most once per :data:`LOG_EVERY_NS` with the
count of those not logged. The channel's other partitions, and other channels' consumers, go
on; the consumer's connection stays open and gets the partition's messages once a retry reads.

A damaged region held for a repair from a replica (:class:`~nsqd.storage.errors.RepairPending`)
is no failure: the read is tried again every :data:`REPAIR_POLL_NS` until the replica's copy
is written (:meth:`ReadGuard.repaired`), and after :data:`REPAIR_WAIT_NS` without one the region
is settled: skipped, as without a replica. Nothing readable from a read's offset to the log's
end (damage at the newest records, :class:`DamagedTail`) is no failure either: the partition is
read again every :data:`TAIL_POLL_NS` (the next append makes the records after it readable),
instead of at once in a loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

from protocol.message import RecordLike

from ..core.taking import Fetch, FetchFramed
from ..storage.errors import RepairPending, StorageError

__all__ = [
    "FIRST_RETRY_NS",
    "LOG_EVERY_NS",
    "MAX_RETRY_NS",
    "REPAIR_POLL_NS",
    "REPAIR_WAIT_NS",
    "TAIL_POLL_NS",
    "DamagedTail",
    "ReadGuard",
]

FIRST_RETRY_NS: Final = 100_000_000  # 100 ms: a transient error costs little latency
MAX_RETRY_NS: Final = 30_000_000_000  # 30 s: a lasting one costs little work
LOG_EVERY_NS: Final = 10_000_000_000  # one ERROR line per partition per 10 s at most
REPAIR_POLL_NS: Final = 50_000_000  # 50 ms between reads of a region held for a repair
REPAIR_WAIT_NS: Final = 5_000_000_000  # 5 s for a replica's copy before skipping the region
TAIL_POLL_NS: Final = 500_000_000  # 0.5 s between reads of a partition whose newest are damaged


class DamagedTail(Exception):
    """Nothing is readable from a read's offset to the log's end: the newest records are
    damaged (skipped, reported by storage), and none follows them yet."""


_logger: Final = logging.getLogger("nsqd.broker")


class ReadGuard:
    """One partition's reads for delivery: whether they may run now, and their failures."""

    __slots__ = (
        "_delay_ns",
        "_holding",
        "_logged_ns",
        "_unlogged",
        "failures",
        "name",
        "retry_ns",
        "settle",
    )

    def __init__(self, name: str) -> None:
        self.name = name  # for the log: the partition's directory, or its number
        self.retry_ns = 0  # no read for delivery before this time (0: none failed)
        self.failures = 0  # reads that failed, over the life of the process
        self._delay_ns = 0  # the current wait after a failure (0: the last read succeeded)
        self._logged_ns: int | None = None
        self._unlogged = 0
        self._holding: dict[int, int] = {}  # held region's first offset -> first met (ns)
        #: gives up on the held region at an offset: reads skip it (the log's, when on disk)
        self.settle: Callable[[int], None] = lambda first: None

    def held(self, exc: RepairPending, now_ns: int) -> None:
        """A read met a region held for a repair: read again soon; past
        :data:`REPAIR_WAIT_NS` settle it (the next read skips it)."""
        since = self._holding.setdefault(exc.first, now_ns)
        if now_ns - since >= REPAIR_WAIT_NS:
            del self._holding[exc.first]
            self.settle(exc.first)
            _logger.warning(
                "partition %s: no replica's copy of the damaged offsets %d-%d within %.0f s; "
                "skipping them",
                self.name,
                exc.first,
                exc.resumed - 1,
                REPAIR_WAIT_NS / 1e9,
            )
        self.retry_ns = now_ns + REPAIR_POLL_NS

    def repaired(self) -> None:
        """A held region was written over with a replica's copy (or given up on): read again
        at once."""
        self._holding.clear()
        self.retry_ns = 0
        self._delay_ns = 0

    def ready(self, now_ns: int) -> bool:
        """Whether the partition may be read for delivery at ``now_ns``."""
        return now_ns >= self.retry_ns

    def failed(self, exc: StorageError, now_ns: int) -> None:
        """A read failed with ``exc`` at ``now_ns``: wait before the next, log (rate-limited)."""
        self.failures += 1
        self._delay_ns = min(2 * self._delay_ns or FIRST_RETRY_NS, MAX_RETRY_NS)
        self.retry_ns = now_ns + self._delay_ns
        if self._logged_ns is not None and now_ns - self._logged_ns < LOG_EVERY_NS:
            self._unlogged += 1
            return
        _logger.error(
            "partition %s: reading for delivery failed (%s: %s); its consumers stay connected "
            "and the read is tried again in %.1f s (%d failure(s) since the last such line)",
            self.name,
            type(exc).__name__,
            exc,
            self._delay_ns / 1e9,
            self._unlogged,
        )
        self._logged_ns = now_ns
        self._unlogged = 0

    def fetch(self, read: Fetch, now_ns: int) -> Fetch:
        """``read`` with its :class:`StorageError` taken here: the read gives nothing."""

        def guarded(offset: int, max_records: int, max_bytes: int | None) -> Sequence[RecordLike]:
            if now_ns < self.retry_ns:  # failed earlier in this take
                return []
            try:
                got = read(offset, max_records, max_bytes)
            except RepairPending as exc:
                self.held(exc, now_ns)
                return []
            except DamagedTail:
                self.retry_ns = now_ns + TAIL_POLL_NS
                return []
            except StorageError as exc:
                self.failed(exc, now_ns)
                return []
            self._delay_ns = 0
            return got

        return guarded

    def framed(self, fetch: FetchFramed, now_ns: int) -> FetchFramed:
        """``fetch`` with its :class:`StorageError` taken here: None (the plain read is
        tried next, and gives nothing)."""

        def guarded(
            offset: int, max_records: int, max_bytes: int, now: int
        ) -> tuple[Sequence[RecordLike], int] | None:
            try:
                return fetch(offset, max_records, max_bytes, now)
            except StorageError as exc:
                self.failed(exc, now_ns)
                return None

        return guarded
