"""The youzan traced publish reply (PUB_TRACE, MPUB_TRACE, PUB_EXT with ``##trace_id``)."""

from __future__ import annotations

import struct
from typing import Final

TRACED_RESPONSE: Final = struct.Struct(
    ">2s"  # b"OK"
    "Q"  # internal message id of the (first) message: with the next field, the 16-byte id
    "Q"  # trace id as sent (0 for MPUB_TRACE)
    "Q"  # log offset where the (first) message was written
    "I"  # raw size written, each message counted with a 4-byte length prefix
)


def traced_response(internal_id: int, trace_id: int, offset: int, raw_size: int) -> bytes:
    """The 30-byte reply payload."""
    return TRACED_RESPONSE.pack(b"OK", internal_id, trace_id, offset, raw_size)
