"""A connection's output side: frames are appended to a buffer, one writer task sends them.

Everything a session produces (responses, errors, heartbeats, message frames) is appended here,
so many frames leave in one ``send_all`` (DESIGN.md §6: never await I/O per message), and two
tasks never write to the stream at once. A TLS or compression upgrade swaps the stream:
:meth:`OutputBuffer.hold` stops sending while the upgrade talks on the stream itself,
:meth:`OutputBuffer.release` resumes on the new stream (one compress per send: whole batches).
"""

from __future__ import annotations

import trio
from trio.lowlevel import ParkingLot

from pnsq._netio.plain_stream import PlainSocketStream

from ..broker.clock import Clock


class OutputBuffer:
    """Coalescing writer for one stream. Run :meth:`run` in the connection's nursery."""

    def __init__(self, stream: trio.abc.SendStream, clock: Clock | None = None) -> None:
        self._stream = stream
        self._clock = clock or Clock()
        self._buf = bytearray()
        self._wake = ParkingLot()
        self._idle = ParkingLot()
        self._sent = ParkingLot()  # a send finished: :meth:`wait_sent`
        self._sending = False
        self._in_send = 0  # bytes handed to the stream by the send in progress
        self._held = False
        self._stopped = False
        #: when the current send began (None when idle): the session's watchdog enforces
        #: nsqd's write deadline with it (a cancel scope per send would cost ~15% of a PUB)
        self.send_started: float | None = None
        self.bytes_sent = 0

    def append(self, frame: bytes) -> None:
        """Queue a frame; it goes out with the next flush."""
        self._buf += frame

    @property
    def queue(self) -> bytearray:
        """The bytes queued, to extend in place (``queue += frame``) in a loop that appends
        many frames: half the cost of :meth:`append` per frame. Only until the next ``await``:
        a send replaces it."""
        return self._buf

    def append_owned(self, frames: bytearray) -> None:
        """Queue ``frames``, a buffer the caller gives up: when nothing is queued it becomes
        the queue itself, with no copy (a 1 MB message read from disk is not copied again)."""
        if self._buf:
            self._buf += frames
        else:
            self._buf = frames

    def flush(self) -> None:
        """Ask the writer to send what is queued (does not wait)."""
        if self._buf:
            self._wake.unpark_all()

    def write(self, frame: bytes) -> None:
        """Queue a frame and flush at once (responses and errors)."""
        self._buf += frame
        self._wake.unpark_all()

    def hold(self) -> None:
        """Stop sending (frames still queue) until :meth:`release`. Call when :meth:`drain`
        has returned, so no send is in progress."""
        assert not self._sending
        self._held = True

    def release(self, stream: trio.abc.SendStream) -> None:
        """Resume sending, on ``stream`` from now on."""
        self._stream = stream
        self._held = False
        self.flush()

    @property
    def pending(self) -> int:
        """Bytes queued and not yet handed to the stream."""
        return len(self._buf)

    @property
    def backlog(self) -> int:
        """Bytes held in process memory for this stream: queued, plus what the send in progress
        is still pushing into the socket (it holds them until the socket took them all)."""
        return len(self._buf) + self._in_send

    async def wait_sent(self) -> None:
        """Wait until the next send completes (the socket is draining): the message pump's
        backpressure when :attr:`backlog` is over its bound."""
        self.flush()
        await self._sent.park()

    def send_now(self) -> None:
        """Send what is queued without waiting, from a task that cannot wait (the publish
        reactor); what the socket does not take at once, or an error from it, is left to the
        writer task, which sends the rest or raises the error and so ends the connection."""
        stream = self._stream
        if (
            self._sending
            or self._held
            or not self._buf
            or not isinstance(stream, PlainSocketStream)
        ):
            self.flush()
            return
        try:
            sent = stream.send_nowait(self._buf)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            sent = 0  # the writer's send meets it again and raises it
        if not sent:
            self.flush()
            return
        del self._buf[:sent]
        self._sent_out(sent)

    async def send_pending(self) -> bool:
        """Send what is queued from the calling task, unless the writer is already sending;
        True when it sent (the send was a checkpoint), False when it left it to the writer.

        The read loop calls this after each batch of commands: responses leave without a hop
        through the writer task (the common case for clients that wait for each reply).
        """
        if self._sending or self._held or not self._buf:
            self.flush()
            return False
        await self._send()
        return True

    async def _send(self) -> None:
        data, self._buf = self._buf, bytearray()
        self._sending = True
        self._in_send = len(data)
        self.send_started = self._clock.monotonic()
        try:
            await self._stream.send_all(data)
        finally:
            self._sending = False
            self._in_send = 0
            self.send_started = None
        self._sent_out(len(data))

    def _sent_out(self, count: int) -> None:
        """A send took ``count`` bytes: wake what waits for a send, then the writer when more
        is queued, else what waits for the queue to empty."""
        self.bytes_sent += count
        if self._sent:
            self._sent.unpark_all()
        if self._buf:
            self._wake.unpark_all()
        elif self._idle:
            self._idle.unpark_all()

    async def drain(self) -> None:
        """Wait until everything queued so far has been sent."""
        self.flush()
        while self._buf or self._sending:
            await self._idle.park()

    def stop(self) -> None:
        """Make :meth:`run` return without sending more (the connection is gone)."""
        self._stopped = True
        self._wake.unpark_all()

    async def run(self) -> None:
        """Send queued bytes until cancelled or stopped (:meth:`stop`)."""
        while not self._stopped:
            if not self._buf or self._sending or self._held:
                if not self._sending:
                    self._idle.unpark_all()
                await self._wake.park()
                continue
            await self._send()
