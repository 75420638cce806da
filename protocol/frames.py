"""Server-to-client frames of protocol V2: ``[u32 size][i32 frame type][data]``.

``size`` counts the type field and the data (``4 + len(data)``). Responses and errors are
flushed at once by the server; message frames (see :mod:`protocol.message`) are coalesced.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

MAGIC_V2: Final = b"  V2"

FRAME_HEADER: Final = struct.Struct(
    ">I"  # size: len(data) + 4, i.e. everything after this field
    "i"  # frame type: FrameType
)


class FrameType(IntEnum):
    """The ``frame type`` field."""

    RESPONSE = 0
    ERROR = 1
    MESSAGE = 2


def encode_frame(frame_type: FrameType, data: bytes) -> bytes:
    """One complete frame."""
    return FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    """A response frame (``OK``, ``CLOSE_WAIT``, ``_heartbeat_``, JSON)."""
    return encode_frame(FrameType.RESPONSE, data)


def encode_error(text: str) -> bytes:
    """An error frame carrying ``"<CODE> <description>"``; raw id bytes survive the round trip."""
    return encode_frame(FrameType.ERROR, text.encode("utf-8", "surrogateescape"))


OK: Final = encode_response(b"OK")
CLOSE_WAIT: Final = encode_response(b"CLOSE_WAIT")
HEARTBEAT: Final = encode_response(b"_heartbeat_")
HEARTBEAT_DATA: Final = b"_heartbeat_"
