"""One segment of a partition log: a ``<base>.log`` file of records plus its ``<base>.index``.

Blocking file I/O on raw fds (``os.pwrite``/``os.pread``), no Python-level buffering. A segment
is *active* (the last one: a read-write fd pair, takes appends) or *sealed* (a read-only log fd;
its index is loaded lazily). Either kind opens its fds on demand and registers them with the
process's :class:`~.handles.HandleCache`, which may close them again (:meth:`Segment.release`)
when too many are open. The caller (:class:`~.log.PartitionLog`) serialises access under the
lock it passes in, which is also the lock the cache takes to close them; nothing here locks.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Final, final

from .checkpoint import atomic_write, read_all, write_all
from .corruption import SkippedRegions, resync
from .errors import CorruptRecordError
from .handles import HandleCache
from .index import ENTRY_SIZE, INDEX_ENTRY, SparseIndex
from .record import (
    HEADER_SIZE,
    READ_CHUNK,
    EncodedRun,
    Record,
    encode_record_parts,
    scan_records,
)
from .runs import read_run

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
SEGMENT_NAME: Final = re.compile(r"^(\d{20})\.log$")
INDEX_NAME: Final = re.compile(r"^(\d{20})\.index$")
NO_TIMESTAMP: Final = -(1 << 63)  # running-max start value; a segment without records has it
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_UNBOUNDED: Final = 1 << 62  # a read's byte budget when none is given
base_offset_of: Final = attrgetter("base_offset")  # a bisect key over a list of segments


def segment_stem(base_offset: int) -> str:
    """The file name stem of the segment starting at ``base_offset`` (20 zero-padded digits)."""
    return f"{base_offset:020d}"


def scan(
    fd: int, name: str, *, position: int, limit: int, offset: int, chunk: int = READ_CHUNK
) -> Iterator[tuple[int, int, Record]]:
    """:func:`~.record.scan_records` over the file behind ``fd`` (named ``name`` in errors)."""
    read_at = functools.partial(os.pread, fd)
    return scan_records(read_at, name, position=position, limit=limit, offset=offset, chunk=chunk)


@final
@dataclass(frozen=True, slots=True)
class SegmentEnv:
    """What every segment of one log shares: the index interval, the logger, the process's
    handle cache and the log's lock (held around every use of a segment)."""

    interval: int
    logger: logging.Logger
    handles: HandleCache
    owner: threading.Lock
    skipped: SkippedRegions  # damaged regions of sealed segments that reads stepped over


@final
class Segment:
    """A segment file and its sparse index (see module docstring for active vs sealed)."""

    def __init__(self, directory: Path, base_offset: int, size: int, env: SegmentEnv) -> None:
        stem = segment_stem(base_offset)
        self.base_offset = base_offset
        self.log_path = directory / (stem + LOG_SUFFIX)
        self.index_path = directory / (stem + INDEX_SUFFIX)
        self.size = size  # bytes of valid records; the file may hold garbage after a failed write
        self.active = False  # the last segment of its log: takes appends
        self.fd: int | None = None  # the log fd while open: read-write if active, else read-only
        self.index_fd: int | None = None  # read-write, only while active and open
        self._env = env
        self._interval = env.interval
        self._logger = env.logger
        self._index: SparseIndex | None = None  # loaded lazily for sealed segments
        self._max_ts: int | None = None  # None = not computed yet (sealed segments)
        self._last_index_pos = 0  # position of the last index entry (0: the implicit one)
        self._last_record_pos = -1  # position of the newest record (-1: none)
        self.next_offset = base_offset  # offset the next append gets (active segment only)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, env: SegmentEnv) -> Segment:
        """A new, empty active segment. Its directory entry is durable after a directory fsync."""
        seg = cls(directory, base_offset, 0, env)
        seg.active = True
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC
        seg.fd = os.open(seg.log_path, flags, 0o644)
        try:
            seg.index_fd = os.open(
                seg.index_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o644
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
        every record up to end of file. At the first torn or corrupt record the file is truncated
        there (and fsynced) with a WARNING naming file, byte position, offset and bytes dropped.
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
        """See :meth:`recover`."""
        assert self.fd is not None
        assert self.index_fd is not None
        file_size = os.fstat(self.fd).st_size
        old = read_all(self.index_fd)
        index, _ = SparseIndex.from_bytes(old, limit=file_size)
        while len(index) and not self._intact(index.entry(len(index) - 1), file_size):
            index.truncate(len(index) - 1)  # an entry is trusted only if its record is intact
        self._index = index
        rel, pos, max_ts = index.entry(len(index) - 1) if len(index) else (0, 0, NO_TIMESTAMP)
        self._last_index_pos = pos
        self._max_ts = max_ts
        self.size = pos
        try:
            records = scan(
                self.fd,
                self.log_path.name,
                position=pos,
                limit=file_size,
                offset=self.base_offset + rel,
            )
            for position, size, record in records:
                self._note(position, record)
                self.size = position + size
        except CorruptRecordError as exc:
            self._logger.warning(
                "segment %s: torn or corrupt record at byte %d (offset %s): %s; "
                "truncating the file there, dropping %d bytes",
                self.log_path,
                self.size,
                exc.offset,
                exc.__cause__,
                file_size - self.size,
            )
            os.ftruncate(self.fd, self.size)
            os.fsync(self.fd)
        new = index.encode()
        if new != old:
            os.ftruncate(self.index_fd, 0)
            write_all(self.index_fd, new, 0)

    def _intact(self, entry: tuple[int, int, int], limit: int) -> bool:
        """Whether the record an index entry points at is there and valid."""
        assert self.fd is not None
        rel, pos, _ts = entry
        try:
            next(scan(self.fd, "", position=pos, limit=limit, offset=self.base_offset + rel))
        except CorruptRecordError:
            return False
        return True

    # -- appending (active segment) -------------------------------------------------------------

    def _note(self, position: int, record: Record) -> None:
        """Bookkeeping for a record found by a scan: max timestamp, index, last position."""
        assert self._max_ts is not None
        self._max_ts = max(self._max_ts, record.timestamp_ns)
        if position - self._last_index_pos >= self._interval:
            self.index.append(record.offset - self.base_offset, position, self._max_ts)
            self._last_index_pos = position
        self._last_record_pos = position
        self.next_offset = record.offset + 1

    def append(self, records: Sequence[Record]) -> None:
        """Write ``records`` (consecutive, starting at ``next_offset``) with one ``pwrite``.

        On return the bytes are in the OS page cache (they survive a crash of the process, not
        of the machine). On ``OSError`` the segment is left as before the call and the error
        propagates.
        """
        parts: list[bytes] = []
        stamps = [(r.timestamp_ns, encode_record_parts(r, parts)) for r in records]
        self._write_run(b"".join(parts), records[0].offset, stamps)

    def append_encoded(self, data: bytes, run: EncodedRun) -> None:
        """Write a checked run of encoded records (a leader's, verbatim) as :meth:`append`
        writes its own."""
        self._write_run(data, run.first_offset, run.entries)

    def _write_run(self, data: bytes, first_offset: int, stamps: Sequence[tuple[int, int]]) -> None:
        """Write the encoded records ``data`` (``(timestamp_ns, size)`` each in ``stamps``,
        from ``first_offset``) with one ``pwrite``, and index them every ``interval`` bytes."""
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

    def open(self) -> None:
        """Open the fds this segment needs unless they are (active: the read-write log and
        index fds; sealed: a read-only log fd), registered with the handle cache."""
        if self.fd is not None:
            self._env.handles.used(self)
            return
        if not self.active:
            self.fd = os.open(self.log_path, os.O_RDONLY | _O_CLOEXEC)
            self._env.handles.opened(self, self._env.owner, 1)
            return
        fd = os.open(self.log_path, os.O_RDWR | _O_CLOEXEC)
        try:
            self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self._env.handles.opened(self, self._env.owner, 2)

    def release(self) -> None:
        """Close the fds (the handle cache's eviction; the owner's lock is held). Nothing is
        lost: appends are in the page cache, and the next sync fsyncs the reopened file."""
        fds = [fd for fd in (self.fd, self.index_fd) if fd is not None]
        self.fd = self.index_fd = None
        for fd in fds:
            try:
                os.close(fd)
            except OSError as exc:  # the fd is gone either way (close(2) on Linux)
                self._logger.warning("segment %s: close failed: %s", self.log_path, exc)

    @contextmanager
    def _reader(self) -> Iterator[int]:
        """An fd to read from (see :meth:`open`)."""
        self.open()
        assert self.fd is not None
        yield self.fd

    @property
    def index(self) -> SparseIndex:
        """The index, loaded (or rebuilt by a full scan, with a WARNING) on first use."""
        if self._index is not None:
            return self._index
        try:
            data = self.index_path.read_bytes()
        except FileNotFoundError:
            data = None
        index, whole = SparseIndex.from_bytes(data or b"", limit=self.size)
        if data is None or not whole:
            self._logger.warning(
                "segment %s: index %s, rebuilding it from the segment",
                self.log_path,
                "missing" if data is None else "inconsistent",
            )
            index = self._rebuild_index()
            atomic_write(self.index_path, index.encode())
        self._index = index
        return index

    def _rebuild_index(self) -> SparseIndex:
        """Index the whole segment by scanning it, as appends would have (seal entry included)."""
        self._index, self._max_ts, self._last_index_pos = SparseIndex(), NO_TIMESTAMP, 0
        try:
            with self._reader() as fd:
                for pos, _size, record in scan(
                    fd, self.log_path.name, position=0, limit=self.size, offset=self.base_offset
                ):
                    self._note(pos, record)
        except CorruptRecordError:
            self._index = self._max_ts = None
            raise
        self._index_last_record()
        return self._index

    def _records_from(
        self, fd: int, offset: int, *, by_timestamp: int | None = None, chunk: int = READ_CHUNK
    ) -> Iterator[tuple[int, int, Record]]:
        """Scan from the index entry at or before ``offset`` (or before ``by_timestamp``)."""
        index = self.index
        if by_timestamp is None:
            i = index.floor_for_offset(offset - self.base_offset)
        else:
            i = index.floor_for_timestamp(by_timestamp)
        rel, pos, _ts = index.entry(i) if i >= 0 else (0, 0, NO_TIMESTAMP)
        return scan(
            fd,
            self.log_path.name,
            position=pos,
            limit=self.size,
            offset=self.base_offset + rel,
            chunk=chunk,
        )

    def read(self, start: int, stop: int, max_bytes: int | None = None) -> list[Record]:
        """Records ``[start, stop)``, all of which this segment must hold; with ``max_bytes``,
        only a prefix of them whose bodies add up to at least that (one record at least).

        Seeks with the index and ``pread``s from there. Raises :class:`CorruptRecordError` when a
        record fails validation or the segment ends before ``stop``.
        """
        out: list[Record] = []
        if stop <= start:
            return out
        # (a budget of 0 would read nothing: "one record at least" holds with 1)
        budget = _UNBOUNDED if max_bytes is None else max(max_bytes, 1)
        name = self.log_path.name
        with self._reader() as fd:
            read_at = functools.partial(os.pread, fd)
            index = self.index
            i = index.floor_for_offset(start - self.base_offset)
            rel, position, _ts = index.entry(i) if i >= 0 else (0, 0, NO_TIMESTAMP)
            offset = self.base_offset + rel
            while True:
                taken = len(out)
                try:
                    offset, budget = read_run(
                        read_at,
                        name,
                        position=position,
                        limit=self.size,
                        offset=offset,
                        start=start,
                        stop=stop,
                        budget=budget,
                        out=out,
                    )
                except CorruptRecordError as exc:
                    if self.active or exc.position is None or exc.offset is None:
                        raise
                    resumed = self._skip_damage(fd, exc.position, exc.offset, stop)
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
        raise CorruptRecordError(
            f"{name}: ends at offset {start + len(out)}, expected {stop}",
            position=self.size,
            offset=start + len(out),
        )

    def _skip_damage(
        self, fd: int, position: int, offset: int, stop: int
    ) -> tuple[int, int] | None:
        """Past a damaged record of a sealed segment: ``(position, offset)`` of the next intact
        one (None: nothing intact follows), the skipped region reported once."""
        read_at = functools.partial(os.pread, fd)
        found = resync(
            read_at, self.index, self.base_offset, position=position, offset=offset, limit=self.size
        )
        end_position, resumed = found if found is not None else (self.size, stop)
        self._env.skipped.note(
            self.log_path.name, position, offset, max(resumed, offset + 1), end_position - position
        )
        return found

    def find_timestamp(self, timestamp_ns: int, end_offset: int) -> int:
        """First offset in this segment whose timestamp is ``>= timestamp_ns``, else
        ``end_offset``. Scans from the last index entry whose running max is older."""
        chunk = self._interval + 4 * HEADER_SIZE
        with self._reader() as fd:
            for _pos, _size, record in self._records_from(
                fd, self.base_offset, by_timestamp=timestamp_ns, chunk=chunk
            ):
                if record.timestamp_ns >= timestamp_ns:
                    return record.offset
        return end_offset

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
            try:
                with self.index_path.open("rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    f.seek(max(size - ENTRY_SIZE, 0))
                    tail = f.read()
            except FileNotFoundError:
                size, tail = 0, b""
            if size % ENTRY_SIZE == 0 and len(tail) == ENTRY_SIZE:
                rel, pos, max_ts = INDEX_ENTRY.unpack(tail)
                if self.base_offset + rel == end_offset - 1 and pos < self.size:
                    return int(max_ts)
        return self._scan_until(len(self.index), end_offset)[3]

    def _scan_until(self, entries: int, stop: int) -> tuple[int, int, int, int]:
        """Scan from index entry ``entries - 1`` (or byte 0) over the records before offset
        ``stop``, which must all be there; return the state after them: ``(size,
        last_record_pos, next_offset, max_timestamp)``."""
        rel, pos, max_ts = self.index.entry(entries - 1) if entries else (0, 0, NO_TIMESTAMP)
        size, last_pos, next_offset = pos, -1, self.base_offset + rel
        with self._reader() as fd:
            for position, n, record in scan(
                fd, self.log_path.name, position=pos, limit=self.size, offset=next_offset
            ):
                if record.offset >= stop:
                    break
                max_ts = max(max_ts, record.timestamp_ns)
                size, last_pos, next_offset = position + n, position, record.offset + 1
        if next_offset != stop:
            raise CorruptRecordError(
                f"{self.log_path.name}: ends at offset {next_offset}, expected {stop}",
                position=size,
                offset=next_offset,
            )
        return size, last_pos, next_offset, max_ts

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
        keep = self.index.count_below_offset(offset - self.base_offset)
        state = self._scan_until(keep, offset)
        self.size, self._last_record_pos, self.next_offset, self._max_ts = state
        self.index.truncate(keep)
        self._last_index_pos = self.index.positions[-1] if keep else 0
        os.ftruncate(self.fd, self.size)
        os.ftruncate(self.index_fd, keep * ENTRY_SIZE)
        os.fsync(self.fd)
        os.fsync(self.index_fd)

    def disown_fds(self) -> None:
        """Forget the fds without closing them: the caller has taken them over."""
        self._env.handles.closed(self)
        self.fd = self.index_fd = None

    def close(self) -> None:
        """Close the fds without syncing them (the caller syncs first)."""
        self._env.handles.closed(self)
        fds = [fd for fd in (self.fd, self.index_fd) if fd is not None]
        self.fd = self.index_fd = None
        for fd in fds:
            os.close(fd)

    def delete(self) -> None:
        """Close and unlink both files (directory fsync is the caller's)."""
        self.close()
        self.log_path.unlink()
        self.index_path.unlink(missing_ok=True)


__all__ = [
    "INDEX_NAME",
    "SEGMENT_NAME",
    "Segment",
    "SegmentEnv",
    "base_offset_of",
    "scan",
    "segment_stem",
]
