"""The MPUB body ``[i32 n]([i32 len][bytes])*``, as HTTP ``/mpub?binary=true`` carries it."""

from __future__ import annotations

import struct
from typing import Final

from .errors import ErrorCode

_SIZE: Final = struct.Struct(">i")  # count and element sizes: i32 BE


class MpubFormatError(ValueError):
    """The body is malformed; ``code`` is the TCP error code nsqd would use."""

    def __init__(self, code: ErrorCode, text: str) -> None:
        super().__init__(text)
        self.code = code


def split_mpub_body(
    body: bytes, max_msg_size: int, max_body_size: int, cmd: str = "MPUB"
) -> list[bytes]:
    """Split a binary MPUB body with nsqd's checks (count 1..(max_body-4)/5, sizes 1..max_msg)."""
    if len(body) < 4:
        raise MpubFormatError(ErrorCode.BAD_BODY, f"{cmd} failed to read message count")
    (count,) = _SIZE.unpack_from(body)
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise MpubFormatError(ErrorCode.BAD_BODY, f"{cmd} invalid message count {count}")
    out: list[bytes] = []
    keep = out.append
    unpack = _SIZE.unpack_from
    end = len(body)
    at = 4
    for i in range(count):
        if at + 4 > end:
            raise MpubFormatError(
                ErrorCode.BAD_MESSAGE, f"{cmd} failed to read message({i}) body size"
            )
        (size,) = unpack(body, at)
        if size <= 0:
            raise MpubFormatError(
                ErrorCode.BAD_MESSAGE, f"{cmd} invalid message({i}) body size {size}"
            )
        if size > max_msg_size:
            raise MpubFormatError(
                ErrorCode.BAD_MESSAGE, f"{cmd} message too big {size} > {max_msg_size}"
            )
        at += 4
        if at + size > end:
            raise MpubFormatError(ErrorCode.BAD_MESSAGE, f"{cmd} failed to read message body")
        keep(body[at : at + size])
        at += size
    return out
