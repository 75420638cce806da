"""The sans-IO client side of protocol V2: server frames in, typed values out.

:class:`FrameDecoder` is the inverse of :mod:`protocol.frames` and :mod:`protocol.message`:
feed it whatever the socket returned with :meth:`FrameDecoder.receive_data`, then call
:meth:`FrameDecoder.next_frame` until it returns :data:`NEED_DATA`. A frame is
``[u32 size][i32 type][data]``; a message frame's data is
``[i64 timestamp ns][u16 attempts][16-byte id][body]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._framing import FrameBuffer
from .errors import NON_FATAL_CODES, ProtocolError
from .frames import FRAME_HEADER, FrameType
from .message import MESSAGE_FRAME_HEADER, MESSAGE_ID
from .parser import NEED_DATA, NeedData

_SIZE_FIELD: Final = 4  # the u32 size field; ``size`` counts everything after it
_MIN_FRAME_SIZE: Final = FRAME_HEADER.size - _SIZE_FIELD  # the frame type alone
_MESSAGE_ID_START: Final = MESSAGE_FRAME_HEADER.size  # id follows size/type/timestamp/attempts
_MESSAGE_BODY_START: Final = _MESSAGE_ID_START + MESSAGE_ID.size  # 30: body after the id
#: The smallest message frame ``size``: type, timestamp, attempts and id, empty body.
_MIN_MESSAGE_SIZE: Final = _MESSAGE_BODY_START - _SIZE_FIELD
DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Response:
    """A response frame: ``OK``, ``CLOSE_WAIT``, ``_heartbeat_``, JSON or a traced reply."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ErrorFrame:
    """An error frame: ``"<CODE> <description>"`` (raw bytes kept via surrogateescape)."""

    text: str

    @property
    def code(self) -> str:
        """The leading error code, e.g. ``E_BAD_TOPIC``."""
        return self.text.split(" ", 1)[0]

    @property
    def fatal(self) -> bool:
        """Whether nsqd closes the connection after this error (by the code's class)."""
        return self.code not in NON_FATAL_CODES


@dataclass(frozen=True, slots=True)
class MessageFrame:
    """A delivered message."""

    timestamp_ns: int
    attempts: int
    message_id: bytes
    body: bytes


ServerFrame = Response | ErrorFrame | MessageFrame


class FrameDecoder(FrameBuffer[ProtocolError]):
    """Incremental decoder of server → client frames.

    Args:
        max_frame_size: the largest ``size`` field accepted; larger ones raise
            :class:`ProtocolError` instead of buffering without bound.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        super().__init__(max_frame_size, ProtocolError)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the server (compacting what was consumed, once per call)."""
        self._append(data)

    def next_frame(self) -> ServerFrame | NeedData:
        """The next complete frame, or :data:`NEED_DATA`.

        Raises:
            ProtocolError: the stream is not valid V2 framing; every later call raises it again.
        """
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < FRAME_HEADER.size:
            return NEED_DATA
        size, frame_type = FRAME_HEADER.unpack_from(buf, pos)
        if not _MIN_FRAME_SIZE <= size <= self.max_frame_size:
            raise self._fail(f"invalid frame size {size}")
        end = pos + _SIZE_FIELD + size
        if len(buf) < end:
            return NEED_DATA
        frame: ServerFrame
        if frame_type == FrameType.RESPONSE:
            frame = Response(bytes(buf[pos + FRAME_HEADER.size : end]))
        elif frame_type == FrameType.ERROR:
            text = bytes(buf[pos + FRAME_HEADER.size : end])
            frame = ErrorFrame(text.decode("utf-8", "surrogateescape"))
        elif frame_type == FrameType.MESSAGE:
            if size < _MIN_MESSAGE_SIZE:
                raise self._fail(f"message frame too short ({size})")
            _, _, timestamp_ns, attempts = MESSAGE_FRAME_HEADER.unpack_from(buf, pos)
            frame = MessageFrame(
                timestamp_ns=timestamp_ns,
                attempts=attempts,
                message_id=bytes(buf[pos + _MESSAGE_ID_START : pos + _MESSAGE_BODY_START]),
                body=bytes(buf[pos + _MESSAGE_BODY_START : end]),
            )
        else:
            raise self._fail(f"unknown frame type {frame_type}")
        self._pos = end
        return frame
