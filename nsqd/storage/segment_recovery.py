"""Rebuilding a segment's state from its bytes: validating the active segment's tail at start
(cutting a torn or corrupt one off) and rebuilding a missing or inconsistent index.

Both scan records as appends wrote them and index them the same way (an entry every
``interval`` bytes, with the running maximum timestamp), into a :class:`Scanned` that
:class:`~.segment.Segment` adopts as its append bookkeeping. Blocking I/O on the fds given;
nothing here keeps any.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import final

from pnsq._fileio import read_all, write_all

from .corruption import ReadAt, SkippedRegions, resync
from .encoded_run import check_encoded
from .errors import CorruptRecordError
from .index import SparseIndex
from .record import Record, scan_records
from .segment_read import NO_TIMESTAMP


@final
@dataclass(slots=True)
class Scanned:
    """A segment's append bookkeeping as a scan of its records establishes it."""

    index: SparseIndex
    base: int  # the segment's base offset
    interval: int  # index interval in bytes
    next_offset: int  # offset after the last record noted (``base`` before any)
    size: int = 0  # end of the last record noted
    max_ts: int = NO_TIMESTAMP  # newest timestamp noted
    last_index_pos: int = 0  # position of the last index entry (0: the implicit one)
    last_record_pos: int = -1  # position of the last record noted (-1: none)

    def note(self, position: int, size: int, record: Record) -> None:
        """Account for the record found at ``position`` (``size`` bytes), the next in order."""
        self.max_ts = max(self.max_ts, record.timestamp_ns)
        if position - self.last_index_pos >= self.interval:
            self.index.append(record.offset - self.base, position, self.max_ts)
            self.last_index_pos = position
        self.last_record_pos = position
        self.next_offset = record.offset + 1
        self.size = position + size


def _intact(read_at: ReadAt, base: int, entry: tuple[int, int, int], limit: int) -> bool:
    """Whether the record an index entry points at is there and valid."""
    rel, pos, _ts = entry
    try:
        next(scan_records(read_at, "", position=pos, limit=limit, offset=base + rel))
    except CorruptRecordError:
        return False
    return True


def recover_tail(
    fd: int,
    index_fd: int,
    path: Path,
    *,
    base: int,
    interval: int,
    logger: logging.Logger,
    skipped: SkippedRegions,
) -> Scanned:
    """Validate the active segment's log file (``fd``, at ``path``) and its index (``index_fd``),
    both opened read-write.

    The scan starts at the last index entry whose record is intact (or at byte 0) and checks
    every record up to end of file. A bad record that an intact one follows
    (:func:`~.corruption.resync`) is damage, not a tail: the records after it were written
    and acknowledged, so the scan skips to that one and reports the region to ``skipped``
    (ERROR, counted, as reads do). A bad record nothing intact follows is a torn or corrupt
    tail: the file is truncated there (and fsynced) with a WARNING naming file, byte position,
    offset and bytes dropped. The index file is rewritten if its trusted entries and those the
    scan added differ from it.
    """
    read_at = functools.partial(os.pread, fd)
    file_size = os.fstat(fd).st_size
    old = read_all(index_fd)
    index, _ = SparseIndex.from_bytes(old, limit=file_size)
    while len(index) and not _intact(read_at, base, index.entry(len(index) - 1), file_size):
        index.truncate(len(index) - 1)  # an entry is trusted only if its record is intact
    rel, pos, max_ts = index.entry(len(index) - 1) if len(index) else (0, 0, NO_TIMESTAMP)
    state = Scanned(index, base, interval, base + rel, pos, max_ts, last_index_pos=pos)
    position, offset = pos, base + rel
    while True:
        try:
            records = scan_records(
                read_at, path.name, position=position, limit=file_size, offset=offset
            )
            for at, size, record in records:
                state.note(at, size, record)
            break
        except CorruptRecordError as exc:
            at, expected = state.size, state.next_offset
            found = resync(read_at, index, base, position=at, offset=expected, limit=file_size)
            if found is None:
                if _lost_markers(read_at, state, file_size):  # a follower's: kept, not cut
                    skipped.note(path.name, at, expected, state.next_offset, file_size - at)
                else:
                    _cut_tail(fd, path, state.size, file_size, exc, logger)
                break
            position, offset = found
            skipped.note(path.name, at, expected, offset, position - at)
    new = index.encode()
    if new != old:
        os.ftruncate(index_fd, 0)
        write_all(index_fd, new, 0)
    return state


def _lost_markers(read_at: ReadAt, state: Scanned, file_size: int) -> bool:
    """Whether the bytes from ``state.size`` to the end of the file are intact lost-record
    markers (:func:`~.record.encode_lost`) at the next offsets; they are then noted in
    ``state`` like records (a follower's log keeps its leader's offsets)."""
    position = state.size
    try:
        run = check_encoded(read_at(file_size - position, position), state.next_offset)
    except CorruptRecordError:
        return False
    if not run.count or run.lost != run.count:
        return False
    for offset, (timestamp_ns, size) in enumerate(run.entries, run.first_offset):
        marker = Record(offset, timestamp_ns, 0, 0, 0, b"", b"")
        state.note(position, size, marker)
        position += size
    return True


def _cut_tail(
    fd: int, path: Path, size: int, file_size: int, exc: CorruptRecordError, logger: logging.Logger
) -> None:
    """Truncate the torn or corrupt tail from byte ``size`` on, durably, with a WARNING."""
    logger.warning(
        "segment %s: torn or corrupt record at byte %d (offset %s): %s; "
        "truncating the file there, dropping %d bytes",
        path,
        size,
        exc.offset,
        exc.__cause__,
        file_size - size,
    )
    os.ftruncate(fd, size)
    os.fsync(fd)


def load_index(
    index_path: Path, log_path: Path, size: int, logger: logging.Logger
) -> SparseIndex | None:
    """A sealed segment's index as its file holds it; None (with a WARNING) when the file is
    missing or inconsistent with the segment's ``size`` bytes, to be rebuilt."""
    try:
        data = index_path.read_bytes()
    except FileNotFoundError:
        data = None
    index, whole = SparseIndex.from_bytes(data or b"", limit=size)
    if data is not None and whole:
        return index
    logger.warning(
        "segment %s: index %s, rebuilding it from the segment",
        log_path,
        "missing" if data is None else "inconsistent",
    )
    return None


def rebuild_index(
    read_at: ReadAt,
    name: str,
    *,
    base: int,
    size: int,
    interval: int,
    skipped: SkippedRegions,
) -> Scanned:
    """Index the segment's records ``[0, size)`` by scanning them, as appends would have, the
    entry sealing adds for the last record included. Damage is stepped over as reads do
    (reported to ``skipped``); the segment keeps its ``size`` even if damage reaches its end."""
    state = Scanned(SparseIndex(), base, interval, base)
    position, offset = 0, base
    while True:
        try:
            for at, n, record in scan_records(
                read_at, name, position=position, limit=size, offset=offset
            ):
                state.note(at, n, record)
            break
        except CorruptRecordError:
            at, expected = state.size, state.next_offset
            found = resync(read_at, state.index, base, position=at, offset=expected, limit=size)
            if found is None:
                skipped.note(name, at, expected, expected + 1, size - at)
                break
            position, offset = found
            skipped.note(name, at, expected, offset, position - at)
    if state.last_record_pos > state.last_index_pos:
        state.index.append(state.next_offset - 1 - base, state.last_record_pos, state.max_ts)
        state.last_index_pos = state.last_record_pos
    state.size = size
    return state
