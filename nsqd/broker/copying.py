"""The broker's side of replication: the only place records cross between a partition's log and
the replication stream (the ``"  R1"`` shells in :mod:`nsqd.replication` never see storage).

A leader reads what a follower lacks as encoded records (:func:`read_for_follower`); a
follower decodes them, checks them (CRC, offsets, epochs) and appends them at the same offsets
(:func:`append_from_leader`), and cuts its log back to where its new leader's history diverges
(:func:`truncate_for_leader`). Records the leader lost to damage before the follower had them
go as lost-record markers, so the follower's offsets stay the leader's; damaged records the
follower holds are copied back to the leader in their place (:func:`read_for_repair`,
:func:`repair_from_replica`; docs/replication.md). A publish is acknowledged once every
in-sync follower holds it: :class:`~.waiters.ReplicationWaiters` parks publishers until the
partition's high-watermark passes their records (group commit: one acknowledgement from a
follower releases every publish below it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from protocol.names import is_ephemeral
from protocol.replication import MAX_APPEND_RECORDS_SIZE

from ..core.errors import BrokerError
from ..storage.encoded_run import check_encoded
from ..storage.epochs import end_offset_for_epoch
from ..storage.errors import CorruptRecordError
from ..storage.log import PartitionLog
from ..storage.record import NewRecord, decode_record, encode_lost, encode_run, peek_size
from . import idempotence
from .channel import Channel
from .clock import Clock
from .partition import Partition
from .topic import Topic
from .waiters import ReplicationWaiters

__all__ = [
    "AckWaiters",
    "Batch",
    "ChannelKeeper",
    "ReplicaStreamError",
    "append_from_leader",
    "end_for_epoch",
    "follower_acked",
    "held_regions",
    "last_epoch",
    "mirror_channel",
    "read_for_follower",
    "read_for_repair",
    "repair_from_replica",
    "truncate_for_leader",
]


class ReplicaStreamError(BrokerError):
    """Records from a leader that cannot be appended (bad bytes, a gap, a newer epoch)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """Encoded records ``[base_offset, base_offset + count)`` of one partition."""

    base_offset: int
    count: int
    data: bytes


MAX_LOST_MARKERS = 4096  # lost-record markers per batch (52 bytes each)


def read_for_follower(
    partition: Partition, offset: int, max_bytes: int, *, as_written: bool = True
) -> Batch:
    """The encoded records from ``offset`` on (at least one if any, about ``max_bytes``).

    With ``as_written``, the bytes of the latest appends as written when ``offset`` starts one
    (a follower keeping up; the run may pass ``max_bytes``). Else the records read and encoded
    again, no more than about ``max_bytes`` of them, up to the first one lost to damage: for a
    stream's first batch (bytes that rotted on disk, which the follower refuses, are not sent
    again as they are after it reconnects) and for a follower catching up at a bounded rate.
    Records lost from ``offset`` on go as a batch of lost-record markers of their own; none
    past the log's end (an idle stream's wake-up reads nothing)."""
    log = partition.log
    if offset >= log.end_offset:
        return Batch(offset, 0, b"")
    written = log.read_written(offset, max_bytes, MAX_APPEND_RECORDS_SIZE) if as_written else None
    if written is not None:
        count, data = written
        return Batch(offset, count, data)
    records = log.read(offset, 1 << 20, max_bytes)
    first = records[0].offset if records else log.end_offset
    if first > offset:  # [offset, first) damaged here: the follower holds them as lost
        count = min(first - offset, MAX_LOST_MARKERS)
        return Batch(offset, count, encode_lost(offset, count, partition.state.epoch)[0])
    size, kept = 0, 0
    for i, record in enumerate(records):
        size += len(record.body) + len(record.ext)
        # up to the first gap; the tail cache serves records beyond max_bytes: cut them off
        if record.offset != offset + i or (kept and size > max_bytes):
            break
        kept += 1
    records = records[:kept]
    return Batch(offset, len(records), encode_run(records)[0])


def read_for_repair(partition: Partition, first: int, count: int) -> Batch:
    """This replica's intact copy of records ``[first, first + count)`` for its leader to
    write over its damaged ones; empty when this copy lacks any of them or is damaged too."""
    log = partition.log
    if not log.start_offset <= first < first + count <= log.end_offset:
        return Batch(first, 0, b"")
    records = log.read(first, count)
    if len(records) != count or any(r.offset != first + i for i, r in enumerate(records)):
        return Batch(first, 0, b"")
    return Batch(first, count, encode_run(records)[0])


def held_regions(partition: Partition) -> list[tuple[int, int]]:
    """``(first, count)`` of the damaged regions of ``partition``'s log held for a repair
    (:mod:`nsqd.storage.corruption`); one too large for a frame is settled (skipped) here."""
    log = partition.log
    if not isinstance(log, PartitionLog):
        return []
    wanted = []
    for region in log.skipped.held():
        if region.nbytes > MAX_APPEND_RECORDS_SIZE:
            log.skipped.settle(region.first)
        else:
            wanted.append((region.first, region.resumed - region.first))
    return wanted


def repair_from_replica(partition: Partition, batch: Batch) -> bool:
    """Write a replica's copy ``batch`` over the damaged region held at its first offset
    (durably: a worker thread's job); True when the records were replaced, False when the
    region is given up on (the copy is empty or does not fit). The caller then tells the
    partition's read guard (:meth:`~.read_guard.ReadGuard.repaired`)."""
    log = partition.log
    if not isinstance(log, PartitionLog):
        return False
    if not batch.count:
        log.skipped.settle(batch.base_offset)
        return False
    return log.repair(batch.base_offset, batch.data)


def append_from_leader(partition: Partition, epoch: int, batch: Batch) -> int:
    """Append a leader's ``batch`` at the same offsets; returns the new log end.

    The batch is checked whole first (lengths, CRCs, consecutive offsets from this log's
    end, no epoch newer than ``epoch``), then written as it came: the bytes on disk are the
    leader's. Raises :class:`ReplicaStreamError` when a check fails (nothing is written).
    """
    log = partition.log
    if batch.base_offset != log.end_offset:
        raise ReplicaStreamError(
            f"batch at offset {batch.base_offset}, but the log ends at {log.end_offset}"
        )
    try:
        run = check_encoded(batch.data, batch.base_offset)
    except CorruptRecordError as exc:
        raise ReplicaStreamError(f"damaged record: {exc}") from exc
    if run.count != batch.count:
        raise ReplicaStreamError(f"{run.count} record(s) where {batch.count} were announced")
    if run.max_epoch > epoch:
        raise ReplicaStreamError(f"record of epoch {run.max_epoch} from epoch {epoch}")
    if not run.count:
        return log.end_offset
    if run.lost:  # lost-record markers: written as they came, never decoded
        if not isinstance(log, PartitionLog):
            raise ReplicaStreamError("lost-record markers for a log in memory")
        log.append_encoded(batch.data, run, rotate=True)
    elif not (isinstance(log, PartitionLog) and log.append_encoded(batch.data, run)):
        log.append(_decoded(batch))  # a memory log, or a batch that rotates the segment
    partition.unsynced += run.count
    partition.state.appended(log.end_offset)
    if run.stamps:  # the producers' state follows the records (touched: their publish time)
        idempotence.copied(partition, run.stamps, run.entries[-1][0] / 1e9)
    return log.end_offset


def _decoded(batch: Batch) -> list[NewRecord]:
    """The batch's records as entries to append (already checked)."""
    entries, data, pos = [], batch.data, 0
    while pos < len(data):
        size = peek_size(data, pos)
        record = decode_record(data, pos)
        pos += size
        entries.append(
            NewRecord(
                record.timestamp_ns,
                record.body,
                record.trace_id,
                record.deliver_at_ns,
                record.ext,
                record.epoch,
            )
        )
    return entries


LAST_EPOCH_LOOKBACK = 1024  # offsets looked back over for a readable last record


def last_epoch(partition: Partition) -> int:
    """The epoch of the last readable record held (0 for an empty log, or when the last
    :data:`LAST_EPOCH_LOOKBACK` are all damaged or lost: the leader then cuts this log back
    to where epoch 0 ends, and the follower copies the rest again)."""
    log = partition.log
    end = log.end_offset
    for offset in range(end - 1, max(log.start_offset, end - LAST_EPOCH_LOOKBACK) - 1, -1):
        records = log.read(offset, 1)
        if records and records[0].offset < end:
            return records[0].epoch
    return 0


def end_for_epoch(partition: Partition, epoch: int) -> int:
    """Where this (leader's) log ends for a follower whose last record is of ``epoch``."""
    return end_offset_for_epoch(partition.log, epoch)


def truncate_for_leader(partition: Partition, offset: int) -> None:
    """Cut the log back to ``offset`` (what the new leader's history shares with it)."""
    log = partition.log
    if offset < log.end_offset:
        log.truncate(max(offset, log.start_offset))
        partition.state.truncated(log.end_offset)
        idempotence.truncated(partition, log.end_offset)


class AckWaiters(Protocol):
    """What a follower's acknowledgement needs of the broker: its clock (the in-sync
    bookkeeping) and the publishers parked on the high-watermark."""

    @property
    def clock(self) -> Clock: ...
    @property
    def replication(self) -> ReplicationWaiters: ...


class ChannelKeeper(Protocol):
    """What mirroring a leader's channel needs of the broker: creating and deleting channels
    as a SUB and ``/channel/delete`` do (timers, metadata, registration), and its clock (when
    a channel was deleted)."""

    @property
    def clock(self) -> Clock: ...

    def get_or_create_channel(self, topic: Topic, name: str) -> Channel:
        """The channel ``name`` of ``topic``, created on first use."""

    def delete_channel(self, topic: Topic, name: str) -> None:
        """Remove a channel and its cursors."""


def follower_acked(
    broker: AckWaiters, topic: Topic, partition: Partition, node: str, log_end: int
) -> None:
    """Follower ``node`` holds ``partition`` up to ``log_end``: a moved high-watermark
    releases the publishes below it and lets the channels deliver up to it."""
    if partition.state.follower_acked(node, log_end, broker.clock.monotonic()):
        # the publishers below it go; the followers hear of it with the next batch or
        # heartbeat (waking the streams for it would cost a frame per acknowledgement)
        broker.replication.wake(partition, streams=False)
        if not topic.paused:
            for channel in topic.channels.values():
                channel.notify()


def mirror_channel(
    broker: ChannelKeeper,
    topic: Topic,
    partition: Partition,
    name: str,
    confirmed: int,
    marks: Sequence[tuple[int, int]],
    deleted: bool,
) -> None:
    """A follower takes over its leader's channel state in ``partition`` (the channel is
    created here if new; ``deleted``: the leader deleted it). An ``#ephemeral`` channel (of a
    topic that is not) is only marked (:attr:`Partition.ephemeral_marks`): made here, with no
    client, it would never be deleted, and it would hold back retention."""
    if is_ephemeral(name) and not topic.ephemeral:
        if deleted:
            partition.ephemeral_marks.pop(name, None)
        else:
            partition.ephemeral_marks[name] = confirmed
        return
    if deleted:
        if name in topic.channels:
            broker.delete_channel(topic, name)
            topic.recently_deleted[name] = broker.clock.monotonic()
        return
    channel = broker.get_or_create_channel(topic, name)
    cursor = channel.cursors.get(partition.number)
    if cursor is not None:
        cursor.mirror(confirmed, marks)
        partition.dirty = True
