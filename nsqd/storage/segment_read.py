"""Reading one segment's records: a range of offsets, the first record at a time, and the scan
up to an offset that truncation and the newest-timestamp lookup use.

No fds and no segment state here: each function reads through ``read_at(size, position)``
(:class:`~.segment.Segment` passes ``os.pread`` bound to its log fd) and seeks with the
segment's :class:`~.index.SparseIndex`, like :mod:`.corruption`, which the range read calls to
step over damage in a segment. ``base`` is the segment's base offset, ``size`` its
bytes of valid records, ``name`` its file name (for errors).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from .corruption import ReadAt, Region, SkippedRegions, resync
from .errors import CorruptRecordError, RepairPending
from .index import ENTRY_SIZE, INDEX_ENTRY, SparseIndex
from .record import READ_CHUNK, Record, scan_records
from .runs import read_run

NO_TIMESTAMP: Final = -(1 << 63)  # running-max start value; a segment without records has it
_UNBOUNDED: Final = 1 << 62  # a read's byte budget when none is given


def read_range(
    read_at: ReadAt,
    index: SparseIndex,
    name: str,
    *,
    base: int,
    size: int,
    start: int,
    stop: int,
    max_bytes: int | None,
    skipped: SkippedRegions | None,
    hold: int | None = None,
) -> list[Record]:
    """Records ``[start, stop)`` (``start < stop``), all of which the segment must hold; with
    ``max_bytes``, only a prefix of them whose bodies add up to at least that (one record at
    least).

    Seeks with the index and reads runs of records from there. With ``skipped`` (what a
    log's reads pass, sealed segment or current) a damaged record is stepped over
    (:func:`~.corruption.resync`) and reported there; else, and when the segment ends before
    ``stop``, raises :class:`CorruptRecordError`. With ``hold`` (a read for delivery: the
    offset after the segment's last record), damage that
    :meth:`~.corruption.SkippedRegions.hold` keeps for a repair raises :class:`RepairPending`
    instead of being skipped.
    """
    out: list[Record] = []
    # (a budget of 0 would read nothing: "one record at least" holds with 1)
    budget = _UNBOUNDED if max_bytes is None else max(max_bytes, 1)
    i = index.floor_for_offset(start - base)
    rel, position, _ts = index.entry(i) if i >= 0 else (0, 0, NO_TIMESTAMP)
    offset = base + rel
    seeking = i >= 0  # reading from an index entry whose record is not checked yet
    while True:
        taken = len(out)
        try:
            offset, budget = read_run(
                read_at,
                name,
                position=position,
                limit=size,
                offset=offset,
                start=start,
                stop=stop,
                budget=budget,
                out=out,
            )
        except CorruptRecordError as exc:
            if seeking and exc.position == position:
                # the entry's own record is bad: the index may be what is damaged (an entry
                # whose position or offset rotted yet stays in order), so seek from the one
                # before; damage in the record itself is met there again and stepped over
                i -= 1
                rel, position, _ts = index.entry(i) if i >= 0 else (0, 0, NO_TIMESTAMP)
                offset, seeking = base + rel, i >= 0
                continue
            if skipped is None or exc.position is None or exc.offset is None:
                raise
            seeking = False
            resumed = _skip_damage(
                read_at, index, name, skipped, base, size, exc.position, exc.offset, stop, hold
            )
            if resumed is None or resumed[1] >= stop:
                return out  # the rest of [start, stop) is lost
            position, offset = resumed
            budget -= sum(len(r.body) for r in out[taken:])  # read before the damage
            if budget <= 0:
                return out
            continue
        if offset >= stop or budget <= 0:
            return out
        break
    if skipped is not None:  # the segment ends before ``stop``: what it lacks is lost
        skipped.note(name, size, offset, stop, 0)
        return out
    raise CorruptRecordError(
        f"{name}: ends at offset {start + len(out)}, expected {stop}",
        position=size,
        offset=start + len(out),
    )


def _skip_damage(
    read_at: ReadAt,
    index: SparseIndex,
    name: str,
    skipped: SkippedRegions,
    base: int,
    size: int,
    position: int,
    offset: int,
    stop: int,
    hold: int | None = None,
) -> tuple[int, int] | None:
    """Past a damaged record: ``(position, offset)`` of the next intact
    one (None: nothing intact follows), the skipped region reported once; with ``hold`` (the
    offset after the segment's last record), raises :class:`RepairPending` for a region held
    for a repair (up to the next intact record, or the segment's end)."""
    found = resync(read_at, index, base, position=position, offset=offset, limit=size)
    end_position, resumed = found if found is not None else (size, stop)
    if hold is not None:
        end, after = found if found is not None else (size, hold)
        region = Region(name, position, offset, after, end - position)
        if after > offset and skipped.hold(region):
            raise RepairPending(
                f"{name}: offsets {offset}-{after - 1} damaged, waiting for a replica's copy",
                first=offset,
                resumed=after,
            )
    skipped.note(name, position, offset, max(resumed, offset + 1), end_position - position)
    return found


def scan_past_damage(
    read_at: ReadAt,
    index: SparseIndex,
    name: str,
    skipped: SkippedRegions,
    *,
    base: int,
    position: int,
    limit: int,
    offset: int,
    chunk: int = READ_CHUNK,
) -> Iterator[tuple[int, int, Record]]:
    """:func:`~.record.scan_records` that steps over a damaged record as a read does
    (reported to ``skipped``) and ends where nothing intact follows one."""
    while True:
        try:
            for item in scan_records(
                read_at, name, position=position, limit=limit, offset=offset, chunk=chunk
            ):
                yield item
                position, offset = item[0] + item[1], item[2].offset + 1
            return
        except CorruptRecordError as exc:
            at = position if exc.position is None else exc.position
            expected = offset if exc.offset is None else exc.offset
            found = resync(read_at, index, base, position=at, offset=expected, limit=limit)
            end_position, resumed = found if found is not None else (limit, expected + 1)
            skipped.note(name, at, expected, max(resumed, expected + 1), end_position - at)
            if found is None:
                return
            position, offset = found


def find_timestamp(
    read_at: ReadAt,
    index: SparseIndex,
    name: str,
    *,
    base: int,
    size: int,
    timestamp_ns: int,
    end_offset: int,
    skipped: SkippedRegions,
    chunk: int = READ_CHUNK,
) -> int:
    """First offset in the segment whose timestamp is ``>= timestamp_ns``, else
    ``end_offset``. Scans from the last index entry whose running max is older, stepping
    over damage (reported to ``skipped``)."""
    i = index.floor_for_timestamp(timestamp_ns)
    rel, pos, _ts = index.entry(i) if i >= 0 else (0, 0, NO_TIMESTAMP)
    for _pos, _size, record in scan_past_damage(
        read_at,
        index,
        name,
        skipped,
        base=base,
        position=pos,
        limit=size,
        offset=base + rel,
        chunk=chunk,
    ):
        if record.timestamp_ns >= timestamp_ns:
            return record.offset
    return end_offset


def seal_entry_timestamp(index_path: Path, *, base: int, size: int, end_offset: int) -> int | None:
    """The newest timestamp of a sealed segment from its index file's last entry alone (the
    one sealing adds for the last record, offset ``end_offset - 1``), without loading the
    index; None when that entry is not there."""
    try:
        with index_path.open("rb") as f:
            file_size = f.seek(0, os.SEEK_END)
            f.seek(max(file_size - ENTRY_SIZE, 0))
            tail = f.read()
    except FileNotFoundError:
        file_size, tail = 0, b""
    if file_size % ENTRY_SIZE == 0 and len(tail) == ENTRY_SIZE:
        rel, pos, max_ts = INDEX_ENTRY.unpack(tail)
        if base + rel == end_offset - 1 and pos < size:
            return int(max_ts)
    return None


def scan_until(
    read_at: ReadAt,
    index: SparseIndex,
    name: str,
    *,
    base: int,
    size: int,
    entries: int,
    stop: int,
    skipped: SkippedRegions,
) -> tuple[int, int, int, int]:
    """Scan from index entry ``entries - 1`` (or byte 0) over the records before offset
    ``stop``; return the state after them: ``(size, last_record_pos, next_offset,
    max_timestamp)``, ``size`` the end of the last intact record before ``stop``.

    Damage is stepped over (reported to ``skipped``); records before ``stop`` that damage
    took, or that the segment lacks, are reported there too, and ``next_offset`` is ``stop``
    all the same (a truncation there leaves the damaged ones out)."""
    rel, pos, max_ts = index.entry(entries - 1) if entries else (0, 0, NO_TIMESTAMP)
    end, last_pos, next_offset = pos, -1, base + rel
    for position, n, record in scan_past_damage(
        read_at, index, name, skipped, base=base, position=pos, limit=size, offset=next_offset
    ):
        if record.offset >= stop:
            break
        max_ts = max(max_ts, record.timestamp_ns)
        end, last_pos, next_offset = position + n, position, record.offset + 1
    if next_offset < stop:
        skipped.note(name, end, next_offset, stop, 0)
    return end, last_pos, stop, max_ts
