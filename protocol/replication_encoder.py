"""Encoding ``"  R1"`` replication frames (:mod:`protocol.replication`), sans-IO: each frame
whole (:func:`encode`), or an Append frame's header alone (:func:`encode_append_header`), so a
leader writes the records it read from its log after it without copying them into a frame."""

from __future__ import annotations

import struct

from .replication import (
    ACK,
    ADMIN,
    ADMIN_ACK,
    ADMIN_CHANNEL,
    ADMIN_ORDERED,
    ADMIN_PAUSED,
    ADMIN_SKIP_ZAN_TEST,
    ADMIN_SKIPPED,
    APPEND,
    CURSORS,
    CURSORS_ACK,
    DEFERRED,
    FEATURE_TOPIC_ID,
    FEATURES,
    FRAME_HEADER,
    HELLO,
    HELLO_EX,
    HIGH_WATERMARK,
    MAX_FRAME_SIZE,
    MAX_STRING_SIZE,
    REFUSE,
    REPAIR_RECORDS,
    REPAIR_REQUEST,
    STRING_LENGTH,
    WELCOME,
    Ack,
    Admin,
    AdminAck,
    Append,
    ChannelAdmin,
    Cursors,
    CursorsAck,
    Error,
    Frame,
    FrameType,
    Hello,
    HighWatermark,
    Refuse,
    RepairRecords,
    RepairRequest,
    Welcome,
)

__all__ = ["channel_flags", "encode", "encode_append_header"]


def encode(frame: Frame) -> bytes:
    """One complete frame.

    Raises:
        ValueError: a field does not fit its wire type (integer out of range, string over
            :data:`MAX_STRING_SIZE` bytes or not encodable, frame over :data:`MAX_FRAME_SIZE`,
            Append ``count`` and ``records`` disagreeing on emptiness).
    """
    try:
        match frame:
            case Hello():
                names = _str(frame.node), _str(frame.topic)
                fields = (frame.partition, frame.epoch, frame.log_end, frame.last_epoch)
                if frame.topic_id and not frame.features & FEATURE_TOPIC_ID:
                    raise ValueError("a topic id is sent only with FEATURE_TOPIC_ID")
                if not frame.features:
                    return _frame(FrameType.HELLO, HELLO.pack(*fields), *names)
                if frame.features & ~FEATURES:
                    raise ValueError(f"unknown feature bits {frame.features:#x}")
                fixed = HELLO_EX.pack(*fields, frame.features)
                life = (_str(frame.topic_id),) if frame.features & FEATURE_TOPIC_ID else ()
                return _frame(FrameType.HELLO_EX, fixed, *names, *life)
            case Ack():
                return _frame(FrameType.ACK, ACK.pack(frame.epoch, frame.log_end))
            case Refuse():
                return _frame(FrameType.REFUSE, REFUSE.pack(frame.epoch), _str(frame.reason))
            case CursorsAck():
                fixed = CURSORS_ACK.pack(frame.epoch, frame.confirmed)
                return _frame(FrameType.CURSORS_ACK, fixed, _str(frame.channel))
            case Welcome():
                fixed = WELCOME.pack(frame.epoch, frame.truncate_to, frame.high_watermark)
                return _frame(FrameType.WELCOME, fixed)
            case Append():
                fields = (frame.epoch, frame.base_offset, frame.high_watermark, frame.count)
                return encode_append_header(*fields, len(frame.records)) + frame.records
            case HighWatermark():
                fixed = HIGH_WATERMARK.pack(frame.epoch, frame.high_watermark)
                return _frame(FrameType.HIGH_WATERMARK, fixed)
            case Cursors():
                fixed = CURSORS.pack(
                    frame.epoch, frame.confirmed, int(frame.deleted), len(frame.deferred)
                )
                pairs = b"".join(DEFERRED.pack(o, t) for o, t in frame.deferred)
                return _frame(FrameType.CURSORS, fixed, _str(frame.channel), pairs)
            case Error():
                return _frame(FrameType.ERROR, _str(frame.code), _str(frame.text))
            case Admin():
                flags = ADMIN_PAUSED if frame.paused else 0
                fixed = ADMIN.pack(frame.epoch, frame.version, flags, len(frame.channels))
                entries = b"".join(
                    ADMIN_CHANNEL.pack(channel_flags(c)) + _str(c.name) for c in frame.channels
                )
                return _frame(FrameType.ADMIN, fixed, entries)
            case AdminAck():
                return _frame(FrameType.ADMIN_ACK, ADMIN_ACK.pack(frame.epoch, frame.version))
            case RepairRequest():
                fixed = REPAIR_REQUEST.pack(frame.epoch, frame.first, frame.count)
                return _frame(FrameType.REPAIR_REQUEST, fixed)
            case RepairRecords():
                if (frame.count == 0) != (not frame.records):
                    raise ValueError(f"RepairRecords: count {frame.count} with records")
                fixed = REPAIR_RECORDS.pack(frame.epoch, frame.base_offset, frame.count)
                return _frame(FrameType.REPAIR_RECORDS, fixed, frame.records)
    except struct.error as exc:
        raise ValueError(f"{type(frame).__name__} frame: {exc}") from exc
    raise TypeError(f"not a replication frame: {frame!r}")


def channel_flags(channel: ChannelAdmin) -> int:
    """The ADMIN_* bits of a channel entry."""
    return (
        (ADMIN_PAUSED if channel.paused else 0)
        | (ADMIN_ORDERED if channel.ordered else 0)
        | (ADMIN_SKIPPED if channel.skipped else 0)
        | (ADMIN_SKIP_ZAN_TEST if channel.skip_zan_test else 0)
    )


def encode_append_header(
    epoch: int, base_offset: int, high_watermark: int, count: int, records_size: int
) -> bytes:
    """The start of an Append frame; the sender writes ``records_size`` record bytes after it.

    This is how a leader streams a batch read from its log without copying it into a frame.

    Raises:
        ValueError: as :func:`encode` (``records_size`` over :data:`MAX_APPEND_RECORDS_SIZE`).
    """
    if (count == 0) != (records_size == 0):
        raise ValueError(f"Append frame: count {count} with {records_size} record bytes")
    size = 1 + APPEND.size + records_size
    if records_size < 0 or size > MAX_FRAME_SIZE:
        raise ValueError(f"Append frame: size {size} outside 1..{MAX_FRAME_SIZE}")
    try:
        fixed = APPEND.pack(epoch, base_offset, high_watermark, count)
    except struct.error as exc:
        raise ValueError(f"Append frame: {exc}") from exc
    return FRAME_HEADER.pack(size, FrameType.APPEND) + fixed


def _frame(frame_type: FrameType, *parts: bytes) -> bytes:
    size = 1 + sum(map(len, parts))
    if size > MAX_FRAME_SIZE:
        raise ValueError(f"{frame_type.name} frame: size {size} over {MAX_FRAME_SIZE}")
    return b"".join((FRAME_HEADER.pack(size, frame_type), *parts))


def _str(text: str) -> bytes:
    data = text.encode("utf-8")  # UnicodeEncodeError (a ValueError) for lone surrogates
    if len(data) > MAX_STRING_SIZE:
        raise ValueError(f"string of {len(data)} bytes over {MAX_STRING_SIZE}")
    return STRING_LENGTH.pack(len(data)) + data
