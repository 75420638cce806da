"""Retention: delete whole segments that every channel has consumed, once old enough."""

from __future__ import annotations

from collections.abc import Iterable

from ..storage.log import PartitionLog
from ..storage.memory import MemoryLog
from .topic import Topic


def apply_retention(topics: Iterable[Topic], retention: float, now_ns: int) -> int:
    """One pass over ``topics``; returns the number of segments deleted.

    A segment goes when every channel has confirmed all of it (with no channel: when it lies
    before where a first channel would start) and its newest record is older than the topic's
    retention (lookupd's ``retention`` meta), else ``retention`` seconds. Cursors behind the new
    start of a log move up to it. In-memory logs drop what every channel has confirmed.
    """
    deleted = 0
    for topic in list(topics):
        kept_for = topic.retention if topic.retention is not None else retention
        older_than = now_ns - int(kept_for * 1e9)
        for partition in topic.partitions:
            cursors = [c.cursors[partition.number] for c in topic.channels.values()]
            needed = min((c.confirmed for c in cursors), default=partition.topic_start)
            if isinstance(partition.log, MemoryLog):
                partition.log.trim(needed)
                continue
            assert isinstance(partition.log, PartitionLog)
            deleted += partition.log.delete_segments(before_offset=needed, older_than_ns=older_than)
            for cursor in cursors:
                cursor.skip_to(partition.log.start_offset)
    return deleted
