"""One HTTP connection: hypercorn's per-connection server, run as a :mod:`pnsq._netio.tcp` handler.

hypercorn's own ``serve`` runs every connection's task in the nursery of the whole server, so
an exception a connection raises ends the HTTP server and with it the daemon. Accepting with
:func:`pnsq._netio.tcp.serve_tcp` instead puts each connection under that module's guard: whatever
one connection raises ends that connection only.

hypercorn 0.18's ``TCPServer`` also sends EOF (``_close``) outside the lock that serializes its
``send_all`` calls. Requests pipelined after a ``Connection: close`` request make the two meet
(an error reply goes out while the connection is being closed) and trio raises
``BusyResourceError``; :class:`_SerialTCPServer` takes the lock for the EOF too.

And once the client has closed its side, hypercorn still keeps an idle connection until
``keep_alive_timeout`` (60 s here) ends its idle timer: a client that connects and half-closes
without a request, or after a keep-alive response, holds a descriptor for a minute (Go's
``net/http`` closes at once). :class:`_SerialTCPServer` closes an idle connection as soon as the
client's EOF is read, and a busy one as soon as its response is out, or as soon as the app
ends without one (a long poll that gave up when its client left: hypercorn tells the app, but
would keep the connection until the server stops).

hypercorn times an idle connection with a task of its own per idle period: at the end of every
response it cancels the last one and starts another (``TrioSingleTask.restart``: a lock, a
cancel, a ``nursery.start``), and stops it when the next request arrives. That was a seventh of
its work per request. :class:`_SerialTCPServer` keeps one idle watch per connection instead,
a cancel scope whose deadline the idle and busy events move.

Finally, h11 reads past the end of a request the way Go's ``net/http`` does not. Bytes after a
request that closes the connection (``Connection: close``, HTTP/1.0) made h11 fail the
connection and hypercorn answer ``400`` in place of the response of the request it was already
serving, which had acted (a publish stored, the client told it failed). And the line break a
client may send after a POST body (RFC 9112, section 2.2: servers should ignore it; Go does)
got a ``400`` of its own. :class:`_GoConnection` reads like ``net/http``.

It also writes like ``net/http``, which buffers a response's head and sends it with the body:
hypercorn sends the head, the body and the (empty) end of the message each by a ``send_all``
of its own. :class:`_GoConnection` holds a final response's head until its body (or its end)
follows, and :class:`_SerialTCPServer` skips the empty sends, so a response with its body in
one piece is one send on the socket. Its status line has the reason phrase Go writes
(``HTTP/1.1 200 OK``; h11 leaves it empty), and a response given before the request's body was
read, which ends the connection (hypercorn does not read what the app left), says so with
``Connection: close`` (a keep-alive client would otherwise send its next request into a
closing socket).
"""

from __future__ import annotations

import math
from http import HTTPStatus
from typing import Any

import h11
import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config
from hypercorn.events import Event, RawData, Updated
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext

from .tcp import Handler

__all__ = ["http_handler"]


class _GoConnection(h11.Connection):
    """An h11 server connection that reads requests as Go's ``net/http`` does: up to four CR or
    LF bytes after a POST are skipped (RFC 9112, section 2.2's tolerance for clients that end
    a body with a line break), and nothing is read after a request that ends the connection.

    Its :meth:`send` (through ``send_with_data_passthrough``) gives nothing for a final
    response's head and gives the head with the bytes of the event after it (the body's first
    bytes, or the end of the message)."""

    _done_reading = False
    _skippable = 0  # CR/LF bytes that may still be skipped before the next request line
    _head: list[bytes] = []  # a final response's head, not given yet (replaced, never mutated)
    _request_body = False  # the request being answered declared a body

    def send_with_data_passthrough(self, event: h11.Event) -> list[bytes] | None:
        if isinstance(event, h11.Response | h11.InformationalResponse):
            event = self._as_go_writes(event)
        data = super().send_with_data_passthrough(event)  # refused: raises, nothing held
        if isinstance(event, h11.Response) and data is not None:
            self._head = data
            return []
        if self._head:
            data, self._head = self._head + (data or []), []
        return data

    def _as_go_writes(
        self, event: h11.Response | h11.InformationalResponse
    ) -> h11.Response | h11.InformationalResponse:
        reason = event.reason or _reason(event.status_code)
        unread = self._request_body and self.their_state is h11.SEND_BODY
        if unread and isinstance(event, h11.Response):
            headers = event.headers.raw_items()
            if not any(name.lower() == b"connection" for name, _ in headers):
                headers = [*headers, (b"Connection", b"close")]
            return h11.Response(
                status_code=event.status_code,
                headers=headers,
                reason=reason,
                http_version=event.http_version,
            )
        # the event's headers as h11 validated them, with the reason phrase
        return type(event)(
            status_code=event.status_code,
            headers=event.headers,
            reason=reason,
            http_version=event.http_version,
            _parsed=True,
        )

    def next_event(self) -> Any:
        if self._done_reading:
            return h11.NEED_DATA  # never read: the connection closes after the response
        if self._skippable and self.their_state is h11.IDLE:
            self._skip_line_breaks()
        closing = self.their_state is h11.MUST_CLOSE
        try:
            event = super().next_event()
        except h11.RemoteProtocolError:
            if not closing:
                raise
            # data after a request that ends the connection: Go's net/http leaves it unread
            # and answers the request; so do we (h11 now refuses to read; the response goes on)
            self._done_reading = True
            return h11.NEED_DATA
        if isinstance(event, h11.Request):
            self._skippable = 4 if event.method == b"POST" else 0
            self._request_body = any(
                (name == b"content-length" and value != b"0") or name == b"transfer-encoding"
                for name, value in event.headers
            )
        return event

    def _skip_line_breaks(self) -> None:
        data = self.trailing_data[0][: self._skippable]
        count = len(data) - len(data.lstrip(b"\r\n"))
        if count:
            # h11 0.16 has no public way to drop buffered bytes
            self._receive_buffer.maybe_extract_at_most(count)
            self._skippable -= count
        elif data:
            self._skippable = 0


#: Go's ``http.StatusText`` where Python's phrase for the code differs (RFC 9110's newer names)
_GO_REASONS = {413: b"Request Entity Too Large", 422: b"Unprocessable Entity"}


def _reason(status: int) -> bytes:
    """The reason phrase Go's ``net/http`` writes for ``status`` (none for a code it lacks)."""
    if status in _GO_REASONS:
        return _GO_REASONS[status]
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _SerialTCPServer(TCPServer):
    """hypercorn's connection server with the EOF sent under the send lock, one idle watch per
    connection, closed as soon as the client is gone and nothing is left to answer."""

    _idle = True  # hypercorn starts a connection idle
    _client_gone = False
    _closed = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # the idle watch's scope: its deadline is keep_alive_timeout after the connection went
        # idle, -inf once the client is gone and nothing is left to answer, inf while busy
        self._idle_watch = trio.CancelScope(deadline=self._idle_deadline())

    def _idle_deadline(self) -> float:
        if not self._idle:
            return math.inf
        if self._client_gone:
            return -math.inf
        return trio.current_time() + self.config.keep_alive_timeout

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData) and not event.data:
            return  # nothing to write (a held head, a Content-Length body's end)
        if isinstance(event, Updated):  # the watch's deadline moves; no task per idle period
            self._idle = event.idle
            self._idle_watch.deadline = self._idle_deadline()
            return
        await super().protocol_send(event)

    def app_ended(self) -> None:
        """The app has finished a request, answered or not (hypercorn marks the connection
        idle only after a response it completed): with the client gone, whether it left
        before or after this, nothing is left to answer."""
        self._idle = True
        if self._client_gone:
            self._idle_watch.deadline = -math.inf

    async def _read_data(self) -> None:
        protocol = self.protocol.protocol
        if isinstance(protocol, H11Protocol):  # nothing received yet: swap in Go's reading
            limit = self.config.h11_max_incomplete_size
            protocol.connection = _GoConnection(h11.SERVER, max_incomplete_event_size=limit)
        await super()._read_data()  # returns on the client's EOF, a reset or a read timeout
        self._client_gone = True
        self._idle_watch.deadline = self._idle_deadline()

    async def _idle_timeout(self) -> None:
        # started once, by run(), as the connection's idle watch; it ends with the connection
        # (the connection's task waits for it), whoever closes it
        with self._idle_watch:
            await self.context.terminated.wait()
        if self._closed:
            return
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    async def _close(self) -> None:
        self._closed = True  # the server closes it (a response that ends it, an error)
        self._idle_watch.cancel()
        lock: trio.Lock = self.send_lock
        if lock.statistics().owner is trio.lowlevel.current_task():
            await super()._close()  # closing from inside a send (the peer went away)
            return
        async with lock:
            await super()._close()


def http_handler(app: Any, config: Config) -> Handler:
    """A :data:`pnsq._netio.tcp.Handler` serving ``app`` (ASGI) with ``config`` on each connection,
    over TLS when ``config`` has a certificate."""
    context = WorkerContext(None)
    ssl_context = config.create_ssl_context()

    async def handle(stream: trio.SocketStream, remote: str) -> None:
        # hypercorn types the stream as an SSLStream; a plain SocketStream is what its own
        # serve() passes for http:// (TCPServer tells them apart by do_handshake)
        served: Any = stream
        if ssl_context is not None:
            served = trio.SSLStream(stream, ssl_context, server_side=True, https_compatible=True)
        server: _SerialTCPServer

        async def serve(scope: Any, receive: Any, send: Any) -> None:
            try:
                await app(scope, receive, send)
            finally:
                server.app_ended()

        server = _SerialTCPServer(ASGIWrapper(serve), config, context, {}, served)
        await server.run()

    return handle
