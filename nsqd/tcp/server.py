"""The TCP listener: read the 4-byte magic, then hand the connection to a protocol session."""

from __future__ import annotations

import logging

import trio

from netio.tcp import serve_tcp
from protocol import frames

from ..broker import Broker
from .session import Session, SessionSettings

log = logging.getLogger("nsqd.tcp")

MAGIC_TIMEOUT = 60.0  # nsqd's ClientTimeout: how long a new connection may stay silent


class TCPServer:
    """Accepts connections and runs one :class:`Session` per protocol V2 client."""

    def __init__(self, broker: Broker, settings: SessionSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.sessions: set[Session] = set()

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (port 0: any free port); reports the bound port when ready."""
        await serve_tcp(self._handle, host, port, log=log, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream, remote: str) -> None:
        """One connection (errors are logged and closed by :func:`netio.tcp.serve_tcp`)."""
        magic = b""
        with trio.move_on_after(MAGIC_TIMEOUT):
            while len(magic) < 4:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                magic += chunk
        if len(magic) < 4:
            return
        if magic[:4] != frames.MAGIC_V2:
            log.info("[%s] bad protocol magic %r", remote, magic[:4])
            await stream.send_all(frames.encode_error("E_BAD_PROTOCOL"))
            return
        session = Session(stream, self.broker, self.settings, remote)
        self.sessions.add(session)
        try:
            await session.run(initial=magic[4:])
        finally:
            self.sessions.discard(session)
