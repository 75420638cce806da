"""One HTTP connection: hypercorn's per-connection server, run as a :mod:`netio.tcp` handler.

hypercorn's own ``serve`` runs every connection's task in the nursery of the whole server, so
an exception a connection raises ends the HTTP server and with it the daemon. Accepting with
:func:`netio.tcp.serve_tcp` instead puts each connection under that module's guard: whatever
one connection raises ends that connection only.

hypercorn 0.18's ``TCPServer`` also sends EOF (``_close``) outside the lock that serializes its
``send_all`` calls. Requests pipelined after a ``Connection: close`` request make the two meet
(an error reply goes out while the connection is being closed) and trio raises
``BusyResourceError``; :class:`_SerialTCPServer` takes the lock for the EOF too.

And once the client has closed its side, hypercorn still keeps an idle connection until
``keep_alive_timeout`` (60 s here) ends its idle timer: a client that connects and half-closes
without a request, or after a keep-alive response, holds a descriptor for a minute (Go's
``net/http`` closes at once). :class:`_SerialTCPServer` closes an idle connection as soon as the
client's EOF is read, and a busy one as soon as its response is out.
"""

from __future__ import annotations

from typing import Any

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.events import Event, Updated
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext

from .tcp import Handler

__all__ = ["http_handler"]


class _SerialTCPServer(TCPServer):
    """hypercorn's connection server with the EOF sent under the send lock, closed as soon as
    the client is gone and nothing is left to answer."""

    _idle = True  # hypercorn starts a connection idle (its idle timer running)
    _client_gone = False

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            self._idle = event.idle
        await super().protocol_send(event)

    async def _read_data(self) -> None:
        await super()._read_data()  # returns on the client's EOF, a reset or a read timeout
        self._client_gone = True
        if self._idle:
            await self.idle_task.restart(self._task_group, self._idle_timeout)

    async def _idle_timeout(self) -> None:
        if not self._client_gone:
            await super()._idle_timeout()
            return
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    async def _close(self) -> None:
        lock: trio.Lock = self.send_lock
        if lock.statistics().owner is trio.lowlevel.current_task():
            await super()._close()  # closing from inside a send (the peer went away)
            return
        async with lock:
            await super()._close()


def http_handler(app: Any, config: Config) -> Handler:
    """A :data:`netio.tcp.Handler` serving ``app`` (ASGI) with ``config`` on each connection,
    over TLS when ``config`` has a certificate."""
    wrapped = ASGIWrapper(app)
    context = WorkerContext(None)
    ssl_context = config.create_ssl_context()

    async def handle(stream: trio.SocketStream, remote: str) -> None:
        # hypercorn types the stream as an SSLStream; a plain SocketStream is what its own
        # serve() passes for http:// (TCPServer tells them apart by do_handshake)
        served: Any = stream
        if ssl_context is not None:
            served = trio.SSLStream(stream, ssl_context, server_side=True, https_compatible=True)
        await _SerialTCPServer(wrapped, config, context, {}, served).run()

    return handle
