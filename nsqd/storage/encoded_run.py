"""A leader's encoded batch as a follower checks it before writing it as it came: lengths,
formats, CRCs and consecutive offsets, and what the segment's index needs of each record.

The record layout itself is :mod:`.record`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import crc32c as _crc32c

from .errors import CorruptRecordError
from .record import (
    CRC_START,
    FORMAT_LOST,
    FORMAT_SHIFT,
    FORMAT_V1,
    FORMAT_V2,
    HEADER_SIZE,
    LENGTH_MASK,
    LENGTH_SIZE,
    RECORD_HEADER,
)
from .stamp import PRODUCER_STAMP, STAMP_MAGIC, STAMP_SIZE

__all__ = ["EncodedRun", "check_encoded"]

_crc: Final = _crc32c.crc32c
_unpack_header_from: Final = RECORD_HEADER.unpack_from
_unpack_stamp_from: Final = PRODUCER_STAMP.unpack_from


@dataclass(frozen=True, slots=True)
class EncodedRun:
    """A run of encoded records (format 2, or 1) checked by :func:`check_encoded`."""

    first_offset: int
    count: int
    max_epoch: int
    #: (timestamp_ns, encoded size) per record, for the segment's index
    entries: tuple[tuple[int, int], ...]
    lost: int = 0  #: lost-record markers (format 3) among them
    #: ``(offset, producer, sequence)`` of each record with a producer stamp (:mod:`.stamp`)
    stamps: tuple[tuple[int, int, int], ...] = ()


def check_encoded(data: bytes, first_offset: int) -> EncodedRun:
    """Check ``data`` as consecutive format-2 (or, from a leader of the previous release,
    format-1) records from ``first_offset`` (a leader's batch
    that a follower writes as it came), or lost-record markers (format 3, empty): every
    length, CRC and offset. Raises :class:`CorruptRecordError` naming the first problem."""
    entries: list[tuple[int, int]] = []
    stamps: list[tuple[int, int, int]] = []
    pos, expected, max_epoch, end, lost = 0, first_offset, 0, len(data), 0
    with memoryview(data) as view:
        while pos < end:
            if end - pos < HEADER_SIZE:
                raise CorruptRecordError(f"record {expected} cut short")
            field, crc, offset, ts, _, _, _, epoch, ext_len = _unpack_header_from(data, pos)
            version = field >> FORMAT_SHIFT
            if version == FORMAT_LOST:
                lost += 1
            elif version != FORMAT_V2 and version != FORMAT_V1:
                raise CorruptRecordError(f"record {expected}: format {version}")
            size = (field & LENGTH_MASK) + LENGTH_SIZE
            if version == FORMAT_LOST and size != HEADER_SIZE:
                raise CorruptRecordError(f"record {expected}: a lost-record marker of {size} B")
            if size < HEADER_SIZE + ext_len:
                raise CorruptRecordError(f"record {expected}: bad length {size}")
            if pos + size > end:
                raise CorruptRecordError(f"record {expected} cut short")
            if offset != expected:
                raise CorruptRecordError(f"record {offset} where {expected} was due")
            seed = 0 if version == FORMAT_V1 else field
            if _crc(view[pos + CRC_START : pos + size], seed) != crc:
                raise CorruptRecordError(f"record {offset}: CRC mismatch")
            entries.append((ts, size))
            if ext_len >= STAMP_SIZE and data[pos + HEADER_SIZE] == STAMP_MAGIC:
                _, producer, sequence = _unpack_stamp_from(data, pos + HEADER_SIZE)
                stamps.append((offset, producer, sequence))
            max_epoch = max(max_epoch, epoch)
            expected += 1
            pos += size
    return EncodedRun(first_offset, len(entries), max_epoch, tuple(entries), lost, tuple(stamps))
