"""The read-side tail caches of partition logs, bounded together by one byte budget.

Consumers that keep up read what was just appended; each :class:`PartitionLog` keeps its newest
records in a :class:`TailCache` so those reads cost no ``pread``. All tail caches of a process
share one :class:`CacheBudget` (``--read-cache-bytes``): a count of records would let 10,000
one-megabyte messages stay resident, and a budget per partition would grow with the number of
topics. When the budget is exceeded, the caches appended to least recently give up their oldest
records first (they are the least likely to be read again from memory). A large record
(:data:`LARGE_RECORD_BYTES`) is not cached at all: its consumers read it from disk.

A cache holds runs: a list of records as appended (a PUB_TRACE, a PUB with ext), or, for the
batches most publishes are (:mod:`.batch`), a run of its own that later batches of the same
kind extend, which holds bodies and publish times and makes each read the records it returns.
So the cache keeps no object per message: the cycle collector walks nothing per cached message
(a record each made the collections of its middle generation the longest pauses of a live
consumer's delivery).

Accounting is per run: an append charges ``sum of record sizes`` once, to the run it lands
in, and eviction drops whole runs but the newest, so no record is measured one by one but when
a truncation, retention or that newest run is cut in two.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from .batch import AppendedBatch
from .record import Record
from .stamp import STAMP_SIZE, Stamps

#: bytes a cached record costs beyond its body and ext (the Record object, its ints, the list
#: slot); approximate, so that a cache of tiny messages is bounded too
RECORD_OVERHEAD = 160

#: a cached run of batches stops growing at this many records or bytes (eviction takes whole
#: runs but the newest)
RUN_RECORDS = 1024
RUN_BYTES = 256 * 1024

#: default of ``--read-cache-bytes``
DEFAULT_CACHE_BYTES = 16 * 1024 * 1024

#: an append whose records average more bytes than this is not cached (the cache forgets its
#: tail and goes on after it): read back from the page cache, such a record costs one ``pread``
#: beside the copy its delivery makes anyway, while cached it would push out a thousand small
#: records and keep a megabyte resident after its consumers are done with it (3,000 x 1 MB
#: PUBs left 15 MiB of bodies cached, a fifth of the daemon's memory: docs/benchmarks.md)
LARGE_RECORD_BYTES = 256 * 1024


def record_cost(record: Record) -> int:
    """What ``record`` counts against the budget."""
    return len(record.body) + len(record.ext) + RECORD_OVERHEAD


def _record_costs(run: Sequence[Record]) -> Iterable[int]:
    """:func:`record_cost` of each record of ``run``, without making an appended batch's."""
    if isinstance(run, AppendedBatch):
        if isinstance(run.exts, Stamps):  # each ext a stamp: not made as bytes to be measured
            return (len(body) + STAMP_SIZE + RECORD_OVERHEAD for body in run.bodies)
        if run.exts is not None:
            return (
                len(b) + len(e) + RECORD_OVERHEAD for b, e in zip(run.bodies, run.exts, strict=True)
            )
        return (len(body) + RECORD_OVERHEAD for body in run.bodies)
    return map(record_cost, run)


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
            if not victim._runs:
                del recent[victim]
            if self.used <= target:
                break


class TailCache:
    """The newest records ``[start, end)`` of one log, as the runs they were appended in (a
    run of an :class:`~.batch.AppendedBatch` makes the records each read returns). Every method
    takes the budget's lock."""

    def __init__(self, budget: CacheBudget, start: int) -> None:
        self._budget = budget
        self._runs: list[Sequence[Record]] = []  # consecutive runs, oldest first
        self._firsts: list[int] = []  # the offset of each run's first record
        self._costs: list[int] = []  # what each run counts against the budget
        self._end = start  # offset after the last cached record
        self._bytes = 0

    @property
    def _start(self) -> int:
        """The offset of the first cached record (of the next one when none is)."""
        return self._firsts[0] if self._firsts else self._end

    @property
    def start(self) -> int:
        """The offset of the first cached record (the log's end when none is)."""
        with self._budget.lock:
            return self._start

    @property
    def bytes(self) -> int:
        """What this cache counts against the budget now."""
        return self._bytes

    def extend(self, first: int, records: Sequence[Record], cost: int) -> None:
        """Append ``records`` (consecutive from offset ``first``, the cache's end) costing
        ``cost`` bytes together (:func:`record_cost` summed; the log computes it while
        encoding). Records averaging more than :data:`LARGE_RECORD_BYTES` are not kept: the
        cache forgets what it holds and starts again after them."""
        budget = self._budget
        with budget.lock:
            end = first + len(records)
            if not budget.limit or cost > LARGE_RECORD_BYTES * len(records):
                self._drop(0, len(self._runs))  # the cache stays a contiguous tail
                self._end = end
                return
            runs = self._runs
            last = runs[-1] if runs else None
            if (
                isinstance(records, AppendedBatch)
                and isinstance(last, AppendedBatch)
                and len(last) < RUN_RECORDS
                and self._costs[-1] < RUN_BYTES
                and first == self._end
                and last.same_kind(records)
            ):  # grows the cache's own run: no new object per append to collect
                last.extend(records)
                self._costs[-1] += cost
            else:
                # the cache's own copy of a batch (its later batches extend it: the caller's
                # stays as it was) or of a list of records
                runs.append(
                    records.copy() if isinstance(records, AppendedBatch) else tuple(records)
                )
                self._firsts.append(first)
                self._costs.append(cost)
            self._end = end
            self._bytes += cost
            budget._charge(self, cost)

    def read(self, offset: int, stop: int) -> tuple[int, list[Record]]:
        """``(first, records)``: the cached records of ``[offset, stop)``, which are those of
        ``[first, stop)`` with ``first = max(offset, start)`` (none when ``first >= stop``)."""
        with self._budget.lock:
            first = max(offset, self._start)
            stop = min(stop, self._end)
            if first >= stop:
                return first, []
            runs, firsts = self._runs, self._firsts
            i = bisect_right(firsts, first) - 1
            out: list[Record] = []
            while i < len(runs) and firsts[i] < stop:
                run = runs[i]
                at = firsts[i]
                part = run[max(first - at, 0) : stop - at]
                # a batch's records are made for each read and not kept: no object per
                # cached message for the cycle collector (see nsqd/storage/batch.py)
                out += part.records() if isinstance(part, AppendedBatch) else part
                i += 1
            return first, out

    def skip_to(self, offset: int) -> None:
        """The log grew to ``offset`` without these records: forget the cached ones (the
        cache stays a contiguous tail) and start again there."""
        with self._budget.lock:
            self._drop(0, len(self._runs))
            self._end = offset

    def truncate(self, offset: int) -> None:
        """Forget the records at and after ``offset``; the next record appended has it."""
        with self._budget.lock:
            if offset >= self._end:
                return
            i = bisect_right(self._firsts, offset) - 1
            if i >= 0 and self._firsts[i] < offset:  # the run that holds it keeps its head
                self._cut(i, slice(None, offset - self._firsts[i]))
                i += 1
            self._drop(max(i, 0), len(self._runs))
            self._end = offset

    def drop_below(self, offset: int) -> None:
        """Forget the records before ``offset`` (retention deleted them from disk)."""
        with self._budget.lock:
            offset = min(offset, self._end)
            if offset <= self._start:
                return
            # the run that holds ``offset`` stays, cut (none does when it is the end)
            i = bisect_right(self._firsts, offset) - 1 if offset < self._end else len(self._runs)
            self._drop(0, i)
            if self._firsts and self._firsts[0] < offset:  # the run that holds it keeps its tail
                self._cut_front(offset - self._firsts[0])

    def clear(self) -> None:
        """Forget everything (the log closes)."""
        with self._budget.lock:
            self._drop(0, len(self._runs))
            self._budget._recent.pop(self, None)

    def _drop_front(self, need: int) -> None:
        """Under the lock: drop the oldest records until ``need`` bytes are freed or none is
        left: whole runs but the newest, which gives up its oldest records only (one append
        larger than the budget leaves its newest records cached)."""
        costs = self._costs
        freed = count = 0
        while count < len(costs) - 1 and freed < need:
            freed += costs[count]
            count += 1
        self._drop(0, count)
        if freed < need and self._runs:
            cut = 0
            for cost in _record_costs(self._runs[0]):
                if freed >= need:
                    break
                freed += cost
                cut += 1
            self._cut_front(cut)

    def _drop(self, lo: int, hi: int) -> None:
        """Under the lock: forget runs ``[lo, hi)`` (a prefix or a suffix of them)."""
        if lo >= hi:
            return
        self._forget(sum(self._costs[lo:hi]))
        del self._runs[lo:hi], self._firsts[lo:hi], self._costs[lo:hi]

    def _cut_front(self, count: int) -> None:
        """Under the lock: the oldest run loses its first ``count`` records (all: it goes)."""
        if count >= len(self._runs[0]):
            self._drop(0, 1)
            return
        self._cut(0, slice(count, None))
        self._firsts[0] += count

    def _cut(self, i: int, keep: slice) -> None:
        """Under the lock: run ``i`` keeps only ``keep`` of its records; its cost is measured
        again (only a truncation, retention or an append larger than the budget cuts one)."""
        kept = self._runs[i][keep]
        cost = sum(_record_costs(kept))
        self._forget(self._costs[i] - cost)
        self._runs[i], self._costs[i] = kept, cost

    def _forget(self, cost: int) -> None:
        self._bytes -= cost
        self._budget.used -= cost
