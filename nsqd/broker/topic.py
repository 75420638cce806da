"""A topic at runtime: its partitions on this node, its channels and its youzan flags.

* ``ordered`` (youzan ``orderedmulti``): only SUB_ORDERED may consume, and a publish must name
  its partition (the producer hashes its sharding key to one);
* ``ext`` (youzan ``extend``): messages may carry a JSON header, sent to consumers that
  IDENTIFY ``extend_support`` (and only those may subscribe).

A topic has ``partition_num`` partitions in the cluster; ``partitions`` are the ones this node
holds (all of them when standalone), each led or replicated here (``Partition.state``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.errors import BadPartitionError, NotLeaderError, PartitionNotFoundError
from ..core.partition_state import Revision
from ..storage.batch import BodyBatch
from ..storage.record import NewRecord, Record
from .channel import Channel
from .partition import Partition
from .statistics import (
    TopicPartitionStatistics,
    TopicStatistics,
    topic_partition_statistics,
    topic_statistics,
)


class Topic:
    """A named topic. Publishing appends to one partition; every channel reads every partition."""

    def __init__(
        self,
        name: str,
        partitions: list[Partition],
        *,
        ephemeral: bool,
        ordered: bool = False,
        ext: bool = False,
        partition_num: int | None = None,
    ) -> None:
        self.name = name
        self.partitions: list[Partition] = []  # held here, by number
        self._by_number: dict[int, Partition] = {}
        #: moves whenever the state of any partition held here changes
        self.revision = Revision()
        self.partition_num = partition_num if partition_num is not None else len(partitions)
        for partition in partitions:
            self.hold(partition)
        self.ephemeral = ephemeral
        self.ordered = ordered
        self.ext = ext
        self.paused = False
        self.deleted = False
        #: administrative changes made here (pause, channel flags...): replication sends the
        #: state with it and a change waits for the in-sync replicas to acknowledge it
        self.admin_version = 0
        #: channel name -> when (broker monotonic clock) it was last deleted here: a second
        #: delete soon after (the same change reaching this node again) is not an error
        self.recently_deleted: dict[str, float] = {}
        #: placed by pnsq's lookupd: only ``partitions`` are held here, in their roles
        self.managed = False
        #: how many times one of its partitions stopped being led here (lookupd moved it, failed
        #: it over, or took it away): a consumer of every partition led here (a stock ``SUB``)
        #: that saw it change looks the topic up again
        self.leads_lost = 0
        #: lookupd's topic meta (youzan): SUB may create channels; retention (seconds) and
        #: fsync interval (messages) instead of nsqd's --retention / --sync-every when set
        self.channel_auto_create = True
        self.retention: float | None = None
        self.sync_every: int | None = None
        self.min_isr = 1  # lookupd's min_isr: publishes refused while fewer copies are in sync
        #: the life of the topic lookupd placed here ("" before lookupd named one): a copy of
        #: an earlier life of the name is deleted before this node follows the new one
        self.topic_id = ""
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self._rr = 0

    def hold(self, partition: Partition) -> None:
        """Add a partition placed on this node."""
        partition.state.shared = self.revision
        self._by_number[partition.number] = partition
        self.partitions = sorted(self._by_number.values(), key=lambda p: p.number)

    def release(self, number: int) -> Partition:
        """Stop holding partition ``number`` (its log stays on disk); returns it."""
        partition = self._by_number.pop(number)
        self.partitions = sorted(self._by_number.values(), key=lambda p: p.number)
        return partition

    def holds(self, number: int) -> bool:
        """True if partition ``number`` is held here."""
        return number in self._by_number

    @property
    def led(self) -> list[Partition]:
        """The partitions this node leads (every one it holds when standalone)."""
        return [p for p in self.partitions if p.state.leads]

    def pick_partition(self, partition: int | None) -> Partition:
        """The named partition if this node leads it, or the next partition it leads,
        round-robin, for a client that named none (``None``, or youzan's ``-1``); an ordered
        topic refuses that (BadPartitionError). A partition held as a replica, or none led:
        NotLeaderError; one not held: PartitionNotFoundError."""
        if partition is None or partition == -1:
            if self.ordered:
                raise BadPartitionError(self.name)
            led = self.led
            if not led:
                raise NotLeaderError(f"this node leads no partition of topic {self.name}")
            chosen = led[self._rr % len(led)]
            self._rr += 1
            return chosen
        chosen = self.partition(partition)
        chosen.state.require_leader(f"partition {partition} of topic {self.name}")
        return chosen

    def partition(self, number: int) -> Partition:
        """Partition ``number`` if held here, or PartitionNotFoundError."""
        found = self._by_number.get(number)
        if found is None:
            if 0 <= number < self.partition_num:
                raise PartitionNotFoundError(
                    f"partition {number} of topic {self.name} is not on this node"
                )
            raise PartitionNotFoundError(f"partition {number} of topic {self.name} does not exist")
        return found

    def append(self, partition: Partition, entries: Sequence[NewRecord]) -> Sequence[Record]:
        """Append to ``partition`` (page cache on return) under its leader epoch, and wake
        the channels."""
        epoch = partition.state.epoch
        # placed by lookupd after a change of leader: the records carry the epoch
        records = partition.log.append(entries, epoch or None)
        partition.state.appended(partition.log.end_offset)
        partition.unsynced += len(records)
        if isinstance(entries, BodyBatch):
            size, deferred = entries.body_bytes, entries.deliver_at_ns != 0
        else:
            size, deferred = sum(len(e.body) for e in entries), True  # each may be
        self.message_count += len(records)
        self.message_bytes += size
        partition.message_count += len(records)
        partition.message_bytes += size
        if deferred:
            for record in records:
                if record.deliver_at_ns:
                    partition.delayed.add(record.offset, record.deliver_at_ns, record.timestamp_ns)
        if not self.paused:
            for channel in self.channels.values():
                channel.notify()
        return records

    def first_channel_start(self, partition: Partition) -> int:
        """Where a new channel starts in ``partition``: the kept backlog if it is the first."""
        if self.channels:
            return partition.log.end_offset
        return max(partition.topic_start, partition.log.start_offset)

    @property
    def depth(self) -> int:
        """Messages kept for a first channel (nsqd's topic depth: 0 once channels exist)."""
        if self.channels:
            return 0
        return sum(
            p.log.end_offset - max(p.topic_start, p.log.start_offset) for p in self.partitions
        )

    def statistics(self, e2e_percentiles: Sequence[float] = (), now_ns: int = 0) -> TopicStatistics:
        """A frozen snapshot of the topic and its channels for ``/stats`` and ``/metrics``
        (FIN latencies at ``e2e_percentiles`` over the window at ``now_ns``)."""
        return topic_statistics(self, e2e_percentiles, now_ns)

    def partition_statistics(self) -> tuple[TopicPartitionStatistics, ...]:
        """The partitions' part of :meth:`statistics` alone (their replication, for a scrape
        that needs no channel)."""
        return topic_partition_statistics(self)
