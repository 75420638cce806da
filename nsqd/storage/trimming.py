"""Removing records from either end of a partition log's chain of segments: truncating its tail
(a deposed leader rejoining as a replica) and deleting whole segments at its head (retention).

Both work on the log's list of segments in place, under the log's lock, and are durable on
return; :class:`~.log.PartitionLog` checks the arguments, translates errors and keeps its tail
cache in step.
"""

from __future__ import annotations

from bisect import bisect_left

from pnsq._fileio import fsync_directory

from .durability import PendingSync
from .segment import Segment, base_offset_of


def truncate_segments(segments: list[Segment], offset: int, pending: PendingSync) -> None:
    """Drop the records ``>= offset`` (which the segments hold, or their end).

    Deletes whole later segments (last first, so a crash leaves a prefix of the log), fsyncs
    the directory, and truncates the segment holding ``offset`` (made the active one again if
    it was sealed). Raises ``OSError`` or :class:`~.errors.StorageError`, the segments' state
    then no longer matching the files.
    """
    keep = max(1, bisect_left(segments, offset, key=base_offset_of))
    while len(segments) > keep:
        segments[-1].delete()
        segments.pop()
        pending.dir_dirty = True
    if pending.dir_dirty:
        fsync_directory(pending.directory)
        pending.dir_dirty = False
    target = segments[-1]
    if not target.active:
        target.reactivate()
    target.truncate(offset)


def delete_expired(segments: list[Segment], *, before_offset: int, older_than_ns: int) -> int:
    """Delete leading segments whose records all have offsets ``< before_offset`` and whose
    newest ``timestamp_ns < older_than_ns``; return how many were deleted (the directory
    fsync is the caller's). Stops at the first segment that must stay; never deletes the last
    (active) one. Raises ``OSError``."""
    deleted = 0
    while len(segments) > 1:
        next_base = segments[1].base_offset
        if next_base > before_offset:
            break
        newest = segments[0].max_timestamp(next_base)
        if newest is not None and newest >= older_than_ns:
            break
        segments[0].delete()
        del segments[0]
        deleted += 1
    return deleted
