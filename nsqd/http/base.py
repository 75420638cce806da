"""Building blocks of nsqd's HTTP API: the request a handler sees, error replies, and nsqd's v1
responder (``nsqd/http_api``'s ``Respond`` as Go's ``net/http`` sends it).

* a ``bytes`` reply is sent as is (``text/plain; charset=utf-8``, Go's sniffing of text);
* ``None`` or an empty body: no body and no Content-Type;
* a dict or a :class:`JsonValue`: JSON with ``application/json; charset=utf-8``, encoded as
  Go's ``encoding/json`` does (``<``, ``>``, ``&``, U+2028 and U+2029 escaped);
* :class:`EncodedJson`: JSON already encoded as :func:`go_json` would, sent as a dict is;
* :class:`Raw`: a body with its own content type (``/metrics``);
* :class:`HTTPError`: the status and ``{"message": "<TEXT>"}`` (domain errors become one
  through the :class:`~nsqd.http.errors.ErrorTable` of the endpoint's :class:`Route`);
* :class:`ClientGone`: the client went away before its request was complete: no reply, and
  nothing done (a body cut short is never published).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from pnsq._netio.http import (
    JSON_TYPE,
    HTTPError,
    QueryArgs,
    Receive,
    Scope,
    Send,
    go_json,
    respond as respond_v1,
    respond_error,
    send_response,
)

from .errors import ErrorTable

__all__ = [
    "ClientGone",
    "EncodedJson",
    "HTTPError",
    "Handler",
    "JsonValue",
    "Raw",
    "Receive",
    "Reply",
    "Request",
    "Route",
    "Scope",
    "Send",
    "go_json",
    "respond",
    "respond_error",
    "routes_with",
]


class ClientGone(Exception):
    """The connection ended before the request was answered: its body cut short, or a long
    poll's client gone while it waited."""


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JsonValue:
    """A JSON reply that is not an object (``/config/:opt`` values: numbers, lists, bools)."""

    value: object


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A JSON reply already encoded as :func:`go_json` encodes (``/consume``'s batches, built
    without a dict per message)."""

    body: bytes


@dataclass(frozen=True, slots=True)
class Raw:
    """A body with its own content type and no X-NSQ-Content-Type (``/metrics``)."""

    body: bytes
    content_type: bytes


Reply = bytes | dict[str, Any] | JsonValue | EncodedJson | Raw | None


@dataclass(slots=True)
class Request(QueryArgs):
    """What a handler sees of a request. The query string is parsed on first use, as each nsqd
    handler parses it itself: a malformed one (a ``;``, a bad ``%`` escape) is
    ``400 INVALID_REQUEST`` only for the endpoints that read parameters."""

    method: str
    path: str
    raw_query: str
    headers: dict[bytes, bytes]
    receive: Receive
    params: dict[str, str] = field(default_factory=dict)  # path parameters (``:opt``)
    remote_ip: str = ""  # the client's address (for the auth server)
    tls: bool = False  # it came over HTTPS
    _query: dict[str, list[str]] | None = None

    async def body(self, limit: int) -> bytes:
        """Up to ``limit`` bytes of the body (read one past the limit to detect "too big").

        Raises :class:`ClientGone` if the connection ends first: a partial body is never used.
        """
        chunks = bytearray()
        more = True
        while more and len(chunks) <= limit:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunks += message.get("body", b"")
            more = bool(message.get("more_body", False))
        return bytes(chunks[: limit + 1])

    async def while_connected(self, wait: Callable[[], Awaitable[T]]) -> T:
        """``wait()``'s result, or :class:`ClientGone` as soon as the client disconnects
        meanwhile: a long poll whose client left must not hold its connection, nor take a batch
        nobody will read. ``wait`` must be safe to cancel. The request's body is read and
        dropped."""
        done: list[T] = []
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                while (await self.receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            done.append(await wait())
            nursery.cancel_scope.cancel()
        if not done:
            raise ClientGone
        return done[0]

    @property
    def content_length(self) -> int | None:
        """The declared Content-Length, if any."""
        raw = self.headers.get(b"content-length")
        return int(raw) if raw is not None and raw.isdigit() else None


Handler = Callable[[Request], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Route:
    """A path's handlers by method, and the table its domain errors are answered by."""

    methods: Mapping[str, Handler]
    errors: ErrorTable


def routes_with(
    errors: ErrorTable, routes: Mapping[str, Mapping[str, Handler]]
) -> dict[str, Route]:
    """``path -> Route`` for ``routes`` (``path -> {method: handler}``), all with ``errors``."""
    return {path: Route(methods, errors) for path, methods in routes.items()}


async def respond(
    send: Send,
    status: int,
    reply: Reply,
    *,
    nsq_header: bool = True,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Send ``reply`` with nsqd's headers."""
    if isinstance(reply, JsonValue):
        body = go_json(reply.value)
        await send_response(send, status, body, JSON_TYPE, nsq_header=nsq_header, extra=extra)
    elif isinstance(reply, EncodedJson):
        await send_response(send, status, reply.body, JSON_TYPE, nsq_header=nsq_header, extra=extra)
    elif isinstance(reply, Raw):
        await send_response(
            send, status, reply.body, reply.content_type, nsq_header=False, extra=extra
        )
    else:
        await respond_v1(send, status, reply, nsq_header=nsq_header, extra=extra)
