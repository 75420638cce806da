"""A topic at runtime: its partitions on this node, its channels and its youzan flags.

* ``ordered`` (youzan ``orderedmulti``): only SUB_ORDERED may consume, and a publish must name
  its partition (the producer hashes its sharding key to one);
* ``ext`` (youzan ``extend``): messages may carry a JSON header, sent to consumers that
  IDENTIFY ``extend_support`` (and only those may subscribe).
"""

from __future__ import annotations

from ..core.errors import BadPartitionError, PartitionNotFoundError
from ..storage.record import NewRecord, Record
from .channel import Channel
from .partition import Partition


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
    ) -> None:
        self.name = name
        self.partitions = partitions
        self.ephemeral = ephemeral
        self.ordered = ordered
        self.ext = ext
        self.paused = False
        self.deleted = False
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self._rr = 0

    def pick_partition(self, partition: int | None) -> Partition:
        """The named partition, or the next one round-robin for a client that named none
        (``None``, or youzan's ``-1``); an ordered topic refuses that (BadPartitionError)."""
        if partition is None or partition == -1:
            if self.ordered:
                raise BadPartitionError(self.name)
            chosen = self.partitions[self._rr % len(self.partitions)]
            self._rr += 1
            return chosen
        return self.partition(partition)

    def partition(self, number: int) -> Partition:
        """Partition ``number``, or PartitionNotFoundError."""
        if not 0 <= number < len(self.partitions):
            raise PartitionNotFoundError(f"partition {number} of topic {self.name} does not exist")
        return self.partitions[number]

    def append(self, partition: Partition, entries: list[NewRecord]) -> list[Record]:
        """Append to ``partition`` (page cache on return) and wake the channels."""
        records = partition.log.append(entries)
        partition.unsynced += len(records)
        size = sum(len(e.body) for e in entries)
        self.message_count += len(records)
        self.message_bytes += size
        partition.message_count += len(records)
        partition.message_bytes += size
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
