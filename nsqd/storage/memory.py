"""An in-memory partition log for #ephemeral topics: no disk, bounded like nsqd's memory queue."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from .frame_runs import FrameLayout, FrameRun
from .record import HEADER_SIZE, NewRecord, Record, internal_id_for


class MemoryLog:
    """Same reading/appending API as :class:`PartitionLog`, kept in memory only.

    At most ``capacity`` unconsumed records are kept; like nsqd's memory queue for ephemeral
    topics, what does not fit is silently dropped.
    """

    def __init__(self, partition: int, capacity: int) -> None:
        self.partition = partition
        self.capacity = max(capacity, 1)
        self._records: deque[Record] = deque()
        self._start = 0
        self._end = 0
        self.dropped = 0

    @property
    def start_offset(self) -> int:
        """Lowest offset still held."""
        return self._start

    @property
    def end_offset(self) -> int:
        """Offset the next append gets."""
        return self._end

    def append(self, entries: Sequence[NewRecord], epoch: int | None = None) -> list[Record]:
        """Append what fits; the rest is dropped (and counted in ``dropped``). ``epoch``:
        every record's leader epoch in place of the entries' own."""
        room = self.capacity - len(self._records)
        out: list[Record] = []
        for entry in entries[: max(room, 0)]:
            offset = self._end
            record = Record(
                offset=offset,
                timestamp_ns=entry.timestamp_ns,
                internal_id=internal_id_for(self.partition, offset),
                trace_id=entry.trace_id,
                deliver_at_ns=entry.deliver_at_ns,
                body=entry.body,
                ext=entry.ext,
                epoch=entry.epoch if epoch is None else epoch,
            )
            self._records.append(record)
            self._end += 1
            out.append(record)
        self.dropped += len(entries) - len(out)
        return out

    def read_written(
        self, offset: int, max_bytes: int, hard_limit: int
    ) -> tuple[int, bytes] | None:
        """Nothing is written: None (the :class:`PartitionLog` API; encode what :meth:`read`
        gives)."""
        return None

    def read_frames(
        self, offset: int, max_records: int, max_bytes: int, now_ns: int, layout: FrameLayout
    ) -> FrameRun | None:
        """Nothing is on disk: None (the :class:`PartitionLog` API; :meth:`read` serves)."""
        return None

    def read(
        self, offset: int, max_records: int, max_bytes: int | None = None, *, hold: bool = False
    ) -> list[Record]:
        """Records from ``offset`` (clamped to what is held); ``max_bytes`` and ``hold`` are
        for the :class:`PartitionLog` API (disk reads; these records are in memory already)."""
        first = max(offset, self._start) - self._start
        last = min(first + max_records, len(self._records))
        return [self._records[i] for i in range(first, last)]

    def bytes_from(self, offset: int) -> int:
        """The bytes the records from ``offset`` on would take on disk (the
        :class:`PartitionLog` API: what a follower still lacks)."""
        first = max(offset, self._start) - self._start
        return sum(
            HEADER_SIZE + len(self._records[i].ext) + len(self._records[i].body)
            for i in range(first, len(self._records))
        )

    def trim(self, offset: int) -> None:
        """Forget records below ``offset`` (every channel has confirmed them)."""
        while self._records and self._start < offset:
            self._records.popleft()
            self._start += 1

    def truncate(self, offset: int) -> None:
        """Drop the records ``[offset, end_offset)`` (``offset`` clamped to what is held)."""
        offset = max(offset, self._start)
        while self._end > offset:  # the records are exactly [start, end)
            self._records.pop()
            self._end -= 1

    def sync(self) -> None:
        """Nothing to make durable."""

    def close(self) -> None:
        """Nothing to release."""
