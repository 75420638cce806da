"""Reads the shells ask of the broker: a range of records (the range-read API), the offset at a
time, and what reads skipped as damaged. Disk-backed logs are read in a worker thread (they lock
internally); storage's errors become the broker's."""

from __future__ import annotations

from collections.abc import Iterator

import trio

from ..core.errors import OffsetNotKeptError, TopicNotFoundError
from ..storage.errors import LogClosedError, OffsetOutOfRangeError
from ..storage.log import PartitionLog
from ..storage.record import Record
from .partition import Log, Partition
from .topic import Topic


async def read_records(partition: Partition, offset: int, max_records: int) -> list[Record]:
    """Records ``[offset, offset + max_records)`` of ``partition`` (fewer at its end).

    Raises:
        OffsetNotKeptError: ``offset`` is not kept (retention deleted it, or past the end).
        TopicNotFoundError: the topic was deleted meanwhile.
        StorageError: the disk failed.
    """
    plog = partition.log
    try:
        if isinstance(plog, PartitionLog):
            return await trio.to_thread.run_sync(plog.read, offset, max_records)
        got = plog.read(offset, max_records)
    except OffsetOutOfRangeError as exc:
        raise OffsetNotKeptError(str(exc)) from exc
    except LogClosedError as exc:
        raise TopicNotFoundError(str(exc)) from exc
    if got and got[0].offset != offset:  # a memory log clamps a trimmed offset forward
        raise OffsetNotKeptError(f"offset {offset} of partition {partition.number} is gone")
    return got


async def offset_at(partition: Partition, timestamp_ns: int) -> int:
    """The first offset of ``partition`` stored at or after ``timestamp_ns`` (its end if none).
    Raises TopicNotFoundError if the topic was deleted meanwhile, StorageError."""
    plog = partition.log
    try:
        if isinstance(plog, PartitionLog):
            return await trio.to_thread.run_sync(offset_for_timestamp, plog, timestamp_ns)
        return offset_for_timestamp(plog, timestamp_ns)
    except LogClosedError as exc:
        raise TopicNotFoundError(str(exc)) from exc


def skipped_records(topics: list[Topic]) -> Iterator[tuple[str, int, int, int, int]]:
    """``(topic, partition, records, bytes, healed)`` per disk log: what reads skipped as
    damaged, and the damaged records replaced by a replica's copy."""
    for topic in topics:
        for partition in topic.partitions:
            if isinstance(partition.log, PartitionLog):
                skipped = partition.log.skipped
                yield (
                    topic.name,
                    partition.number,
                    skipped.records,
                    skipped.bytes,
                    skipped.healed,
                )


TIMESTAMP_SCAN = 1024  # records per read when a log has no timestamp index (#ephemeral)


def offset_for_timestamp(log: Log, timestamp_ns: int) -> int:
    """First offset published at or after ``timestamp_ns`` (the end if none): the log's index
    when it has one (``PartitionLog``), else a scan (``MemoryLog``)."""
    indexed = getattr(log, "offset_for_timestamp", None)
    if indexed is not None:
        return int(indexed(timestamp_ns))
    offset = log.start_offset
    while offset < log.end_offset:
        records = log.read(offset, TIMESTAMP_SCAN)
        if not records:
            break
        for record in records:
            if record.timestamp_ns >= timestamp_ns:
                return record.offset
        offset = records[-1].offset + 1
    return log.end_offset
