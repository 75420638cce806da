"""Decoding ``"  R1"`` replication frames (:mod:`protocol.replication`), sans-IO: incremental
and direction-bound.

:class:`FollowerFrameDecoder` (run by the leader) accepts only follower frames,
:class:`LeaderFrameDecoder` (run by the follower) only leader frames. Feed them with
:meth:`~FrameDecoder.feed`, then call :meth:`~FrameDecoder.next_frame` until :data:`NEED_DATA`.
A violation raises :class:`~protocol.replication.ReplicationProtocolError`, again on every later
call. A body must be consumed exactly; :class:`~protocol.replication.Append` records are copied
once, out of the receive buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

from ._framing import FrameBuffer
from .parser import NEED_DATA, NeedData
from .replication import (
    ACK,
    ADMIN,
    ADMIN_ACK,
    ADMIN_CHANNEL,
    ADMIN_CHANNEL_FLAGS,
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
    FollowerFrame,
    Frame,
    FrameType,
    Hello,
    HighWatermark,
    LeaderFrame,
    Refuse,
    RepairRecords,
    RepairRequest,
    ReplicationProtocolError,
    Welcome,
)

_SIZE_FIELD: Final = 4  # FRAME_HEADER's size field; ``size`` counts what follows it


class _Body:
    """Reads one frame's body, ``buf[pos:end]``, checking every field against its end."""

    __slots__ = ("buf", "end", "name", "pos")

    def __init__(self, buf: bytearray, pos: int, end: int, name: str) -> None:
        self.buf, self.pos, self.end, self.name = buf, pos, end, name

    def error(self, text: str) -> ReplicationProtocolError:
        return ReplicationProtocolError(f"{self.name} frame: {text}")

    def fixed(self, layout: struct.Struct) -> tuple[Any, ...]:
        if self.end - self.pos < layout.size:
            raise self.error(
                f"body truncated: {layout.size} bytes of fixed fields, {self.end - self.pos} left"
            )
        values = layout.unpack_from(self.buf, self.pos)
        self.pos += layout.size
        return values

    def string(self, field: str) -> str:
        if self.end - self.pos < STRING_LENGTH.size:
            raise self.error(f"body truncated before the {field} length")
        (length,) = self.fixed(STRING_LENGTH)
        start, self.pos = self.pos, self.pos + length
        if self.pos > self.end:
            raise self.error(
                f"{field} length {length} runs past the body ({self.end - start} left)"
            )
        try:
            with memoryview(self.buf)[start : self.pos] as view:
                return str(view, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{field} is not valid UTF-8 ({exc.reason})") from None

    def rest(self) -> bytes:
        """The remaining bytes, copied once out of the buffer."""
        with memoryview(self.buf)[self.pos : self.end] as view:
            data = bytes(view)
        self.pos = self.end
        return data

    def done(self) -> None:
        if self.pos != self.end:
            raise self.error(f"{self.end - self.pos} bytes after the body")


def _hello(body: _Body) -> Hello:
    partition, epoch, log_end, last_epoch = body.fixed(HELLO)
    node = body.string("node")
    topic = body.string("topic")
    return Hello(node, topic, partition, epoch, log_end, last_epoch)


def _hello_ex(body: _Body) -> Hello:
    partition, epoch, log_end, last_epoch, features = body.fixed(HELLO_EX)
    if not features or features & ~FEATURES:
        raise body.error(f"features {features:#x}: unknown bits, or none")
    node = body.string("node")
    topic = body.string("topic")
    topic_id = body.string("topic_id") if features & FEATURE_TOPIC_ID else ""
    return Hello(node, topic, partition, epoch, log_end, last_epoch, features, topic_id)


def _admin(body: _Body) -> Admin:
    epoch, version, topic_flags, count = body.fixed(ADMIN)
    if topic_flags & ~ADMIN_PAUSED:
        raise body.error(f"topic flags {topic_flags:#x} has unknown bits")
    channels = []
    for _ in range(count):
        (flags,) = body.fixed(ADMIN_CHANNEL)
        if flags & ~ADMIN_CHANNEL_FLAGS:
            raise body.error(f"channel flags {flags:#x} has unknown bits")
        channels.append(
            ChannelAdmin(
                body.string("channel"),
                paused=bool(flags & ADMIN_PAUSED),
                ordered=bool(flags & ADMIN_ORDERED),
                skipped=bool(flags & ADMIN_SKIPPED),
                skip_zan_test=bool(flags & ADMIN_SKIP_ZAN_TEST),
            )
        )
    return Admin(epoch, version, bool(topic_flags & ADMIN_PAUSED), tuple(channels))


def _refuse(body: _Body) -> Refuse:
    (epoch,) = body.fixed(REFUSE)
    return Refuse(epoch, body.string("reason"))


def _cursors_ack(body: _Body) -> CursorsAck:
    epoch, confirmed = body.fixed(CURSORS_ACK)
    return CursorsAck(epoch, body.string("channel"), confirmed)


def _append(body: _Body) -> Append:
    epoch, base_offset, high_watermark, count = body.fixed(APPEND)
    records = body.rest()
    if (count == 0) != (not records):
        raise body.error(f"count {count} with {len(records)} record bytes")
    return Append(epoch, base_offset, high_watermark, count, records)


def _repair_records(body: _Body) -> RepairRecords:
    epoch, base_offset, count = body.fixed(REPAIR_RECORDS)
    records = body.rest()
    if (count == 0) != (not records):
        raise body.error(f"count {count} with {len(records)} record bytes")
    return RepairRecords(epoch, base_offset, count, records)


def _cursors(body: _Body) -> Cursors:
    epoch, confirmed, deleted, count = body.fixed(CURSORS)
    if deleted > 1:
        raise body.error(f"deleted flag {deleted} is neither 0 nor 1")
    channel = body.string("channel")
    if body.end - body.pos != count * DEFERRED.size:
        raise body.error(
            f"{count} deferred pairs need {count * DEFERRED.size} bytes, {body.end - body.pos} left"
        )
    with memoryview(body.buf)[body.pos : body.end] as view:
        deferred = tuple(DEFERRED.iter_unpack(view))
    body.pos = body.end
    return Cursors(epoch, channel, confirmed, deferred, deleted == 1)


def _error(body: _Body) -> Error:
    code = body.string("code")
    return Error(code, body.string("text"))


F = TypeVar("F", bound=Frame)
_Parsers = Mapping[FrameType, Callable[[_Body], F]]

_FOLLOWER_PARSERS: Final[_Parsers[FollowerFrame]] = {
    FrameType.HELLO: _hello,
    FrameType.ACK: lambda body: Ack(*body.fixed(ACK)),
    FrameType.REFUSE: _refuse,
    FrameType.CURSORS_ACK: _cursors_ack,
    FrameType.ADMIN_ACK: lambda body: AdminAck(*body.fixed(ADMIN_ACK)),
    FrameType.HELLO_EX: _hello_ex,
    FrameType.REPAIR_RECORDS: _repair_records,
}
_LEADER_PARSERS: Final[_Parsers[LeaderFrame]] = {
    FrameType.WELCOME: lambda body: Welcome(*body.fixed(WELCOME)),
    FrameType.APPEND: _append,
    FrameType.HIGH_WATERMARK: lambda body: HighWatermark(*body.fixed(HIGH_WATERMARK)),
    FrameType.CURSORS: _cursors,
    FrameType.ERROR: _error,
    FrameType.ADMIN: _admin,
    FrameType.REPAIR_REQUEST: lambda body: RepairRequest(*body.fixed(REPAIR_REQUEST)),
}


def _sender(frame_type: FrameType) -> str:
    return "leader" if frame_type & 0x80 else "follower"


class FrameDecoder(FrameBuffer[ReplicationProtocolError], Generic[F]):
    """Incremental decoder of one direction's frames (use the two subclasses).

    Frames are cut from :class:`~protocol._framing.FrameBuffer`'s buffer, compacted once per
    :meth:`feed`.
    """

    def __init__(self, parsers: _Parsers[F], max_frame_size: int) -> None:
        super().__init__(max_frame_size, ReplicationProtocolError)
        self._parsers = parsers

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the peer (ignored once the stream is broken)."""
        if self._error is None:
            self._append(data)

    def next_frame(self) -> F | NeedData:
        """The next complete frame, or :data:`NEED_DATA`.

        Raises:
            ReplicationProtocolError: the stream broke the protocol (oversize or empty frame,
                unknown type or one sent the wrong way, malformed body); every later call
                raises it again. The size and type are checked before the body arrives.
        """
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available < FRAME_HEADER.size:
            if available >= _SIZE_FIELD:  # refuse an oversize frame before its type arrives
                self._check_size(int.from_bytes(buf[pos : pos + _SIZE_FIELD], "big"))
            return NEED_DATA
        size, type_byte = FRAME_HEADER.unpack_from(buf, pos)
        self._check_size(size)
        try:
            frame_type = FrameType(type_byte)
        except ValueError:
            raise self._fail(f"unknown frame type 0x{type_byte:02x}") from None
        parse = self._parsers.get(frame_type)
        if parse is None:
            raise self._fail(
                f"unexpected {frame_type.name} frame: only a {_sender(frame_type)} sends it"
            )
        end = pos + _SIZE_FIELD + size
        if len(buf) < end:
            return NEED_DATA
        body = _Body(buf, pos + FRAME_HEADER.size, end, frame_type.name)
        try:
            frame = parse(body)
            body.done()
        except ReplicationProtocolError as exc:
            self._error = exc
            raise
        self._pos = end
        return frame

    def _check_size(self, size: int) -> None:
        if not 1 <= size <= self.max_frame_size:
            raise self._fail(f"frame size {size} outside 1..{self.max_frame_size}")


class FollowerFrameDecoder(FrameDecoder[FollowerFrame]):
    """The leader's decoder: accepts Hello, Ack, CursorsAck, AdminAck, Refuse and RepairRecords
    only."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        super().__init__(_FOLLOWER_PARSERS, max_frame_size)


class LeaderFrameDecoder(FrameDecoder[LeaderFrame]):
    """The follower's decoder: accepts Welcome, Append, HighWatermark, Cursors, Admin, Error
    and RepairRequest only."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        super().__init__(_LEADER_PARSERS, max_frame_size)
