"""Where a leader epoch ends in a partition log (Kafka's OffsetsForLeaderEpoch).

A deposed leader that rejoins as a replica truncates its log to the end of the last epoch it
shares with the new leader; this answers "the offset after the last record appended under an
epoch <= E". Epochs never decrease along a log (a new leader appends under a higher epoch, and
a deposed one truncates before it appends again), so a binary search over offsets finds it:
O(log n) single-record reads, each an index seek in one segment.
"""

from __future__ import annotations

from typing import Protocol

from .record import Record


class _Readable(Protocol):
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    def read(self, offset: int, max_records: int, max_bytes: int | None = None) -> list[Record]: ...


def end_offset_for_epoch(log: _Readable, epoch: int) -> int:
    """The offset after the last record of ``log`` whose epoch is ``<= epoch``; the log's
    start offset if its first kept record is already of a later epoch."""
    low, high = log.start_offset, log.end_offset
    while low < high:
        middle = (low + high) // 2
        records = log.read(middle, 1)  # damage is skipped: the next readable one, if any
        if not records:  # nothing readable from here on: cut here (the rest is copied again)
            high = middle
            continue
        record = records[0]
        if record.epoch <= epoch:
            low = min(record.offset + 1, high)
        else:
            high = middle
    return low
