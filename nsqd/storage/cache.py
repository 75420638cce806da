"""The read-side tail caches of partition logs, bounded together by one byte budget.

Consumers that keep up read what was just appended; each :class:`PartitionLog` keeps its newest
records in a :class:`TailCache` so those reads cost no ``pread``. All tail caches of a process
share one :class:`CacheBudget` (``--read-cache-bytes``): a count of records would let 10,000
one-megabyte messages stay resident, and a budget per partition would grow with the number of
topics. When the budget is exceeded, the caches appended to least recently give up their oldest
records first (they are the least likely to be read again from memory).

Accounting is per batch: an append charges ``sum of record sizes`` once; records are measured one
by one only when they are evicted, so each record is measured at most once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .record import Record

#: bytes a cached record costs beyond its body and ext (the Record object, its ints, the list
#: slot); approximate, so that a cache of tiny messages is bounded too
RECORD_OVERHEAD = 160

#: default of ``--read-cache-bytes``
DEFAULT_CACHE_BYTES = 16 * 1024 * 1024


def record_cost(record: Record) -> int:
    """What ``record`` counts against the budget."""
    return len(record.body) + len(record.ext) + RECORD_OVERHEAD


class CacheBudget:
    """Bytes all tail caches may hold together; 0 disables caching.

    One lock guards every cache of the budget, so a cache may be trimmed on behalf of another
    log's append from any thread. Lock order: a log's own lock, then this one (never reversed).
    """

    def __init__(self, limit_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.limit = max(limit_bytes, 0)
        self.used = 0
        self.lock = threading.Lock()
        self._recent: OrderedDict[TailCache, None] = OrderedDict()  # least recently appended first

    def cache(self, start: int) -> TailCache:
        """A new empty cache whose next record has offset ``start``."""
        return TailCache(self, start)

    def _charge(self, cache: TailCache, cost: int) -> None:
        """Under :attr:`lock`: ``cache`` grew by ``cost``; evict down to 7/8 of the limit when
        the limit is exceeded (the slack keeps evictions to one per several appends)."""
        self.used += cost
        recent = self._recent
        recent[cache] = None
        recent.move_to_end(cache)
        if self.used <= self.limit:
            return
        target = self.limit - self.limit // 8
        for victim in list(recent):  # oldest first; ``cache`` itself is last
            victim._drop_front(self.used - target)
            if not victim._records:
                del recent[victim]
            if self.used <= target:
                break


class TailCache:
    """The newest records ``[start, end)`` of one log. Every method takes the budget's lock."""

    def __init__(self, budget: CacheBudget, start: int) -> None:
        self._budget = budget
        self._records: list[Record] = []
        self._start = start  # offset of _records[0] (or of the next record when empty)
        self._bytes = 0

    @property
    def bytes(self) -> int:
        """What this cache counts against the budget now."""
        return self._bytes

    def extend(self, records: list[Record], cost: int) -> None:
        """Append ``records`` (consecutive, following the cache's end) costing ``cost`` bytes
        together (:func:`record_cost` summed; the log computes it while encoding)."""
        budget = self._budget
        with budget.lock:
            if not budget.limit:
                self._start = records[-1].offset + 1
                return
            self._records.extend(records)
            self._bytes += cost
            budget._charge(self, cost)

    def read(self, offset: int, stop: int) -> tuple[int, list[Record]]:
        """``(first, records)``: the cached records of ``[offset, stop)``, which are those of
        ``[first, stop)`` with ``first = max(offset, start)`` (none when ``first >= stop``)."""
        with self._budget.lock:
            start = self._start
            first = max(offset, start)
            return first, self._records[first - start : stop - start] if first < stop else []

    def skip_to(self, offset: int) -> None:
        """The log grew to ``offset`` without these records: forget the cached ones (the
        cache stays a contiguous tail) and start again there."""
        with self._budget.lock:
            self._forget(self._bytes)
            self._records.clear()
            self._start = offset

    def truncate(self, offset: int) -> None:
        """Forget the records at and after ``offset``; the next record appended has it."""
        with self._budget.lock:
            keep = max(offset - self._start, 0)
            dropped = self._records[keep:]
            del self._records[keep:]
            self._forget(sum(map(record_cost, dropped)))
            if not self._records:
                self._start = offset

    def drop_below(self, offset: int) -> None:
        """Forget the records before ``offset`` (retention deleted them from disk)."""
        with self._budget.lock:
            drop = min(max(offset - self._start, 0), len(self._records))
            if drop:
                self._forget(sum(map(record_cost, self._records[:drop])))
                del self._records[:drop]
                self._start += drop

    def clear(self) -> None:
        """Forget everything (the log closes)."""
        with self._budget.lock:
            self._forget(self._bytes)
            self._start += len(self._records)
            self._records.clear()
            self._budget._recent.pop(self, None)

    def _drop_front(self, need: int) -> None:
        """Under the lock: drop the oldest records until ``need`` bytes are freed or none is
        left; one slice deletion however many go."""
        records = self._records
        freed = count = 0
        for record in records:
            if freed >= need:
                break
            freed += record_cost(record)
            count += 1
        del records[:count]
        self._start += count
        self._forget(freed)

    def _forget(self, cost: int) -> None:
        self._bytes -= cost
        self._budget.used -= cost
