"""The HTTP pieces both daemons share (ASGI on hypercorn, Trio): the ASGI types, error replies,
Go's query parsing and JSON encoding, the V1 responder core and the server.

The V1 shape (nsqd's and nsqlookupd 1.x's ``Respond`` as Go's ``net/http`` sends it):

* a ``bytes`` reply is sent as is (``text/plain; charset=utf-8``, Go's sniffing of text);
* ``None`` or an empty body: no body and no Content-Type;
* a dict: JSON with ``application/json; charset=utf-8``, encoded as Go's ``encoding/json``
  does (compact; ``<``, ``>``, ``&``, U+2028 and U+2029 escaped);
* :class:`HTTPError`: the status and ``{"message": "<TEXT>"}``;
* ``X-Nsq-Content-Type: nsq; version=1.0`` unless the caller leaves it out.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any
from urllib.parse import parse_qs

import trio
from hypercorn.config import Config as HypercornConfig

from .http_connection import http_handler
from .tcp import serve_tcp

__all__ = [
    "JSON_TYPE",
    "NSQ_HEADER",
    "TEXT_TYPE",
    "ASGIApp",
    "HTTPError",
    "QueryArgs",
    "Receive",
    "Scope",
    "Send",
    "go_json",
    "lifespan",
    "respond",
    "respond_error",
    "send_response",
    "serve_http",
]

Scope = Mapping[str, Any]  # the ASGI interface is untyped JSON-like dicts
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

NSQ_HEADER = (b"X-Nsq-Content-Type", b"nsq; version=1.0")  # Go's canonical casing
JSON_TYPE = b"application/json; charset=utf-8"
TEXT_TYPE = b"text/plain; charset=utf-8"

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028"}
_GO_ESCAPES["\u2029"] = "\\u2029"
_GO_ESCAPE = re.compile("[<>&\u2028\u2029]")


class HTTPError(Exception):
    """An error reply: status and message text."""

    def __init__(
        self, status: int, message: str, details: Mapping[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: more keys of the JSON error body, beside ``message``
        self.details: Mapping[str, object] = details or {}


class QueryArgs:
    """The query parameters of a request (Go's ``url.ParseQuery``), parsed on first use as each
    Go handler parses them itself: a malformed query string (a ``;``, a bad ``%`` escape) is
    ``400 INVALID_REQUEST`` only for the endpoints that read parameters.

    A mixin for the daemons' request dataclasses, which declare ``raw_query`` and
    ``_query: dict[str, list[str]] | None = None``."""

    raw_query: str
    _query: dict[str, list[str]] | None

    @property
    def query(self) -> dict[str, list[str]]:
        """The query parameters; a malformed query string is ``400 INVALID_REQUEST``."""
        if self._query is None:
            raw = self.raw_query
            if ";" in raw or _BAD_ESCAPE.search(raw):
                raise HTTPError(400, "INVALID_REQUEST")
            self._query = parse_qs(raw, keep_blank_values=True)
        return self._query

    def arg(self, name: str) -> str | None:
        """The first value of parameter ``name``, or None when absent."""
        values = self.query.get(name)
        return values[0] if values else None


def go_json(value: object) -> bytes:
    """``value`` encoded as Go's ``json.Marshal`` would (compact, HTML-safe escapes)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return _GO_ESCAPE.sub(lambda m: _GO_ESCAPES[m.group()], text).encode()


async def send_response(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    *,
    nsq_header: bool = True,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Send a complete response: ``extra`` headers, then Content-Type (only with a body),
    Content-Length and the NSQ header."""
    headers = list(extra)
    if body:
        headers.append((b"Content-Type", content_type))
    headers.append((b"Content-Length", str(len(body)).encode()))
    if nsq_header:
        headers.append(NSQ_HEADER)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond(
    send: Send,
    status: int,
    reply: dict[str, Any] | bytes | None,
    *,
    nsq_header: bool = True,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Send ``reply`` in the V1 shape (dict: JSON; bytes: plain text; None: empty)."""
    if isinstance(reply, dict):
        body, content_type = go_json(reply), JSON_TYPE
    else:
        body, content_type = reply or b"", TEXT_TYPE
    await send_response(send, status, body, content_type, nsq_header=nsq_header, extra=extra)


async def respond_error(
    send: Send, error: HTTPError, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """The V1 error: ``{"message": ...}`` with the error's status."""
    await respond(send, error.status, {"message": error.message, **error.details}, extra=extra)


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the ASGI lifespan protocol (nothing to start or stop)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def serve_http(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    log: logging.Logger,
    errorlog: str,
    certfile: str = "",
    keyfile: str = "",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` with hypercorn (HTTPS when given a certificate and key);
    reports the bound port when ready. ``log`` gets the listening line, the logger named
    ``errorlog`` hypercorn's errors. Connections are accepted by :func:`pnsq._netio.tcp.serve_tcp`,
    so nothing one connection does can end the server (:mod:`pnsq._netio.http_connection`)."""
    config = HypercornConfig()
    if certfile and keyfile:
        config.certfile, config.keyfile = certfile, keyfile
        config.alpn_protocols = ["http/1.1"]  # as nsqd's HTTPS: no HTTP/2
    config.accesslog = None
    config.errorlog = logging.getLogger(errorlog)
    config.include_server_header = False
    config.keep_alive_timeout = 60.0
    scheme = "https" if certfile and keyfile else "http"
    serve = partial(serve_tcp, log=log, name=scheme.upper())
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve, http_handler(app, config), host, port)
        task_status.started(bound)
