"""The partition log: an append-only sequence of records over segment files, with recovery.

Durability contract (nsqd's, see DESIGN.md §4): :meth:`PartitionLog.append` returns once the
bytes are in the OS page cache, so a crash of the process (kill -9) loses nothing; a crash of
the machine loses what was appended after the last completed :meth:`PartitionLog.sync`. The
broker decides when to sync (``--sync-every`` / ``--sync-timeout``) and runs it in a worker
thread; every other method runs on the caller's thread.

This module is the log's front: locking, argument checks, the tail cache, error translation.
Below it: :mod:`.opening` (finding and recovering the segments), :mod:`.appending` (encoding,
writing and rotation), :mod:`.log_read` (reads across segments), :mod:`.durability` (what a
sync covers, the fsyncs), :mod:`.trimming` (truncation and retention).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Final, final

from pnsq._fileio import fsync_directory

from .appending import Appender
from .cache import CacheBudget
from .corruption import SkippedRegions
from .durability import PendingSync
from .encoded_run import EncodedRun
from .errors import LogClosedError, OffsetOutOfRangeError, StorageError
from .frame_runs import FrameLayout, FrameRun
from .handles import HandleCache
from .log_read import bytes_from, offset_for_timestamp, read_frames, read_segments
from .opening import open_segments
from .record import NewRecord, Record
from .repair import repair_region
from .segment import Segment
from .segment_files import SegmentEnv
from .trimming import delete_expired, truncate_segments

_DEFAULT_LOGGER: Final = logging.getLogger("nsqd.storage")


@final
class PartitionLog:
    """The log of one partition: a directory of segments named by their base offset.

    Thread safety: a ``threading.Lock`` guards all bookkeeping, so any method may be called
    from any thread; :meth:`sync` drops the lock before its fsyncs, so appends and reads on
    the event-loop thread go on while a worker thread syncs.

    Descriptors: segments open their files on demand through the shared
    :class:`~.handles.HandleCache`, which closes idle ones when too many are open; so an idle
    partition may hold none, and a read of an old segment reuses its fd while it stays cached.
    """

    def __init__(
        self,
        directory: Path,
        partition: int,
        segments: list[Segment],
        env: SegmentEnv,
        *,
        max_bytes_per_file: int,
        cache: CacheBudget,
    ) -> None:
        """Use :meth:`open`."""
        self.partition = partition
        self.directory = directory
        self._segments = segments
        self._env = env
        self._logger = env.logger
        self._lock = env.owner
        self._end = segments[-1].next_offset
        self._cache = cache.cache(self._end)  # the newest records, within the shared budget
        self._pending = PendingSync(directory, self._lock)  # what the next sync must cover
        self._appender = Appender(
            directory, partition, segments, env, self._cache, self._pending, max_bytes_per_file
        )
        self._closed = False

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        partition: int,
        max_bytes_per_file: int = 100 * 1024 * 1024,
        index_interval_bytes: int = 4096,
        cache: CacheBudget | None = None,
        logger: logging.Logger | None = None,
        handles: HandleCache | None = None,
    ) -> PartitionLog:
        """Open (creating ``directory`` if missing) and recover the log.

        ``cache``: the byte budget its tail cache shares with other logs (default: a budget of
        its own of :data:`~nsqd.storage.cache.DEFAULT_CACHE_BYTES`).

        Sealed segments are trusted (verified when read). The last segment is scanned from its
        last intact index entry; a torn or corrupt tail is truncated (durably) and reported with
        a WARNING on ``logger``. Missing or inconsistent index files are rebuilt. ``handles``
        is the process's bound on open segment files (default: a private unbounded one).
        """
        log = logger or _DEFAULT_LOGGER
        env = SegmentEnv(
            index_interval_bytes,
            log,
            handles or HandleCache(),
            threading.Lock(),
            SkippedRegions(log, partition, str(directory)),
        )
        with env.owner:  # the segments are registered with the cache: evictable only once open
            try:
                segments = open_segments(directory, env)
            except OSError as exc:
                raise StorageError(f"cannot open log {directory}: {exc}") from exc
            return cls(
                directory,
                partition,
                segments,
                env,
                max_bytes_per_file=max_bytes_per_file,
                cache=cache if cache is not None else CacheBudget(),
            )

    @property
    def start_offset(self) -> int:
        """Lowest offset still stored (== ``end_offset`` when the log is empty)."""
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """Offset the next append gets."""
        return self._end

    @property
    def skipped(self) -> SkippedRegions:
        """Damaged regions that reads and recovery stepped over (counts for metrics)."""
        return self._env.skipped

    @property
    def size_bytes(self) -> int:
        """Bytes on disk over all segment files (indexes not counted)."""
        return sum(seg.size for seg in self._segments)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # -- writing -------------------------------------------------------------------------------

    def append(self, entries: Sequence[NewRecord], epoch: int | None = None) -> Sequence[Record]:
        """Append ``entries`` at consecutive offsets and return them as :class:`Record`\\ s
        (for a :class:`~.batch.BodyBatch`, an :class:`~.batch.AppendedBatch`: each made when
        read).

        ``internal_id = (partition << 50) | (offset + 1)``. All entries go to the segment in
        one ``pwrite`` (more only where the batch crosses ``max_bytes_per_file`` and the log
        rotates); ``epoch``, when given, is every record's leader epoch in place of the
        entries' own. Durable against a process crash on return; against a machine crash after the
        next :meth:`sync`. Raises ``ValueError`` for a field that does not fit the layout (nothing
        written) and :class:`StorageError` on an I/O error; then a prefix of the batch may be
        stored, as ``end_offset`` tells.
        """
        with self._lock:
            self._check_open()
            if not entries:
                return []
            try:
                return self._appender.append(self._end, entries, epoch)
            except OSError as exc:
                raise StorageError(f"append to {self.directory} failed: {exc}") from exc
            finally:  # what was written: all of the batch, none, or (an I/O error) a prefix
                self._end = self._segments[-1].next_offset

    def append_encoded(self, data: bytes, run: EncodedRun, *, rotate: bool = False) -> bool:
        """Write a leader's checked batch verbatim at this log's end (``run.first_offset`` must
        be :attr:`end_offset`); the records skip the tail cache (a follower serves no reads
        until it leads; then they come from disk). Returns False, writing nothing, when the
        batch would cross ``max_bytes_per_file`` (the caller appends it record by record, which
        rotates), unless ``rotate`` (a batch of lost-record markers, which cannot be appended
        as records): the log then rotates before it. Raises ``ValueError`` for a batch not at
        the end, :class:`StorageError`."""
        with self._lock:
            self._check_open()
            if run.first_offset != self._end:
                raise ValueError(f"batch at {run.first_offset}, log ends at {self._end}")
            if not run.count:
                return True
            try:
                written = self._appender.append_encoded(data, run, rotate)
            except OSError as exc:
                raise StorageError(f"append to {self.directory} failed: {exc}") from exc
            self._end = self._segments[-1].next_offset
            return written

    # -- reading -------------------------------------------------------------------------------

    def read(
        self, offset: int, max_records: int, max_bytes: int | None = None, *, hold: bool = False
    ) -> list[Record]:
        """Records ``[offset, min(offset + max_records, end_offset))``; ``[]`` at ``end_offset``.

        Served from the in-memory tail cache (the newest records, within the cache's byte
        budget) when possible, else from disk: an index seek and ``pread``s, never a scan from
        the start of a segment. ``max_bytes`` bounds the bodies read from disk (at least one
        record is returned; cached records cost nothing and are not bounded). Raises
        :class:`OffsetOutOfRangeError` outside ``[start_offset, end_offset]``. A damaged
        record is skipped (:mod:`.corruption`); with ``hold`` (a read for delivery) one held
        for a repair from a replica raises :class:`~.errors.RepairPending` instead.
        """
        with self._lock:
            self._check_open()
            if offset < self.start_offset or offset > self._end:
                raise OffsetOutOfRangeError(
                    f"offset {offset} outside [{self.start_offset}, {self._end}] "
                    f"of partition {self.partition}"
                )
            stop = min(self._end, offset + max(max_records, 0))
            while offset < stop:
                first, cached = self._cache.read(offset, stop)
                if first == offset:
                    return cached
                try:
                    out = read_segments(
                        self._segments, self._end, offset, min(stop, first), max_bytes, hold
                    )
                except OSError as exc:
                    raise StorageError(f"read from {self.directory} failed: {exc}") from exc
                if out:
                    if out[-1].offset + 1 == first:
                        out.extend(cached)
                    return out
                if first < stop:
                    return cached
                # all of [offset, stop) was lost to damage (reported): look past it, so a
                # reader never gets [] below end_offset
                offset, stop = stop, min(self._end, 2 * stop - offset)
            return []

    def repair(self, first: int, data: bytes) -> bool:
        """Write a replica's copy ``data`` of the held damaged region at offset ``first`` in
        its place; True when done, durably (:func:`~.repair.repair_region`: otherwise the
        region is settled, skipped from now on). Raises :class:`StorageError` on an I/O error
        (the region then settled too)."""
        with self._lock:
            self._check_open()
            try:
                return repair_region(self._segments, self._env.skipped, first, data)
            except OSError as exc:
                raise StorageError(f"repair of {self.directory} failed: {exc}") from exc

    def read_frames(
        self, offset: int, max_records: int, max_bytes: int, now_ns: int, layout: FrameLayout
    ) -> FrameRun | None:
        """Records from ``offset`` on that the tail cache does not hold, read from disk as
        frames in ``layout`` (:mod:`.frame_runs`): up to ``max_records``, those due by
        ``now_ns``, bodies within ``max_bytes`` (one record at least). None when the first of
        them is cached, past the end, or for :meth:`read` to take (see the module)."""
        with self._lock:
            self._check_open()
            stop = min(self._end, offset + max_records, self._cache.start)
            if not self.start_offset <= offset < stop:
                return None
            try:
                return read_frames(
                    self._segments, self._end, offset, stop, max(max_bytes, 1), now_ns, layout
                )
            except OSError as exc:
                raise StorageError(f"read from {self.directory} failed: {exc}") from exc

    def offset_for_timestamp(self, timestamp_ns: int) -> int:
        """First offset whose ``timestamp_ns >= timestamp_ns``, ``end_offset`` if there is none.

        Exact even if timestamps are not monotone. Cost: the newest timestamp of each earlier
        segment (from its seal index entry, cached), one binary search in the index of the
        segment that holds the answer and a scan of about one index interval.
        """
        with self._lock:
            self._check_open()
            try:
                return offset_for_timestamp(self._segments, self._end, timestamp_ns)
            except OSError as exc:
                raise StorageError(f"timestamp seek in {self.directory} failed: {exc}") from exc

    def bytes_from(self, offset: int) -> int:
        """Bytes on disk of the records from ``offset`` to the end: 0 at or past
        ``end_offset``, the whole log below ``start_offset``. Exact where a recent append
        starts or ends at ``offset`` (a follower's acknowledgement, mostly), else counted from
        the index entry at or before it: over by less than one index interval. May load a
        sealed segment's index (as a read there would). Raises :class:`StorageError`."""
        with self._lock:
            self._check_open()
            if offset >= self._end:
                return 0
            try:
                return bytes_from(self._segments, max(offset, self.start_offset))
            except OSError as exc:
                raise StorageError(f"index of {self.directory} unreadable: {exc}") from exc

    def read_written(
        self, offset: int, max_bytes: int, hard_limit: int
    ) -> tuple[int, bytes] | None:
        """For a follower: ``(count, bytes)`` of the records from ``offset`` as the active
        segment's recent appends wrote them (:meth:`Segment.read_written`), or None (then
        :meth:`read` them and encode). Raises :class:`StorageError` on an I/O error."""
        with self._lock:
            self._check_open()
            try:
                return self._segments[-1].read_written(offset, max_bytes, hard_limit)
            except OSError as exc:
                raise StorageError(f"read of {self.directory} failed: {exc}") from exc

    # -- durability ------------------------------------------------------------------------------

    def sync(self) -> None:
        """Make every record appended before the call durable (fsync of data, index and, after
        a rotation, the directory), and close the fds of segments rotated out since.

        Safe to call from a worker thread while another thread appends and reads: the lock is
        held only to take the work, not across the fsyncs.
        """
        with self._lock:
            self._check_open()
            try:
                fds, dir_dirty = self._pending.take(self._segments[-1])
            except OSError as exc:
                raise StorageError(f"sync of {self.directory} failed: {exc}") from exc
        self._pending.run(fds, dir_dirty)

    def close(self) -> None:
        """:meth:`sync`, then close every fd (even if the sync fails, which raises
        :class:`StorageError`). Idempotent; other methods then raise :class:`LogClosedError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._cache.clear()
            fds, errors = self._pending.take_closing(self._segments[-1])
            for seg in self._segments[:-1]:  # sealed segments' cached read fds
                try:
                    seg.close()
                except OSError as exc:
                    errors.append(exc)
        self._pending.run(fds, self._pending.dir_dirty)
        if errors:
            raise StorageError(f"close of {self.directory} failed: {errors[0]}") from errors[0]

    # -- truncation and retention ----------------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Drop the records ``[offset, end_offset)``; later appends reuse those offsets.

        Deletes whole later segments (last first, so a crash leaves a prefix of the log) and
        truncates the one holding ``offset``. Durable on return. Raises
        :class:`OffsetOutOfRangeError` unless ``start_offset <= offset <= end_offset``; on an I/O
        error the log closes itself (reopen it: recovery repairs it) and raises
        :class:`StorageError`.
        """
        with self._lock:
            self._check_open()
            if offset < self.start_offset or offset > self._end:
                raise OffsetOutOfRangeError(
                    f"cannot truncate to {offset}: outside [{self.start_offset}, {self._end}]"
                )
            if offset == self._end:
                return
            try:
                truncate_segments(self._segments, offset, self._pending)
            except (OSError, StorageError) as exc:
                self._abandon()
                raise StorageError(f"truncate of {self.directory} failed: {exc}") from exc
            self._end = offset
            self._cache.truncate(offset)

    def _abandon(self) -> None:
        """Close every fd without syncing and refuse further use (after a failed truncate, the
        in-memory state no longer matches the files; reopening recovers from the files)."""
        self._closed = True
        self._cache.clear()
        self._pending.discard()
        for seg in self._segments:
            with suppress(OSError):
                seg.close()

    def delete_segments(self, *, before_offset: int, older_than_ns: int) -> int:
        """Retention: delete leading segments whose records all have offsets ``< before_offset``
        and whose newest ``timestamp_ns < older_than_ns``; return how many were deleted.

        Only a prefix of the log is deleted (it stops at the first segment that must stay) and
        never the active segment, so ``end_offset`` (and the id sequence) survives a restart.
        Durable on return (directory fsynced).
        """
        with self._lock:
            self._check_open()
            try:
                deleted = delete_expired(
                    self._segments, before_offset=before_offset, older_than_ns=older_than_ns
                )
                if deleted:
                    fsync_directory(self.directory)
            except OSError as exc:
                raise StorageError(f"retention in {self.directory} failed: {exc}") from exc
            self._cache.drop_below(self.start_offset)
            return deleted
