"""Reading past a damaged record: find the next intact one, report what was skipped.

A record that fails its checks (length, CRC-32C, offset sequence) in the middle of a segment,
sealed or current, must not make the rest of the partition unreadable. :func:`resync` finds
the first intact record after the damage: first where the damaged record's own length field
says the next one starts (a flipped bit in a body leaves it sane: one decode), else the index
entries after it bound the search (an entry whose record decodes is a resync point), and the
bytes before that bound are searched for the offset field of each offset that can follow
(``bytes.find``, no per-byte Python loop). Records between the damage and that point are lost;
:class:`SkippedRegions` logs each region once at ERROR and counts records and bytes for
``/stats`` and ``/metrics``. Recovery of the current segment at start uses the same search to
tell damage (something intact follows: skipped) from a torn tail (nothing does: cut).

A read for delivery on a leader with an in-sync replica does not skip at once: the region is
*held* (:meth:`SkippedRegions.hold`) until the replica's copy of its records is written in
their place (:meth:`SkippedRegions.repaired`) or the broker gives up on it
(:meth:`SkippedRegions.settle`: skipped from then on); see docs/replication.md.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from typing import Final, NamedTuple

from .errors import CorruptRecordError
from .index import SparseIndex
from .record import LENGTH_SIZE, MIN_HEADER_SIZE, Record, decode_record, peek_size

__all__ = ["Region", "SkippedRegions", "resync"]

_OFFSET: Final = struct.Struct(">Q")  # the record's offset field, 8 bytes into the record
_OFFSET_AT: Final = 2 * LENGTH_SIZE  # after the length and CRC fields
_MAX_WINDOW: Final = 64 * 1024 * 1024  # bytes searched without an index bound (then: lost)
_MAX_CANDIDATES: Final = 4096  # offsets tried after the damage without an index bound

ReadAt = Callable[[int, int], bytes]  # read_at(size, position) -> up to size bytes


def _size_at(read_at: ReadAt, position: int) -> int | None:
    """The length the record at ``position`` claims, if its header reads and is sane."""
    head = read_at(MIN_HEADER_SIZE, position)
    if len(head) < MIN_HEADER_SIZE:
        return None
    try:
        return peek_size(head, 0)
    except CorruptRecordError:
        return None


def _decode_at(read_at: ReadAt, position: int, limit: int) -> Record | None:
    """The intact record at ``position`` (wholly before ``limit``), else None."""
    size = _size_at(read_at, position)
    if size is None or position + size > limit:
        return None
    data = read_at(size, position)
    if len(data) < size:
        return None
    try:
        return decode_record(data, 0)
    except CorruptRecordError:
        return None


def resync(
    read_at: ReadAt,
    index: SparseIndex,
    base_offset: int,
    *,
    position: int,
    offset: int,
    limit: int,
) -> tuple[int, int] | None:
    """``(position, offset)`` of the first intact record after damage at byte ``position``
    where ``offset`` was expected; None when nothing intact follows before ``limit``. An
    intact record at ``position`` itself with a later offset (offsets cut out by a truncation
    over damage) is that record."""
    here = _decode_at(read_at, position, limit)
    if here is not None and here.offset > offset:
        return position, here.offset
    after = _after_length(read_at, position, offset, limit)
    if after is not None:
        return after
    bound: tuple[int, int] | None = None
    for i in range(len(index)):
        rel, pos, _ts = index.entry(i)
        if pos <= position or base_offset + rel < offset:
            continue
        record = _decode_at(read_at, pos, limit)
        if record is not None and record.offset == base_offset + rel:
            bound = (pos, record.offset)
            break
    end = bound[0] if bound is not None else min(limit, position + 1 + _MAX_WINDOW)
    window = read_at(end - position - 1, position + 1)
    candidates = (bound[1] - offset) if bound is not None else _MAX_CANDIDATES
    best: tuple[int, int] | None = None
    for wanted in range(offset, offset + candidates):
        needle = _OFFSET.pack(wanted)
        # only a start before the best one so far can beat it: look no further than that
        stop = len(window) if best is None else best[0] - position - 1 + _OFFSET_AT + _OFFSET.size
        at = window.find(needle, _OFFSET_AT, stop)
        while at >= 0:
            start = position + 1 + at - _OFFSET_AT
            record = _decode_at(read_at, start, limit)
            if record is not None and record.offset == wanted:
                best = (start, wanted)
                break
            at = window.find(needle, at + 1, stop)
    return best or bound


def _after_length(
    read_at: ReadAt, position: int, offset: int, limit: int
) -> tuple[int, int] | None:
    """Where the damaged record at ``position`` says the next one starts, if its length field
    is sane and the record there is intact with offset ``offset + 1``; else None."""
    size = _size_at(read_at, position)
    if size is None:
        return None
    record = _decode_at(read_at, position + size, limit)
    if record is None or record.offset != offset + 1:
        return None
    return position + size, offset + 1


class Region(NamedTuple):
    """A damaged region of a segment file: offsets ``[first, resumed)`` at bytes
    ``[position, position + nbytes)``, the next intact record right after it."""

    segment: str  # the segment file's name
    position: int
    first: int
    resumed: int
    nbytes: int


class SkippedRegions:
    """What reads of one partition log skipped: each region logged once, totals counted; and
    the regions held for a repair from a replica (see the module doc)."""

    def __init__(self, logger: logging.Logger, partition: int, directory: str) -> None:
        self._logger = logger
        self._partition = partition
        self._directory = directory
        self._seen: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self.records = 0  # offsets lost to damage, over the life of the process
        self.bytes = 0  # bytes of segment files skipped with them
        self.healed = 0  # damaged records replaced by a replica's copy, over the process's life
        #: whether a damaged region met by a read for delivery is held for a repair (the
        #: broker's answer: this node leads the partition with an in-sync replica)
        self.healing: Callable[[], bool] = lambda: False
        self._held: dict[int, Region] = {}  # first offset -> region waiting for a repair
        self._settled: set[int] = set()  # first offsets of regions given up on: skipped

    def hold(self, region: Region) -> bool:
        """Whether a read for delivery waits for ``region`` to be repaired instead of skipping
        it (then it is held until :meth:`repaired` or :meth:`settle`)."""
        with self._lock:
            if region.first in self._settled:
                return False
            if region.first not in self._held and not self.healing():
                return False
            self._held[region.first] = region
            return True

    def held(self) -> list[Region]:
        """The regions waiting for a repair, oldest offsets first."""
        with self._lock:
            return sorted(self._held.values())

    def held_at(self, first: int) -> Region | None:
        """The held region whose records start at ``first``, if any."""
        with self._lock:
            return self._held.get(first)

    def settle(self, first: int) -> None:
        """Give up waiting for a repair of the region at ``first``: reads skip it from now on."""
        with self._lock:
            self._held.pop(first, None)
            self._settled.add(first)

    def repaired(self, region: Region) -> None:
        """``region``'s records were replaced by a replica's intact copy (logged, counted)."""
        with self._lock:
            self._held.pop(region.first, None)
            self._seen.discard((region.segment, region.position))  # new damage there is news
            self.healed += region.resumed - region.first
        self._logger.warning(
            "partition %d: repaired damaged records at offsets %d-%d (%d bytes at byte %d of "
            "segment %s in %s) with a replica's copy",
            self._partition,
            region.first,
            region.resumed - 1,
            region.nbytes,
            region.position,
            region.segment,
            self._directory,
        )

    def note(self, segment: str, position: int, first: int, resumed: int, nbytes: int) -> None:
        """Offsets ``[first, resumed)`` (``nbytes`` bytes from ``position``) were unreadable."""
        with self._lock:
            if (segment, position) in self._seen:
                return
            self._seen.add((segment, position))
            self.records += resumed - first
            self.bytes += nbytes
        self._logger.error(
            "partition %d: skipped corrupt records at offsets %d-%d (%d bytes at byte %d of "
            "segment %s in %s); delivering the records after them",
            self._partition,
            first,
            resumed - 1,
            nbytes,
            position,
            segment,
            self._directory,
        )
