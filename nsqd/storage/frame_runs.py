"""Records read from disk for delivery as message frames: the consume path's read.

A plain consumer's take of new records sends a frame header and the body of each, and needs
a record itself only when its message comes back (REQ, TOUCH, a timeout) or is finished with
end-to-end latency on. :func:`read_frame_run` checks every record as
:func:`~.runs.decode_run` does (length, CRC, ext length, offset) and writes its frame in the
caller's layout (:class:`FrameLayout`: storage knows no protocol) instead of making a
:class:`~.record.Record`; the :class:`FrameRun` it returns keeps the bytes it read and where
each record starts, and decodes a record only when one is asked for. Records then frames cost
about 1.6 µs a message, this 1.0 (docs/benchmarks.md).

Anything the loop does not take on — an older record format, damage, a record not due yet
(DPUB) before any was taken — gives None or a shorter run: the caller reads the rest through
:meth:`~.log.PartitionLog.read`, which reports damage and defers what is not due.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, overload

import crc32c as _crc32c

from .corruption import ReadAt
from .index import SparseIndex
from .record import (
    CRC_START,
    FORMAT_SHIFT,
    FORMAT_V2,
    HEADER_SIZE,
    LENGTH_SIZE,
    MAX_RECORD_SIZE,
    RECORD_HEADER,
    Record,
    decode_record,
)
from .runs import COPIED_FOR_CRC, MIN_LENGTH_V2

_crc: Final = _crc32c.crc32c
_unpack_header_from: Final = RECORD_HEADER.unpack_from
_LEAD: Final = 64 * 1024  # read beyond the budget: the records before ``start``, headers, ext
_SHRINK: Final = 2  # a run using less than 1/2 of what was read keeps a copy of its part only


@dataclass(frozen=True, slots=True)
class FrameLayout:
    """How a frame starts: ``pack(fixed + len(body), kind, timestamp_ns, attempts,
    internal_id, trace_id)`` (a ``struct.Struct.pack``), then the body follows."""

    pack: Callable[[int, int, int, int, int, int], bytes]
    fixed: int  # the frame's size field for an empty body
    kind: int  # the frame type


class FrameRun(Sequence[Record]):
    """Records ``[first, first + len(run))`` of one partition, read for delivery: their frames
    (:attr:`frames`, each a first attempt) and the bytes they were read from, of which a record
    is decoded when one is asked for (``run[i]``, ``run[i:j]``)."""

    __slots__ = ("_buf", "_starts", "body_bytes", "first", "frames")

    def __init__(
        self, buf: bytes, starts: list[int], first: int, frames: bytearray, body_bytes: int
    ) -> None:
        self._buf = buf
        self._starts = starts  # where each record starts in buf
        self.first = first
        self.frames = frames
        self.body_bytes = body_bytes  # the bodies' bytes together

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        buf = self._buf
        if isinstance(index, slice):
            return [decode_record(buf, start) for start in self._starts[index]]
        return decode_record(buf, self._starts[index])

    @property
    def offsets(self) -> range:
        """The records' offsets."""
        return range(self.first, self.first + len(self._starts))


def read_frame_run(
    read_at: ReadAt,
    index: SparseIndex,
    *,
    base: int,
    size: int,
    start: int,
    stop: int,
    budget: int,
    now_ns: int,
    layout: FrameLayout,
) -> FrameRun | None:
    """The records ``[start, stop)`` of a segment (base offset ``base``, ``size`` bytes of
    records) as a :class:`FrameRun`, or its longest prefix that is due by ``now_ns`` and whose
    bodies stay within ``budget`` bytes (one record at least). One ``pread`` from the index
    entry at or before ``start`` to the one after the run's end, or of the budget and
    :data:`_LEAD` bytes (and a header a record) if that is less: a record it cuts off ends the
    run. None when the first record cannot be taken this way (see the module's docstring)."""
    i = index.floor_for_offset(start - base)
    rel, position, _ts = index.entry(i) if i >= 0 else (0, 0, 0)
    j = index.floor_for_offset(stop - base)  # the entry at or before the record after the run
    end = min(index.entry(j + 1)[1] if j + 1 < len(index) else size, size)
    end = min(end, position + _LEAD + budget + (stop - start) * HEADER_SIZE)
    buf = read_at(end - position, position)
    return scan_frames(buf, base + rel, start, stop, budget, now_ns, layout)


def scan_frames(
    buf: bytes,
    offset: int,
    start: int,
    stop: int,
    budget: int,
    now_ns: int,
    layout: FrameLayout,
) -> FrameRun | None:
    """:func:`read_frame_run`'s loop over ``buf``, whose first record has ``offset``: records
    before ``start`` are checked and skipped."""
    end = len(buf)
    unpack = _unpack_header_from
    crc32c = _crc
    pack, fixed, kind = layout.pack, layout.fixed, layout.kind
    header, crc_start, length_size = HEADER_SIZE, CRC_START, LENGTH_SIZE
    format_bits = FORMAT_V2 << FORMAT_SHIFT
    smallest, largest = MIN_LENGTH_V2, MAX_RECORD_SIZE - LENGTH_SIZE
    frames = bytearray()
    starts: list[int] = []
    add = starts.append
    taken = 0
    pos = last_end = 0
    while offset < stop and end - pos >= header:
        field, crc, got, ts, internal_id, trace_id, deliver_at, _epoch, ext_len = unpack(buf, pos)
        length = field - format_bits  # out of range unless format 2
        record_end = pos + length_size + length
        if not smallest <= length <= largest or record_end > end:
            break  # an older format, damage, or not whole in buf
        covered = (
            buf[pos + crc_start : record_end]
            if length <= COPIED_FOR_CRC
            else memoryview(buf)[pos + crc_start : record_end]
        )
        ext_end = pos + header + ext_len
        if crc32c(covered, field) != crc or ext_end > record_end or got != offset:
            break  # damage: the record read path reports it
        if got >= start:
            if deliver_at > now_ns:
                break  # not due yet (DPUB): the record read path defers it
            frames += pack(fixed + record_end - ext_end, kind, ts, 1, internal_id, trace_id)
            # a large body goes into the frames straight from what was read, not through a
            # slice of its own (one copy of a megabyte fewer; a small slice costs less)
            frames += (
                buf[ext_end:record_end]
                if length <= COPIED_FOR_CRC
                else memoryview(buf)[ext_end:record_end]
            )
            add(pos)
            last_end = record_end
            taken += record_end - ext_end
            if taken >= budget:
                break
        offset += 1
        pos = record_end
    if not starts:
        return None
    first = starts[0]
    if (last_end - first) * _SHRINK < end:  # keep only the bytes of the run's records
        buf = buf[first:last_end]
        starts = [at - first for at in starts]
    return FrameRun(buf, starts, start, frames, taken)
