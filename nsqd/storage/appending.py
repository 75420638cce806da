"""A partition log's write path: encoding a publish's entries, writing them to the active segment
in one ``pwrite``, and rotating to a new segment where a batch crosses ``max_bytes_per_file``.

:class:`Appender` works on the log's chain of segments (ordered by base offset, the last one
active) in place, under the log's lock; :class:`~.log.PartitionLog` checks the arguments, keeps
its ``end_offset`` in step with the active segment and translates errors. Rotation is the rare
path: a batch that fits (nearly every one) costs a single segment write and one tail cache
extend, with no per-record work beyond the encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import final

from .batch import AppendedBatch, BodyBatch
from .bodies import encode_bodies
from .cache import RECORD_OVERHEAD, TailCache
from .durability import PendingSync
from .encoded_run import EncodedRun
from .record import HEADER_SIZE, NewRecord, Record, encode_run, internal_id_for
from .segment import Segment
from .segment_files import SegmentEnv


@final
class Appender:
    """Appends to one log's segments, keeping the records in its tail cache.

    Shares the log's list of segments (which truncation and retention change in place), its
    tail cache and its :class:`~.durability.PendingSync` (a rotation leaves the sealed
    segment's fds and a directory fsync to the next sync). Not locked: the log holds its lock.
    """

    def __init__(
        self,
        directory: Path,
        partition: int,
        segments: list[Segment],
        env: SegmentEnv,
        cache: TailCache,
        pending: PendingSync,
        max_bytes: int,
    ) -> None:
        self._directory = directory
        self._pid = internal_id_for(partition, -1)  # the partition's bits; | (offset + 1)
        self._segments = segments
        self._env = env
        self._cache = cache
        self._pending = pending
        self._max_bytes = max_bytes

    def append(
        self, first: int, entries: Sequence[NewRecord], epoch: int | None
    ) -> Sequence[Record]:
        """Write ``entries`` (at least one) at offsets from ``first`` (the active segment's
        ``next_offset``) and return them as records (see :meth:`~.log.PartitionLog.append`).

        Raises ``ValueError`` for a field that does not fit the layout, nothing written, and
        ``OSError``, a prefix of the batch then written (the active segment's ``next_offset``
        tells how much).
        """
        pid = self._pid
        records: Sequence[Record]
        if isinstance(entries, BodyBatch):  # no trace id, no ext but stamps: made when read
            times, at, ep, bodies, exts = (
                entries.publish_times(),
                entries.deliver_at_ns,
                epoch or 0,
                entries.bodies,
                entries.exts,
            )
            data, stamps = encode_bodies(first, pid, times, at, ep, bodies, exts)
            records = AppendedBatch(first, pid, times, at, ep, bodies, exts)
        else:
            records = [
                Record(
                    offset,
                    e.timestamp_ns,
                    pid | (offset + 1),
                    e.trace_id,
                    e.deliver_at_ns,
                    e.body,
                    e.ext,
                    e.epoch if epoch is None else epoch,
                )
                for offset, e in enumerate(entries, first)
            ]
            data, stamps = encode_run(records)  # checks every field before anything is written
        if self._segments[-1].size + len(data) <= self._max_bytes:
            self._write(data, first, records, stamps)
        else:  # rare: the batch goes past max_bytes_per_file, the log rotates
            self._append_rotating(data, first, records, stamps)
        return records

    def _append_rotating(
        self,
        data: bytes,
        first: int,
        records: Sequence[Record],
        stamps: list[tuple[int, int]],
    ) -> None:
        """Write ``records`` (encoded as ``data``, ``stamps`` their sizes, the first at offset
        ``first``) in chunks, starting a new segment wherever the next record would take the
        active one past ``max_bytes_per_file`` (a record larger than that goes alone in a
        segment)."""
        splits: list[int] = []  # indexes where a new segment starts
        size = self._segments[-1].size
        for i, (_, n) in enumerate(stamps):
            if size and size + n > self._max_bytes:
                splits.append(i)
                size = 0
            size += n
        bounds = [0, *splits, len(records)]
        pos = 0  # where the chunk's bytes start in data
        for k in range(len(bounds) - 1):
            lo, hi = bounds[k], bounds[k + 1]
            if k:
                self._rotate(first + lo)
            if lo < hi:  # empty when the very first entry already needs a new segment
                end = pos + sum(n for _, n in stamps[lo:hi])
                self._write(data[pos:end], first + lo, records[lo:hi], stamps[lo:hi])
                pos = end

    def _write(
        self, data: bytes, first: int, records: Sequence[Record], stamps: list[tuple[int, int]]
    ) -> None:
        """Write encoded ``records`` (the first at offset ``first``) to the active segment and
        keep them in the tail cache."""
        self._segments[-1].append(data, first, stamps)
        self._cache.extend(
            first, records, len(data) + (RECORD_OVERHEAD - HEADER_SIZE) * len(records)
        )

    def _rotate(self, base: int) -> None:
        """Seal the active segment and start a new one at offset ``base`` (the old one's end)."""
        new = Segment.create(self._directory, base, self._env)
        try:
            self._pending.rotated.extend(self._segments[-1].seal())
        except OSError:
            new.delete()
            raise
        self._segments.append(new)
        self._pending.dir_dirty = True

    def append_encoded(self, data: bytes, run: EncodedRun, rotate: bool = False) -> bool:
        """Write a leader's checked batch (at least one record, at the active segment's
        ``next_offset``) verbatim, past the tail cache (see
        :meth:`~.log.PartitionLog.append_encoded`); False, writing nothing, when it would cross
        ``max_bytes_per_file``, unless ``rotate``: then a new segment starts at the batch
        (which goes whole into it). Raises ``OSError``, nothing written."""
        segment = self._segments[-1]
        if segment.size + len(data) > self._max_bytes:
            if not rotate or not segment.size:
                return False
            self._rotate(run.first_offset)
            segment = self._segments[-1]
        segment.append(data, run.first_offset, run.entries)
        self._cache.skip_to(run.first_offset + run.count)
        return True
