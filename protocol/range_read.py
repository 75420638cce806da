"""The range read of ``GET /partition/read``: a partition's records from an offset, as bytes.

Two encodings of the same records; both are deterministic (the same records give the same
bytes), so a repeated request for a range below the partition's ``latest`` gets identical bytes,
which is what a Spark task that is re-run relies on.

Binary (``format=binary``, ``application/octet-stream``), big-endian::

    Batch  => Header Record*
    Header => Magic "PNRR" | Version u16 | Partition u16 | Count u32 | FirstOffset u64
              | NextOffset u64
    Record => Offset u64 | TimestampNs i64 | InternalId u64 | TraceId u64 | DeliverAtNs i64
              | ExtLen u16 | BodyLen u32 | Ext [ExtLen] | Body [BodyLen]

NDJSON (``format=ndjson``, ``application/x-ndjson``): one JSON object per record and line, keys in
this order: ``offset, timestamp_ns, internal_id, trace_id, deliver_at_ns, ext, body`` with
``ext`` and ``body`` in standard base64. An empty range is an empty body.

The 16-byte message id of a record is ``[u64 internal id][u64 trace id]``
(:data:`protocol.message.MESSAGE_ID`).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .message import MESSAGE_ID, RecordLike

MAGIC: Final = b"PNRR"
VERSION: Final = 1
BINARY_CONTENT_TYPE: Final = "application/octet-stream"
NDJSON_CONTENT_TYPE: Final = "application/x-ndjson"

RANGE_HEADER: Final = struct.Struct(
    ">4s"  # magic: b"PNRR"
    "H"  # version: 1
    "H"  # partition the records belong to
    "I"  # count: number of records that follow
    "Q"  # first offset: the offset requested (== the first record's offset when count > 0)
    "Q"  # next offset: the offset to request next (first offset + count)
)

RANGE_RECORD: Final = struct.Struct(
    ">Q"  # offset: position in the partition log (contiguous: 0, 1, 2, ...)
    "q"  # timestamp_ns: publish time, ns since the Unix epoch
    "Q"  # internal id: (partition << 50) + offset + 1, first half of the message id
    "Q"  # trace id: second half of the message id (PUB_TRACE), else 0
    "q"  # deliver_at_ns: earliest delivery time (DPUB), 0 = at once
    "H"  # ext length: bytes of the extension header that follow this struct
    "I"  # body length: bytes of the body that follow the ext header
)

_NDJSON_KEYS: Final = (
    "offset",
    "timestamp_ns",
    "internal_id",
    "trace_id",
    "deliver_at_ns",
    "ext",
    "body",
)


class RangeFormatError(ValueError):
    """The bytes are not a valid range-read body."""


@dataclass(frozen=True, slots=True)
class RangeRecord:
    """One record of a range read."""

    offset: int
    timestamp_ns: int
    internal_id: int
    trace_id: int
    deliver_at_ns: int
    body: bytes
    ext: bytes = b""

    @property
    def message_id(self) -> bytes:
        """The 16-byte message id consumers see: ``[internal id][trace id]``."""
        return MESSAGE_ID.pack(self.internal_id, self.trace_id)


@dataclass(frozen=True, slots=True)
class RangeBatch:
    """A decoded range read: ``records`` start at ``first_offset``; continue at ``next_offset``."""

    partition: int
    first_offset: int
    next_offset: int
    records: tuple[RangeRecord, ...]


def record_size(record: RecordLike) -> int:
    """Bytes ``record`` takes in the binary encoding (what the server's byte cap counts)."""
    return RANGE_RECORD.size + len(record.ext) + len(record.body)


def encode_binary(partition: int, first_offset: int, records: Iterable[RecordLike]) -> bytes:
    """The binary body of ``records`` (consecutive, starting at ``first_offset``)."""
    parts: list[bytes] = [b""]
    pack = RANGE_RECORD.pack
    count = 0
    for r in records:
        parts.append(
            pack(
                r.offset,
                r.timestamp_ns,
                r.internal_id,
                r.trace_id,
                r.deliver_at_ns,
                len(r.ext),
                len(r.body),
            )
        )
        parts.append(r.ext)
        parts.append(r.body)
        count += 1
    parts[0] = RANGE_HEADER.pack(
        MAGIC, VERSION, partition, count, first_offset, first_offset + count
    )
    return b"".join(parts)


def decode_binary(data: bytes | bytearray | memoryview) -> RangeBatch:
    """Decode a binary body.

    Raises:
        RangeFormatError: bad magic or version, truncated or trailing bytes, offsets not
            strictly increasing within ``[first_offset, next_offset)``.
    """
    view = memoryview(data)
    if len(view) < RANGE_HEADER.size:
        raise RangeFormatError(f"range header truncated ({len(view)} bytes)")
    magic, version, partition, count, first, next_offset = RANGE_HEADER.unpack_from(view)
    if magic != MAGIC:
        raise RangeFormatError(f"bad magic {bytes(magic)!r}")
    if version != VERSION:
        raise RangeFormatError(f"unsupported version {version}")
    if next_offset < first:
        raise RangeFormatError(f"next offset {next_offset} before first offset {first}")
    records: list[RangeRecord] = []
    at = RANGE_HEADER.size
    expected = first
    for i in range(count):
        if at + RANGE_RECORD.size > len(view):
            raise RangeFormatError(f"record {i} header truncated")
        offset, ts, internal_id, trace_id, deliver_at, ext_len, body_len = RANGE_RECORD.unpack_from(
            view, at
        )
        at += RANGE_RECORD.size
        if at + ext_len + body_len > len(view):
            raise RangeFormatError(f"record {i} data truncated")
        if not expected <= offset < next_offset:
            raise RangeFormatError(f"record {i} has offset {offset}, expected >= {expected}")
        ext = bytes(view[at : at + ext_len])
        body = bytes(view[at + ext_len : at + ext_len + body_len])
        at += ext_len + body_len
        records.append(RangeRecord(offset, ts, internal_id, trace_id, deliver_at, body, ext))
        expected = offset + 1
    if at != len(view):
        raise RangeFormatError(f"{len(view) - at} trailing bytes")
    return RangeBatch(partition, first, next_offset, tuple(records))


def encode_ndjson(records: Iterable[RecordLike]) -> bytes:
    """The NDJSON body of ``records``: one compact JSON object per line, each ending in ``\\n``."""
    lines = []
    b64 = base64.b64encode
    for r in records:
        obj = {
            "offset": r.offset,
            "timestamp_ns": r.timestamp_ns,
            "internal_id": r.internal_id,
            "trace_id": r.trace_id,
            "deliver_at_ns": r.deliver_at_ns,
            "ext": b64(r.ext).decode("ascii"),
            "body": b64(r.body).decode("ascii"),
        }
        lines.append(json.dumps(obj, separators=(",", ":")) + "\n")
    return "".join(lines).encode("ascii")


def decode_ndjson(data: bytes, partition: int, first_offset: int) -> RangeBatch:
    """Decode an NDJSON body read from ``partition`` at ``first_offset``.

    Raises:
        RangeFormatError: a line is not such an object, or offsets do not increase.
    """
    records: list[RangeRecord] = []
    expected = first_offset
    for n, line in enumerate(data.splitlines()):
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict) or tuple(obj) != _NDJSON_KEYS:
                raise RangeFormatError(f"line {n}: not a range record")
            ints = [obj[k] for k in _NDJSON_KEYS[:5]]
            if not all(type(v) is int for v in ints):
                raise RangeFormatError(f"line {n}: integer fields expected")
            ext = base64.b64decode(obj["ext"], validate=True)
            body = base64.b64decode(obj["body"], validate=True)
        except (ValueError, TypeError, binascii.Error) as exc:
            if isinstance(exc, RangeFormatError):
                raise
            raise RangeFormatError(f"line {n}: {exc}") from exc
        offset, ts, internal_id, trace_id, deliver_at = ints
        if offset < expected:
            raise RangeFormatError(f"line {n}: offset {offset}, expected >= {expected}")
        records.append(RangeRecord(offset, ts, internal_id, trace_id, deliver_at, body, ext))
        expected = offset + 1
    next_offset = records[-1].offset + 1 if records else first_offset
    return RangeBatch(partition, first_offset, next_offset, tuple(records))
