"""The TCP listener: read the 4-byte magic, then hand the connection to the protocol it names.

One port serves every protocol an nsqd speaks: ``"  V2"`` (clients) is always there; the
replication protocol (``"  R1"``, :mod:`nsqd.replication`) registers its handler with
:meth:`TCPServer.add`.
An unknown magic gets nsqd's ``E_BAD_PROTOCOL`` and the connection is closed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from pnsq._netio.plain_stream import PlainSocketStream
from pnsq._netio.tcp import serve_tcp
from protocol import frames

from ..broker import Broker
from .reactor import PublishReactor
from .session import Session
from .settings import SessionSettings

log = logging.getLogger("nsqd.tcp")

MAGIC_TIMEOUT = 60.0  # nsqd's ClientTimeout: how long a new connection may stay silent

#: a protocol's side of a connection: the stream, the peer, bytes read after the magic
ProtocolHandler = Callable[[trio.abc.Stream, str, bytes], Awaitable[None]]


class TCPServer:
    """Accepts connections and runs each under the protocol its 4-byte magic names; protocol
    V2 runs one :class:`Session` per client."""

    def __init__(self, broker: Broker, settings: SessionSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.sessions: set[Session] = set()
        self.reactor = PublishReactor(broker, settings.busy_poll)
        self._protocols: dict[bytes, ProtocolHandler] = {frames.MAGIC_V2: self._serve_v2}

    def add(self, magic: bytes, handler: ProtocolHandler) -> None:
        """Serve connections that start with ``magic`` (4 bytes) with ``handler``."""
        if len(magic) != 4 or magic in self._protocols:
            raise ValueError(f"magic {magic!r} is not 4 bytes or already served")
        self._protocols[magic] = handler

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (port 0: any free port); reports the bound port when ready."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.reactor.run)
            await serve_tcp(self._handle, host, port, log=log, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream, remote: str) -> None:
        """One connection (errors are logged and closed by :func:`pnsq._netio.tcp.serve_tcp`)."""
        magic = b""
        with trio.move_on_after(MAGIC_TIMEOUT):
            while len(magic) < 4:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                magic += chunk
        if len(magic) < 4:
            return
        handler = self._protocols.get(magic[:4])
        if handler is None:
            log.info("[%s] bad protocol magic %r", remote, magic[:4])
            await stream.send_all(frames.encode_error("E_BAD_PROTOCOL"))
            return
        # from here on each call goes straight to the socket (docs/benchmarks.md)
        await handler(PlainSocketStream(stream.socket), remote, magic[4:])

    async def _serve_v2(self, stream: trio.abc.Stream, remote: str, initial: bytes) -> None:
        session = Session(stream, self.broker, self.settings, remote, self.reactor)
        self.sessions.add(session)
        try:
            await session.run(initial=initial)
        finally:
            self.sessions.discard(session)
