"""A partition log's read path below its tail cache: a range of records across segments, the
first offset at or after a time, and how many bytes lie past an offset.

Both work on the log's chain of segments (ordered by base offset; ``end`` is the offset after
the last record) under the log's lock; :class:`~.log.PartitionLog` checks the arguments, serves
what its cache holds and translates errors.
"""

from __future__ import annotations

from bisect import bisect_right

from .frame_runs import FrameLayout, FrameRun
from .record import Record
from .segment import Segment, base_offset_of


def read_segments(
    segments: list[Segment],
    end: int,
    start: int,
    stop: int,
    max_bytes: int | None,
    hold: bool = False,
) -> list[Record]:
    """Records ``[start, stop)`` (within ``[first base offset, end]``) from the segments that
    hold them; with ``max_bytes``, only a prefix whose bodies add up to at least that
    (``hold``: see :meth:`Segment.read`)."""
    i = bisect_right(segments, start, key=base_offset_of) - 1
    out: list[Record] = []
    while start < stop:
        seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else end
        upto = min(stop, seg_end)
        got = segments[i].read(start, upto, max_bytes, hold=seg_end if hold else None)
        out.extend(got)
        if upto >= stop:
            break
        if max_bytes is not None:  # what the next segment may still give
            max_bytes -= sum(len(r.body) for r in got)
            if max_bytes <= 0:
                break
        start = upto
        i += 1
    return out


def read_frames(
    segments: list[Segment],
    end: int,
    start: int,
    stop: int,
    budget: int,
    now_ns: int,
    layout: FrameLayout,
) -> FrameRun | None:
    """Records ``[start, stop)`` (``start < stop <= end``) as frames in ``layout``, or a
    prefix of them, from the segment that holds ``start`` (:meth:`Segment.read_frames`)."""
    i = bisect_right(segments, start, key=base_offset_of) - 1
    seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else end
    return segments[i].read_frames(start, min(stop, seg_end), budget, now_ns, layout)


def offset_for_timestamp(segments: list[Segment], end: int, timestamp_ns: int) -> int:
    """First offset whose ``timestamp_ns >= timestamp_ns``, ``end`` if there is none: the first
    segment whose newest timestamp is new enough is searched."""
    for i, seg in enumerate(segments):
        seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else end
        newest = seg.max_timestamp(seg_end)
        if newest is not None and newest >= timestamp_ns:
            return seg.find_timestamp(timestamp_ns, seg_end)
    return end


def bytes_from(segments: list[Segment], offset: int) -> int:
    """Bytes of the records from ``offset`` (within ``[first base offset, end)``) to the end of
    the log: :meth:`Segment.floor_position` in the segment holding it, and every later
    segment's whole size."""
    i = bisect_right(segments, offset, key=base_offset_of) - 1
    held = segments[i]
    return held.size - held.floor_position(offset) + sum(s.size for s in segments[i + 1 :])
