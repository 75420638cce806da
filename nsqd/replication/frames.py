"""Reading ``"  R1"`` frames from a Trio stream with a sans-IO decoder."""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

from protocol.parser import NeedData
from protocol.replication import Frame
from protocol.replication_decoder import FrameDecoder

F = TypeVar("F", bound=Frame)

READ_SIZE = 1 << 16


class PeerClosed(Exception):
    """The other end closed the connection."""


class FrameReader(Generic[F]):
    """The frames of one connection, in order."""

    def __init__(
        self, stream: trio.abc.ReceiveStream, decoder: FrameDecoder[F], initial: bytes = b""
    ) -> None:
        self._stream = stream
        self._decoder = decoder
        if initial:
            decoder.feed(initial)

    async def next(self) -> F:
        """The next frame. Raises :class:`PeerClosed` at EOF and
        :class:`~protocol.replication.ReplicationProtocolError` for a broken stream."""
        while True:
            frame = self._decoder.next_frame()
            if not isinstance(frame, NeedData):
                return frame
            data = await self._stream.receive_some(READ_SIZE)
            if not data:
                raise PeerClosed("connection closed")
            self._decoder.feed(data)
