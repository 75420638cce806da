"""The receive buffer the two size-prefixed frame decoders share (sans-IO).

:class:`protocol.client_frames.FrameDecoder` (V2, server → client) and
:class:`protocol.replication_decoder.FrameDecoder` (``"  R1"``) both cut ``[u32 size]...`` frames
from one growing ``bytearray``. This base holds that buffer, the offset of the first undecoded
byte, the frame size limit and the sticky protocol error; each decoder reads its own header in
its own ``next_frame`` (the checks differ), straight from ``_buf`` and ``_pos`` so that the
per-frame path calls nothing here.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from .errors import ProtocolError

E = TypeVar("E", bound=ProtocolError)


class FrameBuffer(Generic[E]):
    """Bytes received and not yet decoded, plus the error that broke the stream.

    Consumed bytes are dropped once per :meth:`_append` (not per frame), so decoding is linear in
    the bytes received however they are split.

    Args:
        max_frame_size: the largest ``size`` field the decoder accepts.
        error_type: the exception :meth:`_fail` records.
    """

    def __init__(self, max_frame_size: int, error_type: type[E]) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # start of the undecoded bytes in _buf
        self._error: E | None = None
        self._error_type = error_type

    def _append(self, data: bytes | bytearray | memoryview) -> None:
        """Drop the consumed bytes, then buffer ``data``."""
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet decoded."""
        return len(self._buf) - self._pos

    def _fail(self, text: str) -> E:
        """Record the stream as broken (``next_frame`` raises it from now on) and return it."""
        self._error = self._error_type(text)
        return self._error
