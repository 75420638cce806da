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
    try:
        for _ in range(count):
            (size,) = unpack(body, at)
            first = at + 4
            at = first + size
            if size <= 0 or size > max_msg_size or at > end:
                break
            keep(body[first:at])
        else:
            return out
    except struct.error:  # an element's size cut short
        pass
    raise _first_problem(body, count, max_msg_size, cmd)


def _first_problem(body: bytes, count: int, max_msg_size: int, cmd: str) -> MpubFormatError:
    """The error of the first of ``count`` elements of ``body`` that is not well formed, in
    nsqd's words (the fast loop above only tells that one is not)."""
    unpack = _SIZE.unpack_from
    end = len(body)
    at = 4
    for i in range(count):
        if at + 4 > end:
            return MpubFormatError(
                ErrorCode.BAD_MESSAGE, f"{cmd} failed to read message({i}) body size"
            )
        (size,) = unpack(body, at)
        if size <= 0:
            return MpubFormatError(
                ErrorCode.BAD_MESSAGE, f"{cmd} invalid message({i}) body size {size}"
            )
        if size > max_msg_size:
            return MpubFormatError(
                ErrorCode.BAD_MESSAGE, f"{cmd} message too big {size} > {max_msg_size}"
            )
        at += 4
        if at + size > end:
            return MpubFormatError(ErrorCode.BAD_MESSAGE, f"{cmd} failed to read message body")
        at += size
    raise AssertionError("every element well formed")  # pragma: no cover - split_mpub_body's
