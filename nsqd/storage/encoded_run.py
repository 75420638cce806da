"""A leader's encoded batch as a follower checks it before writing it as it came: lengths,
formats, CRCs and consecutive offsets, and what the segment's index needs of each record.

The record layout itself is :mod:`.record`'s.
"""

from __future__ import annotations

import struct
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
#: :data:`~.record.RECORD_HEADER` with the fields a follower does not check skipped
#: (internal_id, trace_id, deliver_at_ns: 24 pad bytes): fewer ints made per record
_CHECKED: Final = struct.Struct(f"{RECORD_HEADER.format[:5]}24x{RECORD_HEADER.format[8:]}")
_unpack_checked_from: Final = _CHECKED.unpack_from
assert _CHECKED.size == RECORD_HEADER.size
#: records up to this size are checksummed from a copy, larger ones through a view
_SLICED_MAX: Final = 16 * 1024
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
    length, CRC and offset. Raises :class:`CorruptRecordError` naming the first problem.

    A follower runs this over every record it copies: the loop reads only the fields it
    checks, and checksums a small record from a slice (a copy is cheaper than a view's
    setup for a few hundred bytes)."""
    entries: list[tuple[int, int]] = []
    entry = entries.append
    stamps: list[tuple[int, int, int]] = []
    pos, expected, max_epoch, end, lost = 0, first_offset, 0, len(data), 0
    unpack, crc, header_size = _unpack_checked_from, _crc, HEADER_SIZE
    with memoryview(data) as view:
        while pos < end:
            if end - pos < header_size:
                raise CorruptRecordError(f"record {expected} cut short")
            field, checksum, offset, ts, epoch, ext_len = unpack(data, pos)
            size = (field & LENGTH_MASK) + LENGTH_SIZE
            version = field >> FORMAT_SHIFT
            if version == FORMAT_V2:
                seed = field
            elif version == FORMAT_V1:
                seed = 0  # its CRC starts from 0
            else:  # an empty lost-record marker, checksummed as format 2
                _check_marker(version, size, expected)
                lost += 1
                seed = field
            if size < header_size + ext_len:
                raise CorruptRecordError(f"record {expected}: bad length {size}")
            stop = pos + size
            if stop > end:
                raise CorruptRecordError(f"record {expected} cut short")
            if offset != expected:
                raise CorruptRecordError(f"record {offset} where {expected} was due")
            start = pos + CRC_START
            covered = data[start:stop] if size <= _SLICED_MAX else view[start:stop]
            if crc(covered, seed) != checksum:
                raise CorruptRecordError(f"record {offset}: CRC mismatch")
            entry((ts, size))
            if ext_len >= STAMP_SIZE and data[pos + header_size] == STAMP_MAGIC:
                _, producer, sequence = _unpack_stamp_from(data, pos + header_size)
                stamps.append((offset, producer, sequence))
            if epoch > max_epoch:
                max_epoch = epoch
            expected += 1
            pos = stop
    return EncodedRun(first_offset, len(entries), max_epoch, tuple(entries), lost, tuple(stamps))


def _check_marker(version: int, size: int, expected: int) -> None:
    """Raise :class:`CorruptRecordError` unless a record of format ``version`` (neither 2 nor
    1) and ``size`` bytes is a lost-record marker (format 3, empty)."""
    if version != FORMAT_LOST:
        raise CorruptRecordError(f"record {expected}: format {version}")
    if size != HEADER_SIZE:
        raise CorruptRecordError(f"record {expected}: a lost-record marker of {size} B")
