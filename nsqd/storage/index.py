"""The sparse per-segment index: offset -> file position, and timestamp -> offset.

Pure code: the index lives in memory as three parallel ``array('q')`` columns; ``segment.py``
reads and writes its file form (:func:`SparseIndex.from_bytes`, :meth:`SparseIndex.encode`).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import Final, final

# IndexEntry => RelativeOffset u32 | Position u64 | MaxTimestampNs i64
# One entry roughly every index_interval_bytes of segment data, in the order records were
# appended; both RelativeOffset and Position strictly increase. The record at position 0 is
# never indexed (it is implicit). MaxTimestampNs is the largest timestamp_ns of every record of
# the segment up to and including the indexed one, so it never decreases and a timestamp seek
# is a binary search even when publish clocks go backwards. No CRC: an index is a cache that is
# checked for consistency on load and rebuilt from the segment when it fails.
INDEX_ENTRY: Final = struct.Struct(
    ">I"  # relative_offset: record offset - segment base offset
    "Q"  # position: byte position of the record in the segment file
    "q"  # max_timestamp_ns: running maximum of timestamp_ns, including this record
)
ENTRY_SIZE: Final = INDEX_ENTRY.size


@final
class SparseIndex:
    """In-memory sparse index of one segment."""

    __slots__ = ("max_timestamps", "positions", "relative_offsets")

    def __init__(self) -> None:
        self.relative_offsets: array[int] = array("q")
        self.positions: array[int] = array("q")
        self.max_timestamps: array[int] = array("q")

    def __len__(self) -> int:
        return len(self.positions)

    @classmethod
    def from_bytes(cls, data: bytes, *, limit: int) -> tuple[SparseIndex, bool]:
        """Parse an index file, keeping its longest consistent prefix.

        An entry is consistent when its offset and position strictly increase, its position is
        inside ``(0, limit)`` (``limit`` = segment file size) and its timestamp does not
        decrease. Returns the index and whether the whole file was consistent.
        """
        index = cls()
        whole = len(data) - len(data) % ENTRY_SIZE
        last_rel, last_pos, last_ts = -1, 0, -(1 << 63)
        for rel, pos, ts in INDEX_ENTRY.iter_unpack(data[:whole]):
            if rel <= last_rel or pos <= last_pos or pos >= limit or ts < last_ts:
                return index, False
            index.append(rel, pos, ts)
            last_rel, last_pos, last_ts = rel, pos, ts
        return index, whole == len(data)

    def append(self, relative_offset: int, position: int, max_timestamp_ns: int) -> None:
        """Add an entry after the last one (the caller keeps the order)."""
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)
        self.max_timestamps.append(max_timestamp_ns)

    def truncate(self, count: int) -> None:
        """Keep only the first ``count`` entries."""
        del self.relative_offsets[count:]
        del self.positions[count:]
        del self.max_timestamps[count:]

    def entry(self, i: int) -> tuple[int, int, int]:
        """Entry ``i`` as ``(relative_offset, position, max_timestamp_ns)``."""
        return self.relative_offsets[i], self.positions[i], self.max_timestamps[i]

    def floor_for_offset(self, relative_offset: int) -> int:
        """Index of the last entry with ``relative_offset <= relative_offset``, or -1."""
        return bisect_right(self.relative_offsets, relative_offset) - 1

    def count_below_offset(self, relative_offset: int) -> int:
        """How many entries have ``relative_offset < relative_offset``."""
        return bisect_left(self.relative_offsets, relative_offset)

    def floor_for_timestamp(self, timestamp_ns: int) -> int:
        """Index of the last entry whose running max timestamp is ``< timestamp_ns``, or -1.

        Every record up to and including that entry's record is older than ``timestamp_ns``,
        so the first record at or after it is found by scanning forward from it.
        """
        return bisect_left(self.max_timestamps, timestamp_ns) - 1

    def encode(self, start: int = 0) -> bytes:
        """The file form of entries ``start`` onwards."""
        pack = INDEX_ENTRY.pack
        return b"".join(
            pack(rel, pos, ts)
            for rel, pos, ts in zip(
                self.relative_offsets[start:],
                self.positions[start:],
                self.max_timestamps[start:],
                strict=True,
            )
        )
