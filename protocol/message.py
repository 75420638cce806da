"""Message ids and message frames.

A message id is 16 bytes, ``[u64 BE internal id][u64 BE trace id]`` (youzan NSQ). The internal id
is ``(partition << 50) + sequence``, so the partition can be read back from the id. Stock clients
treat the id as 16 opaque bytes and echo it in FIN/REQ/TOUCH; it may contain ``' '`` or ``'\\n'``,
which is why the parser reads those commands at fixed offsets.
"""

from __future__ import annotations

import struct
from typing import Final, Protocol

from .frames import FrameType

PARTITION_SHIFT: Final = 50
SEQUENCE_MASK: Final = (1 << PARTITION_SHIFT) - 1
MAX_PARTITIONS: Final = 1024
MESSAGE_ID_SIZE: Final = 16

MESSAGE_ID: Final = struct.Struct(
    ">Q"  # internal id: (partition << 50) + per-partition sequence
    "Q"  # trace id: set by PUB_TRACE / MPUB_TRACE producers, else 0
)

MESSAGE_FRAME_HEADER: Final = struct.Struct(
    ">I"  # frame size: everything after this field (type + 26 + body [+ detail])
    "i"  # frame type: always FrameType.MESSAGE (2)
    "q"  # timestamp: ns since the epoch, set at publish, kept across requeues
    "H"  # attempts: 1 on first delivery, +1 on each redelivery
)

#: The youzan detail block for SUB_ORDERED / SUB_ADVANCED subscribers, between id and body.
MESSAGE_DETAIL: Final = struct.Struct(
    ">Q"  # log offset of the message in its partition
    "I"  # raw size of the stored message
)

#: The youzan ext block for ``extend_support`` clients on ext topics, between id and detail:
#: ``[u8 version]`` alone for version 0 (no ext), else ``[u8 version][u16 length][bytes]``.
EXT_HEADER: Final = struct.Struct(
    ">B"  # ext version: 0 none, 4 JSON header
    "H"  # ext length
)
EXT_VERSION_NONE: Final = 0
EXT_VERSION_JSON_HEADER: Final = 4
NO_EXT_BLOCK: Final = bytes([EXT_VERSION_NONE])

_MESSAGE_FIXED: Final = MESSAGE_FRAME_HEADER.size - 4 + MESSAGE_ID_SIZE  # type..id = 30 bytes

#: The frame header and the id in one pack (the two layouts above, back to back): what a
#: stock message frame has before its body. Its size field is ``MESSAGE_FRAME_FIXED + body``.
MESSAGE_FRAME_PREFIX: Final = struct.Struct(MESSAGE_FRAME_HEADER.format + MESSAGE_ID.format[1:])
MESSAGE_FRAME_FIXED: Final = _MESSAGE_FIXED


def make_internal_id(partition: int, sequence: int) -> int:
    """``(partition << 50) + sequence``."""
    return (partition << PARTITION_SHIFT) + sequence


def partition_of(internal_id: int) -> int:
    """The partition encoded in an internal id."""
    return (internal_id >> PARTITION_SHIFT) & (MAX_PARTITIONS - 1)


def encode_message_id(internal_id: int, trace_id: int = 0) -> bytes:
    """The 16 id bytes."""
    return MESSAGE_ID.pack(internal_id, trace_id)


def decode_message_id(raw: bytes) -> tuple[int, int]:
    """``(internal id, trace id)`` of 16 id bytes."""
    internal_id, trace_id = MESSAGE_ID.unpack(raw)
    return internal_id, trace_id


def encode_message_frame(timestamp_ns: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """A complete message frame ``[size][2][timestamp][attempts][id][body]``."""
    header = MESSAGE_FRAME_HEADER.pack(
        _MESSAGE_FIXED + len(body), FrameType.MESSAGE, timestamp_ns, attempts
    )
    return header + message_id + body


def message_frame_header(timestamp_ns: int, attempts: int, body_len: int) -> bytes:
    """Just the 14 header bytes, for callers that append id and body to a buffer themselves."""
    return MESSAGE_FRAME_HEADER.pack(
        _MESSAGE_FIXED + body_len, FrameType.MESSAGE, timestamp_ns, attempts
    )


def encode_ext_block(ext: bytes) -> bytes:
    """The ext block of a message whose stored JSON header is ``ext`` (empty: none)."""
    if not ext:
        return NO_EXT_BLOCK
    return EXT_HEADER.pack(EXT_VERSION_JSON_HEADER, len(ext)) + ext


class RecordLike(Protocol):
    """A stored message's fields, as ``nsqd.storage.Record`` has them: what the channel cursor
    and the range-read encoders need of a record."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ns(self) -> int: ...
    @property
    def internal_id(self) -> int: ...
    @property
    def trace_id(self) -> int: ...
    @property
    def deliver_at_ns(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def ext(self) -> bytes: ...
