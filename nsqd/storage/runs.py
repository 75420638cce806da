"""Runs of records decoded for the read path: many records per call, each checked in full.

:func:`~.record.scan_records` yields one record at a time (recovery and index rebuilds want
every position); a consumer's read wants a list. :func:`read_run` fills one with a loop that
pays one header unpack, one CRC call and two copies (the bytes the CRC covers, the body) per
record and nothing it can hoist out (DESIGN.md §6): 1.1 to 1.2 µs a record against the scan's 2.3
(tests/unit/nsqd/storage/test_record.py checks that both read and reject the same records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import crc32c as _crc32c

from .errors import CorruptRecordError, corrupt_in_segment
from .record import (
    CRC_START,
    FORMAT_SHIFT,
    FORMAT_V2,
    HEADER_SIZE,
    LENGTH_SIZE,
    MAX_RECORD_SIZE,
    MIN_HEADER_SIZE,
    NEW_RECORD,
    READ_CHUNK,
    RECORD_HEADER,
    Record,
    decode_record,
    peek_size,
    refill,
)

_crc: Final = _crc32c.crc32c
_unpack_header_from: Final = RECORD_HEADER.unpack_from
COPIED_FOR_CRC: Final = 16 * 1024  # record length up to which the CRC reads a copy
_FORMAT_SHIFT_IN_BYTE: Final = FORMAT_SHIFT - 24  # the format in the big-endian first byte
MIN_LENGTH_V2: Final = HEADER_SIZE - LENGTH_SIZE  # a format-2 record with empty ext and body


def decode_run(
    buf: bytes,
    pos: int,
    offset: int,
    start: int,
    stop: int,
    budget: int,
    out: list[Record],
) -> tuple[int, int, int]:
    """Decode the complete records of ``buf`` from ``pos`` on, which must have the offsets
    ``offset, offset + 1, ...``: each is checked as :func:`peek_size` and
    :func:`decode_record` check it (length, CRC, ext length) and its offset, and those at
    ``start`` or above are appended to ``out``.

    Stops before offset ``stop``, before a record ``buf`` does not hold whole, or once the
    bodies appended reach ``budget`` bytes (at least one record is appended). Returns
    ``(pos, offset, budget)`` after the last record decoded. Raises
    :class:`CorruptRecordError` whose ``position`` is the bad record's index in ``buf``.

    The read path's loop: one header unpack, one CRC call (over a copy of the record's bytes:
    a 250-byte copy costs less than a memoryview slice) and one body copy per record, the
    record made field by field (no ``__init__`` frame; the tests compare every field with
    :func:`~.record.decode_record`'s), the rest inlined (:func:`~.record.scan_records` pays a
    generator step and three calls per record).
    """
    end = len(buf)
    unpack = _unpack_header_from
    crc32c = _crc
    new = NEW_RECORD
    append = out.append
    header, crc_start, length_size = HEADER_SIZE, CRC_START, LENGTH_SIZE
    format_bits = FORMAT_V2 << FORMAT_SHIFT
    smallest, largest = MIN_LENGTH_V2, MAX_RECORD_SIZE - LENGTH_SIZE
    while offset < stop:
        if end - pos >= header:
            field, crc, got, ts, internal_id, trace_id, deliver_at, epoch, ext_len = unpack(
                buf, pos
            )
            length = field - format_bits  # out of range unless format 2
        else:
            length = -1
        if not smallest <= length <= largest:  # format 0 or 1, a short tail, or damage
            found = _decode_other(buf, pos, offset)
            if found is None:
                break  # not whole in buf
            record, size = found
            pos += size
            offset += 1
            if record.offset >= start:
                append(record)
                budget -= len(record.body)
                if budget <= 0:
                    break
            continue
        record_end = pos + length_size + length
        if record_end > end:
            break
        covered = (  # copied when small: a copy is cheaper than a view there, not for 1 MB
            buf[pos + crc_start : record_end]
            if length <= COPIED_FOR_CRC
            else memoryview(buf)[pos + crc_start : record_end]
        )
        actual = crc32c(covered, field)
        if actual != crc:
            raise CorruptRecordError(
                f"CRC mismatch (stored {crc:#010x}, computed {actual:#010x})",
                position=pos,
                offset=offset,
            )
        ext_end = pos + header + ext_len
        if ext_end > record_end or got != offset:
            raise CorruptRecordError(
                f"ext length {ext_len} overruns record length {length}"
                if ext_end > record_end
                else f"offset {got} out of sequence",
                position=pos,
                offset=offset,
            )
        offset += 1
        if got >= start:
            body = buf[ext_end:record_end]
            record = new(Record)  # every field set below: a third of Record(...)'s cost
            record.offset = got
            record.timestamp_ns = ts
            record.internal_id = internal_id
            record.trace_id = trace_id
            record.deliver_at_ns = deliver_at
            record.body = body
            record.ext = buf[pos + header : ext_end] if ext_len else b""
            record.epoch = epoch
            append(record)
            pos = record_end
            budget -= len(body)
            if budget <= 0:
                break
        else:
            pos = record_end
    return pos, offset, budget


def _decode_other(buf: bytes, pos: int, offset: int) -> tuple[Record, int] | None:
    """The record at ``buf[pos]`` that :func:`decode_run`'s loop does not take (format 0 or 1, a
    header cut off by the end of ``buf``, or damage), with its size: the per-record checks of
    :func:`~.record.peek_size` and :func:`~.record.decode_record`. None: not whole in ``buf``."""
    if len(buf) - pos < MIN_HEADER_SIZE:
        return None
    try:
        size = peek_size(buf, pos)
        if len(buf) - pos < size:
            return None
        record = decode_record(buf, pos)
    except CorruptRecordError as exc:
        raise CorruptRecordError(str(exc), position=pos, offset=offset) from exc
    if record.offset != offset:
        raise CorruptRecordError(
            f"offset {record.offset} out of sequence", position=pos, offset=offset
        )
    return record, size


def read_run(
    read_at: Callable[[int, int], bytes],
    name: str,
    *,
    position: int,
    limit: int,
    offset: int,
    start: int,
    stop: int,
    budget: int,
    out: list[Record],
    chunk: int = READ_CHUNK,
) -> tuple[int, int]:
    """Read the records from byte ``position`` (which has ``offset``) on, validated as
    :func:`~.record.scan_records` validates them, appending those of ``[start, stop)`` to
    ``out`` until their bodies reach ``budget`` bytes (one record at least) or byte ``limit``
    comes.

    Returns the offset after the last record read (below ``stop`` only when ``limit`` or the
    budget came first) and what is left of the budget. Raises :class:`CorruptRecordError` as
    :func:`~.record.scan_records` does; what was read before the bad record is in ``out`` by
    then.
    """
    buf = b""
    buf_start = position  # position of buf[0]
    i = 0
    while offset < stop and position < limit:
        try:
            i, offset, budget = decode_run(buf, i, offset, start, stop, budget, out)
        except CorruptRecordError as exc:
            at = buf_start + (exc.position or 0)  # decode_run always gives it
            raise corrupt_in_segment(name, exc, position=at, offset=exc.offset) from exc
        position = buf_start + i
        if offset >= stop or budget <= 0 or position >= limit:
            break
        try:  # the next record is not whole in buf
            need = MIN_HEADER_SIZE
            if len(buf) - i >= need:
                need = peek_size(buf, i)
            buf, buf_start, i = refill(read_at, buf, buf_start, i, need, limit, max(chunk, need))
        except CorruptRecordError as exc:
            raise corrupt_in_segment(name, exc, position=position, offset=offset) from exc
    return offset, budget
