"""The log record: its values and its on-disk layouts (format v2 written, v1 and v0 still read).

No file I/O of its own: :func:`scan_records` reads through the ``read_at(size, position)``
callable it is given (``segment.py`` passes ``os.pread`` bound to an fd), so it is testable on
plain bytes. ``log.py`` encodes each append with :func:`encode_run` (a batch of bodies with
:func:`~.bodies.encode_bodies`); the read path's
batched decoding is :mod:`.runs`; a follower checks a leader's encoded batch with
:mod:`.encoded_run`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, dataclass_transform

import crc32c as _crc32c

from protocol.message import make_internal_id

from .errors import CorruptRecordError, corrupt_in_segment

# Record v2 => FormatLength u32 | Crc u32 | Offset u64 | TimestampNs i64 | InternalId u64
#              | TraceId u64 | DeliverAtNs i64 | Epoch u32 | ExtLen u16 | Ext | Body
# Record v1 => the same layout; only the Crc covers less (below).
# Record v0 => the same without Epoch (the release before leader epochs), FormatLength < 2**30.
# Big-endian, as NSQ's own message encoding. A record occupies 4 + Length bytes, where Length is
# FormatLength's low 30 bits and its top 2 bits are the record format (0, 1 or 2): every record
# says how to read it, so files written by earlier releases are read as they are, and no
# file header or rewrite is needed (v0 lengths never reach 2**30: MAX_RECORD_SIZE).
# Crc is CRC-32C (Castagnoli) over every byte after the Crc field: Offset through the end of Body;
# in v2 the computation starts from FormatLength as its initial value instead of 0, so the
# format and length are covered too: one flipped bit turning a v1 record into a v0 one (the same
# CRC range, a 4-byte shorter header) went unseen, while a v2 record's Crc no longer matches as
# v0 or v1 (one C call per record, as before).
# The offset is inside the CRC because offsets are never re-based (a replica copies the leader's
# offsets verbatim), and recovery must not accept a record whose offset bytes rotted. The offset
# sits at byte 8 in both formats (corruption resync searches for it there).
# Format 3 is a *lost-record marker*: the v2 layout with an empty ext and body, CRC as v2,
# written by a follower for an offset its leader could not read (damage): it keeps the log's
# offsets consecutive, and every reader takes it for damage (peek_size refuses it), so it is
# skipped and counted as the leader's damaged record was. Releases before it read it as damage.
RECORD_HEADER: Final = struct.Struct(
    ">I"  # format_length: format (top 2 bits: 2, or 1 in older files) << 30 | bytes after it
    "I"  # crc: CRC-32C of bytes [CRC_START, 4 + length), from format_length (v2) or 0 (v1)
    "Q"  # offset: position of the record in its partition log (0, 1, 2, ...)
    "q"  # timestamp_ns: publish time, ns since the Unix epoch
    "Q"  # internal_id: (partition << 50) | (offset + 1), the first half of the message id
    "Q"  # trace_id: the second half of the message id (youzan tracing), 0 when unused
    "q"  # deliver_at_ns: earliest delivery time (DPUB), 0 = at once
    "I"  # epoch: leader epoch under which the record was appended (0: standalone)
    "H"  # ext_len: length of the opaque extension header that follows
)
RECORD_HEADER_V0: Final = struct.Struct(
    ">I"  # format_length: bytes after this field (format 0: top bits clear)
    "I"  # crc: as v1
    "Q"  # offset
    "q"  # timestamp_ns
    "Q"  # internal_id
    "Q"  # trace_id
    "q"  # deliver_at_ns
    "H"  # ext_len
)
FORMAT_V0: Final = 0
FORMAT_V1: Final = 1  # the release before this one: the CRC does not cover format_length
FORMAT_V2: Final = 2  # what this release writes
FORMAT_LOST: Final = 3  # a lost-record marker (see above): read as damage
FORMAT_SHIFT: Final = 30  # format_length >> 30 is the format
LENGTH_MASK: Final = (1 << FORMAT_SHIFT) - 1
LENGTH_SIZE: Final = struct.calcsize(RECORD_HEADER.format[:2])
CRC_START: Final = struct.calcsize(RECORD_HEADER.format[:3])
HEADER_SIZE: Final = RECORD_HEADER.size  # of the format written
MIN_HEADER_SIZE: Final = RECORD_HEADER_V0.size  # the smallest header any readable record has
# Smallest legal value of the length field, per format: a record with empty ext and body.
_MIN_LENGTH: Final = {
    FORMAT_V0: RECORD_HEADER_V0.size - LENGTH_SIZE,
    FORMAT_V1: HEADER_SIZE - LENGTH_SIZE,
    FORMAT_V2: HEADER_SIZE - LENGTH_SIZE,
}
# Largest record this layer will read back; anything longer is treated as corruption rather
# than allocated. nsqd's --max-msg-size defaults to 1 MiB, so this leaves a wide margin.
MAX_RECORD_SIZE: Final = 1 << 30
MAX_EXT_LEN: Final = 0xFFFF
READ_CHUNK: Final = 64 * 1024  # default read size of a scan
# Encoding packs the two halves of RECORD_HEADER separately so the CRC can be computed over the
# covered half before the first half is packed. Both are derived from RECORD_HEADER's format.
_PREFIX: Final = struct.Struct(RECORD_HEADER.format[:3])
_COVERED: Final = struct.Struct(">" + RECORD_HEADER.format[3:])
assert _PREFIX.size == CRC_START
assert _PREFIX.size + _COVERED.size == HEADER_SIZE

#: body size up to which encoding checksums one copy of header and body (one CRC call is
#: cheaper than two); a larger body is checksummed where it is, so that it is copied once, into
#: the encoded run, not twice (two 1 MB copies were a fifth of a 1 MB PUB's cost)
CONCATENATED_MAX: Final = 16 * 1024

_crc: Final = _crc32c.crc32c
_pack_prefix: Final = _PREFIX.pack
_pack_covered: Final = _COVERED.pack
_unpack_header_from: Final = RECORD_HEADER.unpack_from
_unpack_header_v0_from: Final = RECORD_HEADER_V0.unpack_from
_unpack_length_from: Final = struct.Struct(RECORD_HEADER.format[:2]).unpack_from
_FORMAT_BITS: Final = FORMAT_V2 << FORMAT_SHIFT
_FORMAT_SHIFT_IN_BYTE: Final = FORMAT_SHIFT - 24  # the format in the big-endian first byte
_C = TypeVar("_C")


@dataclass_transform(frozen_default=True)
def _value_class(cls: type[_C]) -> type[_C]:
    """A slotted dataclass that is equal and hashable by value and frozen to the type checker
    (mypy --strict refuses an assignment to a field), without a frozen dataclass's run-time
    guard: that one's ``__init__`` sets every field through ``object.__setattr__``, and the
    publish, append and read paths make a record per message (a :class:`Record` in 0.36 µs
    with a plain ``__init__``, 0.6 µs frozen; the same-layout twin class that made them before
    took 0.46 µs)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


@_value_class
class NewRecord:
    """A message the broker hands to :meth:`PartitionLog.append`."""

    timestamp_ns: int
    """Publish time, ns since the Unix epoch."""
    body: bytes
    trace_id: int = 0
    """u64 trace id (second half of the 16-byte message id)."""
    deliver_at_ns: int = 0
    """0 = deliverable at once; DPUB sets a future time."""
    ext: bytes = b""
    """Opaque extension header (youzan ext), usually empty; at most 65535 bytes."""
    epoch: int = 0
    """Leader epoch of the appending leader (0 standalone)."""


@_value_class
class Record:
    """A stored message, as returned by ``PartitionLog.append`` and ``PartitionLog.read``."""

    offset: int
    timestamp_ns: int
    internal_id: int
    """``(partition << 50) | (offset + 1)``, computed by ``append`` and stored in the record."""
    trace_id: int
    deliver_at_ns: int
    body: bytes
    ext: bytes
    epoch: int = 0
    """Leader epoch under which the record was appended (0: standalone, or format v0)."""


NEW_RECORD: Final[Callable[[type[Record]], Any]] = object.__new__
"""``NEW_RECORD(Record)``: a record with no field set yet, for the read paths' loops that set
all eight themselves (a third cheaper than ``Record(...)``, whose ``__init__`` is a frame)."""


def internal_id_for(partition: int, offset: int) -> int:
    """The first half of the message id of the record at ``offset`` (never 0): the layout
    is :mod:`protocol.message`'s, with the sequence ``offset + 1``."""
    return make_internal_id(partition, offset + 1)


def record_size(record: Record) -> int:
    """Bytes the encoded ``record`` occupies on disk."""
    return HEADER_SIZE + len(record.ext) + len(record.body)


def _add_uncopied(add: Callable[[bytes], object], field: int, covered: bytes, body: bytes) -> None:
    """Add a record whose body is too large to be copied for its checksum (above
    :data:`CONCATENATED_MAX`): its prefix (the CRC taken over the covered half, ext included,
    and then the body), the covered half, the body."""
    add(_pack_prefix(field, _crc(body, _crc(covered, field))))
    add(covered)
    add(body)


def encode_run(records: Sequence[Record]) -> tuple[bytes, list[tuple[int, int]]]:
    """The on-disk bytes of ``records`` (see :data:`RECORD_HEADER`), one after the other, and
    ``(timestamp_ns, size)`` of each, in one loop. Raises ``ValueError`` when a field does not
    fit its layout slot (an ext longer than :data:`MAX_EXT_LEN`, a number out of range)."""
    parts: list[bytes] = []
    add = parts.append
    stamps: list[tuple[int, int]] = []
    stamp = stamps.append
    pack_covered, pack_prefix, crc = _pack_covered, _pack_prefix, _crc
    format_bits, header, copied = _FORMAT_BITS, HEADER_SIZE, CONCATENATED_MAX
    try:
        for r in records:
            ext, body = r.ext, r.body
            covered = pack_covered(
                r.offset,
                r.timestamp_ns,
                r.internal_id,
                r.trace_id,
                r.deliver_at_ns,
                r.epoch,
                len(ext),
            )
            size = header + len(ext) + len(body)
            field = format_bits | (size - LENGTH_SIZE)
            if len(body) <= copied:
                rest = covered + ext + body if ext else covered + body  # one CRC call: cheaper
                add(pack_prefix(field, crc(rest, field)))
                add(rest)
            else:
                _add_uncopied(add, field, covered + ext if ext else covered, body)
            stamp((r.timestamp_ns, size))
    except struct.error as exc:  # includes an ext longer than MAX_EXT_LEN
        raise ValueError(f"record field out of range: {exc}") from exc
    return b"".join(parts), stamps


def encode_lost(first_offset: int, count: int, epoch: int) -> tuple[bytes, list[tuple[int, int]]]:
    """Lost-record markers (format 3) for offsets ``[first_offset, first_offset + count)``
    under ``epoch``, and ``(timestamp_ns, size)`` of each (as :func:`encode_run`)."""
    parts: list[bytes] = []
    field = (FORMAT_LOST << FORMAT_SHIFT) | (HEADER_SIZE - LENGTH_SIZE)
    for offset in range(first_offset, first_offset + count):
        covered = _pack_covered(offset, 0, 0, 0, 0, epoch, 0)
        parts.append(_pack_prefix(field, _crc(covered, field)) + covered)
    return b"".join(parts), [(0, HEADER_SIZE)] * count


def encode_record(record: Record) -> bytes:
    """The on-disk bytes of ``record`` (see :data:`RECORD_HEADER`)."""
    return encode_run((record,))[0]


def peek_size(buf: bytes, pos: int) -> int:
    """Total size of the record starting at ``buf[pos]``, from its length field alone.

    The caller guarantees ``LENGTH_SIZE`` bytes at ``pos``. Raises :class:`CorruptRecordError`
    when the length is too small to hold a header or larger than :data:`MAX_RECORD_SIZE`.
    """
    (field,) = _unpack_length_from(buf, pos)
    minimum = _MIN_LENGTH.get(field >> FORMAT_SHIFT)
    length = field & LENGTH_MASK
    if minimum is None:  # format 3
        raise CorruptRecordError(
            "record format 3: a record lost to damage at the leader, or damage"
        )
    if length < minimum or length > MAX_RECORD_SIZE - LENGTH_SIZE:
        raise CorruptRecordError(f"implausible record length {length}")
    return int(length) + LENGTH_SIZE


def decode_record(buf: bytes, pos: int) -> Record:
    """Decode and verify the whole record at ``buf[pos]``.

    The caller guarantees the full record (``peek_size`` bytes) is in ``buf``. Raises
    :class:`CorruptRecordError` on a CRC mismatch or an ext length that overruns the record.
    """
    version = buf[pos] >> _FORMAT_SHIFT_IN_BYTE  # the top bits of the first byte
    if version != FORMAT_V0:  # v1 or v2 (peek_size has refused anything else)
        field, crc, offset, ts, internal_id, trace_id, deliver_at, epoch, ext_len = (
            _unpack_header_from(buf, pos)
        )
        header = HEADER_SIZE
    else:
        field, crc, offset, ts, internal_id, trace_id, deliver_at, ext_len = _unpack_header_v0_from(
            buf, pos
        )
        epoch, header = 0, MIN_HEADER_SIZE
    length = field & LENGTH_MASK
    end = pos + LENGTH_SIZE + length
    with memoryview(buf) as view:
        actual = _crc(view[pos + CRC_START : end], field if version == FORMAT_V2 else 0)
    if actual != crc:
        raise CorruptRecordError(f"CRC mismatch (stored {crc:#010x}, computed {actual:#010x})")
    ext_end = pos + header + ext_len
    if ext_end > end:
        raise CorruptRecordError(f"ext length {ext_len} overruns record length {length}")
    ext = buf[pos + header : ext_end] if ext_len else b""
    return Record(offset, ts, internal_id, trace_id, deliver_at, buf[ext_end:end], ext, epoch)


def scan_records(
    read_at: Callable[[int, int], bytes],
    name: str,
    *,
    position: int,
    limit: int,
    offset: int,
    chunk: int = READ_CHUNK,
) -> Iterator[tuple[int, int, Record]]:
    """Yield ``(position, size, record)`` for each record in bytes ``[position, limit)``.

    ``read_at(size, position)`` returns up to ``size`` bytes (fewer only at end of data).
    Validates each record (complete header, plausible length, CRC, ``offset`` then consecutive
    offsets) and raises :class:`CorruptRecordError` carrying the byte position and the expected
    offset at the first one that fails, including one cut off by ``limit`` or end of data.
    """
    buf = b""
    buf_start = position  # position of buf[0]
    while position < limit:
        i = position - buf_start
        try:
            if len(buf) - i < MIN_HEADER_SIZE:
                need = MIN_HEADER_SIZE
                buf, buf_start, i = refill(read_at, buf, buf_start, i, need, limit, chunk)
            size = peek_size(buf, i)
            if len(buf) - i < size:
                buf, buf_start, i = refill(read_at, buf, buf_start, i, size, limit, chunk)
            record = decode_record(buf, i)
            if record.offset != offset:
                raise CorruptRecordError(f"offset {record.offset} out of sequence")
        except CorruptRecordError as exc:
            raise corrupt_in_segment(name, exc, position=position, offset=offset) from exc
        yield position, size, record
        position += size
        offset += 1


def refill(
    read_at: Callable[[int, int], bytes],
    buf: bytes,
    buf_start: int,
    i: int,
    need: int,
    limit: int,
    chunk: int,
) -> tuple[bytes, int, int]:
    """Drop ``buf[:i]`` and read until ``need`` bytes are buffered. Raises
    :class:`CorruptRecordError` if ``limit`` or end of data comes first (a torn record)."""
    parts = [buf[i:]]
    buf_start += i
    have = len(parts[0])
    end = buf_start + have
    while have < need:
        want = min(max(chunk, need - have), limit - end)
        data = read_at(want, end) if want > 0 else b""
        if not data:
            raise CorruptRecordError(f"incomplete record ({have} of {need} bytes)")
        parts.append(data)
        have += len(data)
        end += len(data)
    return b"".join(parts), buf_start, 0
