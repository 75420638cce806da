"""A connection's output side: frames are appended to a buffer, one writer task sends them.

Everything a session produces (responses, errors, heartbeats, message frames) is appended here,
so many frames leave in one ``send_all`` (DESIGN.md §6: never await I/O per message), and two
tasks never write to the stream at once.
"""

from __future__ import annotations

import trio
from trio.lowlevel import ParkingLot


class OutputBuffer:
    """Coalescing writer for one stream. Run :meth:`run` in the connection's nursery."""

    def __init__(self, stream: trio.abc.SendStream, write_timeout: float | None) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._wake = ParkingLot()
        self._idle = ParkingLot()
        self._sending = False
        self.write_timeout = write_timeout  # nsqd: 1 x heartbeat interval per write
        self.bytes_sent = 0

    def append(self, frame: bytes) -> None:
        """Queue a frame; it goes out with the next flush."""
        self._buf += frame

    def flush(self) -> None:
        """Ask the writer to send what is queued (does not wait)."""
        if self._buf:
            self._wake.unpark_all()

    def write(self, frame: bytes) -> None:
        """Queue a frame and flush at once (responses and errors)."""
        self._buf += frame
        self._wake.unpark_all()

    @property
    def pending(self) -> int:
        """Bytes queued and not yet handed to the stream."""
        return len(self._buf)

    async def drain(self) -> None:
        """Wait until everything queued so far has been sent."""
        self.flush()
        while self._buf or self._sending:
            await self._idle.park()

    async def run(self) -> None:
        """Send queued bytes until cancelled; a write slower than ``write_timeout`` fails."""
        while True:
            while not self._buf:
                self._idle.unpark_all()
                await self._wake.park()
            data, self._buf = self._buf, bytearray()
            self._sending = True
            timeout = self.write_timeout
            with trio.fail_after(timeout) if timeout else trio.CancelScope():
                await self._stream.send_all(data)
            self._sending = False
            self.bytes_sent += len(data)
