"""A connected TCP socket as a Trio stream with the fewest steps per call.

:class:`trio.SocketStream` wraps every ``send_all`` and ``receive_some`` in a conflict detector,
an error-translating context manager, a memoryview and Trio's socket wrapper, and yields to
the scheduler after each call even when the system call completed at once. For a client that
waits for each reply (a synchronous ``PUB``), those layers cost about as much as the
publish itself (docs/benchmarks.md).

:class:`PlainSocketStream` reads and writes the descriptor directly and waits through Trio only
when the kernel says it would block. It keeps every promise of a Trio stream (Trio's generic
stream checks run against it in the tests): each call is a checkpoint (a cancellation check,
and one yield when the system call completed at once), concurrent sends or receives raise
:class:`trio.BusyResourceError`, a closed stream :class:`trio.ClosedResourceError`, and an
error from the socket becomes :class:`trio.BrokenResourceError`.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Awaitable, Callable

import trio
from trio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

DEFAULT_RECEIVE_SIZE = 64 * 1024


class PlainSocketStream(trio.abc.HalfCloseableStream):
    """``sock`` (a connected, non-blocking Trio TCP socket) as a stream."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.socket = sock
        if sock.family in (socket.AF_INET, socket.AF_INET6):  # as Trio's SocketStream
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self._sending = False
        self._receiving = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            await checkpoint_if_cancelled()
            sent = self._send(data)
            total = len(data)
            if sent < total:
                view = memoryview(data)
                while sent < total:
                    await self._wait_writable()
                    sent += self._send(view[sent:])
            else:
                await cancel_shielded_checkpoint()
        finally:
            self._sending = False

    def send_nowait(self, data: bytes | bytearray | memoryview) -> int:
        """Write what the socket takes now, without waiting; return how many bytes it took
        (0 when its buffer is full). Not a checkpoint: for a caller that cannot wait (the
        publish reactor, :mod:`nsqd.tcp.reactor`), which leaves the rest to a task that can."""
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        return self._send(data)

    def _fd(self) -> int:
        """The descriptor, asked each time: a closed socket's number may be reused."""
        fd = self.socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the stream was closed")
        return fd

    def _send(self, data: bytes | bytearray | memoryview) -> int:
        """What one non-blocking ``send`` took (0 when the buffer is full)."""
        fd = self._fd()
        if self.socket.did_shutdown_SHUT_WR:
            raise trio.ClosedResourceError("cannot send data after sending EOF")
        try:
            return os.write(fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise _broken(exc) from exc

    async def _wait_writable(self) -> None:
        await self._wait(trio.lowlevel.wait_writable)

    async def _wait(self, wait: Callable[[trio.socket.SocketType], Awaitable[None]]) -> None:
        """Trio's wait for the socket (a close meanwhile: ClosedResourceError)."""
        self._fd()
        try:
            await wait(self.socket)
        except trio.ClosedResourceError:
            raise
        except OSError as exc:
            raise _broken(exc) from exc

    async def wait_send_all_might_not_block(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            await self._wait_writable()
        finally:
            self._sending = False

    async def send_eof(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        await checkpoint_if_cancelled()
        self._fd()
        if self.socket.did_shutdown_SHUT_WR:
            await cancel_shielded_checkpoint()
            return
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise _broken(exc) from exc
        await cancel_shielded_checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._receiving = True
        try:
            return await self._receive(max_bytes)
        finally:
            self._receiving = False

    def receive_nowait(self, max_bytes: int = DEFAULT_RECEIVE_SIZE) -> bytes | None:
        """What the socket holds now (``b""``: the peer closed), or None when it holds nothing.
        Not a checkpoint: for a loop that has just yielded (a send) and would otherwise yield
        again only to read bytes that are already there."""
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        return self._read_now(max_bytes)

    def _read_now(self, size: int) -> bytes | None:
        try:
            return os.read(self._fd(), size)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise _broken(exc) from exc

    async def _receive(self, max_bytes: int | None) -> bytes:
        await checkpoint_if_cancelled()
        size = DEFAULT_RECEIVE_SIZE if max_bytes is None else max_bytes
        if size < 1:
            raise ValueError("max_bytes must be >= 1")
        data = self._read_now(size)
        if data is not None:
            await cancel_shielded_checkpoint()
            return data
        while data is None:  # the wait was the checkpoint
            await self._wait(trio.lowlevel.wait_readable)
            data = self._read_now(size)
        return data

    async def aclose(self) -> None:
        self.socket.close()
        await trio.lowlevel.checkpoint()


def _broken(exc: OSError) -> trio.BrokenResourceError:
    return trio.BrokenResourceError(f"socket connection broken: {exc}")
