"""One segment of a partition log: its records and sparse index, appended, read, truncated.

Blocking file I/O on raw fds (``os.pwrite``/``os.pread``), no Python-level buffering. A segment
is *active* (the last one: takes appends) or *sealed* (its index is loaded lazily). Its files
and fds are :class:`~.segment_files.SegmentFiles`'; the read path is :mod:`.segment_read`,
recovery and index rebuilding :mod:`.segment_recovery`. The caller (:class:`~.log.PartitionLog`)
serialises access under its lock; nothing here locks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Final, final

from pnsq._fileio import write_all

from .checkpoint import atomic_write
from .frame_runs import FrameLayout, FrameRun, read_frame_run
from .index import ENTRY_SIZE, INDEX_ENTRY, SparseIndex
from .recent_runs import RecentRuns
from .record import (
    HEADER_SIZE,
    Record,
)
from .segment_files import O_CLOEXEC, SegmentEnv, SegmentFiles
from .segment_read import (
    NO_TIMESTAMP,
    find_timestamp,
    read_range,
    scan_until,
    seal_entry_timestamp,
)
from .segment_recovery import Scanned, load_index, rebuild_index, recover_tail

base_offset_of: Final = attrgetter("base_offset")  # a bisect key over a list of segments


@final
class Segment(SegmentFiles):
    """A segment file and its sparse index (see module docstring for active vs sealed)."""

    def __init__(self, directory: Path, base_offset: int, size: int, env: SegmentEnv) -> None:
        super().__init__(directory, base_offset, env)
        self.size = size  # bytes of valid records; the file may hold garbage after a failed write
        self._interval = env.interval
        self._index: SparseIndex | None = None  # loaded lazily for sealed segments
        self._max_ts: int | None = None  # None = not computed yet (sealed segments)
        self._last_index_pos = 0  # position of the last index entry (0: the implicit one)
        self._last_record_pos = -1  # position of the newest record (-1: none)
        self._recent = RecentRuns()  # the latest runs written: shipped to followers as written
        self.next_offset = base_offset  # offset the next append gets (active segment only)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, env: SegmentEnv) -> Segment:
        """A new, empty active segment. Its directory entry is durable after a directory fsync."""
        seg = cls(directory, base_offset, 0, env)
        seg.active = True
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | O_CLOEXEC
        seg.fd = os.open(seg.log_path, flags, 0o644)
        try:
            seg.index_fd = os.open(
                seg.index_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | O_CLOEXEC, 0o644
            )
        except OSError:
            seg.delete()
            raise
        env.handles.opened(seg, env.owner, 2)
        seg._index = SparseIndex()
        seg._max_ts = NO_TIMESTAMP
        return seg

    @classmethod
    def sealed(cls, directory: Path, base_offset: int, env: SegmentEnv) -> Segment:
        """An existing sealed segment; trusted as is (records are verified when read)."""
        seg = cls(directory, base_offset, 0, env)
        seg.size = seg.log_path.stat().st_size
        return seg

    @classmethod
    def recover(cls, directory: Path, base_offset: int, env: SegmentEnv) -> Segment:
        """Open the last segment as the active one, validating its tail.

        The scan starts at the last index entry whose record is intact (or at byte 0) and checks
        every record up to end of file. A damaged record that intact ones follow is skipped and
        reported; a torn or corrupt tail is truncated (and fsynced) with a WARNING naming file,
        byte position, offset and bytes dropped (:func:`~.segment_recovery.recover_tail`).
        """
        seg = cls(directory, base_offset, 0, env)
        seg.active = True
        try:
            seg.open()
            seg._recover_tail()
        except BaseException:
            seg.close()
            raise
        return seg

    def _recover_tail(self) -> None:
        """See :meth:`recover` (:func:`~.segment_recovery.recover_tail`)."""
        assert self.fd is not None
        assert self.index_fd is not None
        self._adopt(
            recover_tail(
                self.fd,
                self.index_fd,
                self.log_path,
                base=self.base_offset,
                interval=self._interval,
                logger=self._logger,
                skipped=self._env.skipped,
            )
        )

    def _adopt(self, state: Scanned) -> None:
        """Take the bookkeeping a scan of the whole segment (or its tail) established."""
        self._index, self.size, self._max_ts = state.index, state.size, state.max_ts
        self._last_index_pos, self._last_record_pos = state.last_index_pos, state.last_record_pos
        self.next_offset = state.next_offset

    # -- appending (active segment) -------------------------------------------------------------

    def append(self, data: bytes, first_offset: int, stamps: Sequence[tuple[int, int]]) -> None:
        """Write encoded records (:func:`~.record.encode_run`; ``stamps`` their
        ``(timestamp_ns, size)``, the first at ``first_offset``, which must be ``next_offset``)
        with one ``pwrite``, and index them every ``interval`` bytes.

        On return the bytes are in the OS page cache (they survive a crash of the process, not
        of the machine). On ``OSError`` the segment is left as before the call and the error
        propagates.
        """
        self.open()
        assert self.fd is not None
        assert self.index_fd is not None
        assert self._max_ts is not None
        entries: list[tuple[int, int, int]] = []
        pos = self.size
        max_ts = self._max_ts
        last_index_pos = self._last_index_pos
        last_record_pos = self._last_record_pos
        interval = self._interval
        offset = first_offset - self.base_offset
        for timestamp_ns, size in stamps:
            if timestamp_ns > max_ts:
                max_ts = timestamp_ns
            if pos - last_index_pos >= interval:
                entries.append((offset, pos, max_ts))
                last_index_pos = pos
            last_record_pos = pos
            pos += size
            offset += 1
        try:
            write_all(self.fd, data, self.size)
            if entries:
                index = b"".join(INDEX_ENTRY.pack(*e) for e in entries)
                write_all(self.index_fd, index, len(self.index) * ENTRY_SIZE)
        except OSError:
            # Best effort: the next write overwrites the garbage anyway, and recovery drops it.
            try:
                os.ftruncate(self.fd, self.size)
            except OSError as exc:
                self._logger.warning(
                    "segment %s: rollback ftruncate failed: %s", self.log_path, exc
                )
            raise
        for e in entries:
            self.index.append(*e)
        self._recent.add(first_offset, first_offset + len(stamps), self.size, pos, data)
        self.size = pos
        self._max_ts = max_ts
        self._last_index_pos = last_index_pos
        self._last_record_pos = last_record_pos
        self.next_offset = first_offset + len(stamps)

    def _index_last_record(self) -> tuple[int, int, int] | None:
        """Index the newest record unless it already is; return the new entry, if any."""
        assert self._max_ts is not None
        if self._last_record_pos <= self._last_index_pos:
            return None
        entry = (self.next_offset - 1 - self.base_offset, self._last_record_pos, self._max_ts)
        self.index.append(*entry)
        self._last_index_pos = self._last_record_pos
        return entry

    def seal(self) -> tuple[int, int]:
        """Stop being active: index the last record (so the segment's newest timestamp is in its
        index), and hand back ``(log_fd, index_fd)`` for the caller to fsync and close."""
        self._recent.clear()  # only the active segment ships its runs as written
        self.open()
        assert self.fd is not None
        assert self.index_fd is not None
        assert self._max_ts is not None
        entry = self._index_last_record()
        if entry is not None:
            write_all(self.index_fd, INDEX_ENTRY.pack(*entry), (len(self.index) - 1) * ENTRY_SIZE)
        fds = (self.fd, self.index_fd)
        self.disown_fds()
        self.active = False
        return fds

    # -- reading --------------------------------------------------------------------------------

    @property
    def index(self) -> SparseIndex:
        """The index, loaded (or rebuilt by a full scan, with a WARNING) on first use."""
        if self._index is not None:
            return self._index
        index = load_index(self.index_path, self.log_path, self.size, self._logger)
        if index is None:
            with self._reader() as read_at:
                state = rebuild_index(
                    read_at,
                    self.log_path.name,
                    base=self.base_offset,
                    size=self.size,
                    interval=self._interval,
                    skipped=self._env.skipped,
                )
            self._adopt(state)
            index = state.index
            atomic_write(self.index_path, index.encode())
        self._index = index
        return index

    def read(
        self, start: int, stop: int, max_bytes: int | None = None, *, hold: int | None = None
    ) -> list[Record]:
        """Records ``[start, stop)``, all of which this segment must hold; with ``max_bytes``,
        only a prefix of them whose bodies add up to at least that (one record at least).

        Seeks with the index and ``pread``s from there (:func:`~.segment_read.read_range`,
        which steps over a damaged record, sealed segment or current, and reports it, or with
        ``hold``, the offset after its last record, may raise :class:`~.errors.RepairPending`).
        Raises
        :class:`CorruptRecordError` when the segment ends before ``stop``.
        """
        if stop <= start:
            return []
        with self._reader() as read_at:
            return read_range(
                read_at,
                self.index,
                self.log_path.name,
                base=self.base_offset,
                size=self.size,
                start=start,
                stop=stop,
                max_bytes=max_bytes,
                skipped=self._env.skipped,
                hold=hold,
            )

    def read_frames(
        self, start: int, stop: int, budget: int, now_ns: int, layout: FrameLayout
    ) -> FrameRun | None:
        """Records ``[start, stop)`` (all in this segment) as frames in ``layout``, or a
        prefix of them: :func:`~.frame_runs.read_frame_run`."""
        with self._reader() as read_at:
            return read_frame_run(
                read_at,
                self.index,
                base=self.base_offset,
                size=self.size,
                start=start,
                stop=stop,
                budget=budget,
                now_ns=now_ns,
                layout=layout,
            )

    def read_written(
        self, offset: int, max_bytes: int, hard_limit: int
    ) -> tuple[int, bytes] | None:
        """``(count, bytes)`` of the records from ``offset`` as appended, if a recent run starts
        there (:meth:`RecentRuns.span`); None otherwise (read and encode them instead)."""
        if not self.base_offset <= offset < self.next_offset:
            return None
        recent = self._recent
        span = recent.span(offset, max_bytes, hard_limit)
        if span is None:
            return None
        data = recent.newest_bytes(span)
        if data is not None:  # the last append's, as it went to the file
            return span.end - offset, data
        with self._reader() as read_at:
            data = read_at(span.stop - span.start, span.start)
        if len(data) != span.stop - span.start:
            return None
        return span.end - offset, data

    def floor_position(self, offset: int) -> int:
        """The byte position of the record at ``offset`` (one this segment holds) when a
        recent run starts or ends there, else of the index entry at or before it: then the
        record starts less than one index interval further on."""
        exact = self._recent.position(offset)
        if exact is not None:
            return exact
        index = self.index
        i = index.floor_for_offset(offset - self.base_offset)
        return index.entry(i)[1] if i >= 0 else 0

    def find_timestamp(self, timestamp_ns: int, end_offset: int) -> int:
        """First offset in this segment whose timestamp is ``>= timestamp_ns``, else
        ``end_offset``. Scans from the last index entry whose running max is older."""
        with self._reader() as read_at:
            return find_timestamp(
                read_at,
                self.index,
                self.log_path.name,
                base=self.base_offset,
                size=self.size,
                timestamp_ns=timestamp_ns,
                end_offset=end_offset,
                skipped=self._env.skipped,
                chunk=self._interval + 4 * HEADER_SIZE,
            )

    def max_timestamp(self, end_offset: int) -> int | None:
        """Newest ``timestamp_ns`` in the segment, None when it is empty; ``end_offset`` is the
        offset after its last record. Cached; for a sealed segment it comes from the seal index
        entry, else from a scan of the bytes after the last index entry."""
        if self.size == 0:
            return None
        if self._max_ts is None:
            self._max_ts = self._scan_max_timestamp(end_offset)
        return self._max_ts

    def _scan_max_timestamp(self, end_offset: int) -> int:
        if self._index is None:  # try the seal entry alone before loading the whole index
            found = seal_entry_timestamp(
                self.index_path, base=self.base_offset, size=self.size, end_offset=end_offset
            )
            if found is not None:
                return found
        return self._scan_until(len(self.index), end_offset)[3]

    def _scan_until(self, entries: int, stop: int) -> tuple[int, int, int, int]:
        """:func:`~.segment_read.scan_until` over this segment."""
        index = self.index
        with self._reader() as read_at:
            return scan_until(
                read_at,
                index,
                self.log_path.name,
                base=self.base_offset,
                size=self.size,
                entries=entries,
                stop=stop,
                skipped=self._env.skipped,
            )

    def overwrite(self, position: int, data: bytes) -> None:
        """Write ``data`` over the bytes at ``position`` (a repaired region of records of the
        same size), durably: through a write fd of its own, so a sealed segment's read-only
        fd stays as it is. Raises ``OSError``."""
        if position + len(data) > self.size:
            raise OSError(f"{self.log_path}: {len(data)} bytes at {position} past {self.size}")
        fd = os.open(self.log_path, os.O_WRONLY | O_CLOEXEC)
        try:
            write_all(fd, data, position)
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- truncating, closing, deleting ----------------------------------------------------------

    def reactivate(self) -> None:
        """Make a sealed segment the active one again (``truncate`` removed its successors)."""
        assert not self.active
        self.index  # noqa: B018  # load (or rebuild) the index before taking the write fds
        self.close()  # the read-only fd, if open
        self.active = True
        self.open()

    def truncate(self, offset: int) -> None:
        """Drop records ``>= offset`` (active segment; ``offset`` within it or at its end).

        Durable on return: both files are truncated and fsynced.
        """
        self.open()
        assert self.fd is not None
        assert self.index_fd is not None
        self._recent.clear()
        keep = self.index.count_below_offset(offset - self.base_offset)
        state = self._scan_until(keep, offset)
        self.size, self._last_record_pos, self.next_offset, self._max_ts = state
        while keep and self.index.positions[keep - 1] >= self.size:  # in damage cut off
            keep -= 1
        self.index.truncate(keep)
        self._last_index_pos = self.index.positions[-1] if keep else 0
        os.ftruncate(self.fd, self.size)
        os.ftruncate(self.index_fd, keep * ENTRY_SIZE)
        os.fsync(self.fd)
        os.fsync(self.index_fd)


__all__ = ["Segment", "base_offset_of"]
