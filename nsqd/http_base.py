"""Building blocks of nsqd's HTTP API: the request a handler sees, error replies, and nsqd's v1
responder (``nsqd/http_api``'s ``Respond`` as Go's ``net/http`` sends it).

* a ``bytes`` reply is sent as is (``text/plain; charset=utf-8``, Go's sniffing of text);
* ``None`` or an empty body: no body and no Content-Type;
* a dict or a :class:`JsonValue`: JSON with ``application/json; charset=utf-8``, encoded as
  Go's ``encoding/json`` does (``<``, ``>``, ``&``, U+2028 and U+2029 escaped);
* :class:`Raw`: a body with its own content type (``/metrics``);
* :class:`HTTPError`: the status and ``{"message": "<TEXT>"}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

Scope = Mapping[str, Any]  # the ASGI interface is untyped JSON-like dicts
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

NSQ_HEADER = (b"X-Nsq-Content-Type", b"nsq; version=1.0")  # Go's canonical casing
JSON_TYPE = b"application/json; charset=utf-8"
TEXT_TYPE = b"text/plain; charset=utf-8"

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028"}
_GO_ESCAPES["\u2029"] = "\\u2029"
_GO_ESCAPE = re.compile("[<>&\u2028\u2029]")


class HTTPError(Exception):
    """An error reply: status and nsqd's message text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class JsonValue:
    """A JSON reply that is not an object (``/config/:opt`` values: numbers, lists, bools)."""

    value: object


@dataclass(frozen=True, slots=True)
class Raw:
    """A body with its own content type and no X-NSQ-Content-Type (``/metrics``)."""

    body: bytes
    content_type: bytes


Reply = bytes | dict[str, Any] | JsonValue | Raw | None


@dataclass(slots=True)
class Request:
    """What a handler sees of a request. The query string is parsed on first use, as each nsqd
    handler parses it itself: a malformed one (a ``;``, a bad ``%`` escape) is
    ``400 INVALID_REQUEST`` only for the endpoints that read parameters."""

    method: str
    path: str
    raw_query: str
    headers: dict[bytes, bytes]
    receive: Receive
    params: dict[str, str] = field(default_factory=dict)  # path parameters (``:opt``)
    _query: dict[str, list[str]] | None = None

    @property
    def query(self) -> dict[str, list[str]]:
        """The query parameters (Go's ``url.ParseQuery``)."""
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

    async def body(self, limit: int) -> bytes:
        """Up to ``limit`` bytes of the body (read one past the limit to detect "too big")."""
        chunks = bytearray()
        more = True
        while more and len(chunks) <= limit:
            message = await self.receive()
            chunks += message.get("body", b"")
            more = bool(message.get("more_body", False))
        return bytes(chunks[: limit + 1])

    @property
    def content_length(self) -> int | None:
        """The declared Content-Length, if any."""
        raw = self.headers.get(b"content-length")
        return int(raw) if raw is not None and raw.isdigit() else None


Handler = Callable[[Request], Awaitable[Reply]]


def go_json(value: object) -> bytes:
    """``value`` encoded as Go's ``json.Marshal`` would (compact, HTML-safe escapes)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return _GO_ESCAPE.sub(lambda m: _GO_ESCAPES[m.group()], text).encode()


async def respond(
    send: Send,
    status: int,
    reply: Reply,
    *,
    nsq_header: bool = True,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Send ``reply`` with nsqd's headers."""
    content_type: bytes | None = TEXT_TYPE
    if isinstance(reply, dict):
        body, content_type = go_json(reply), JSON_TYPE
    elif isinstance(reply, JsonValue):
        body, content_type = go_json(reply.value), JSON_TYPE
    elif isinstance(reply, Raw):
        body, content_type, nsq_header = reply.body, reply.content_type, False
    else:
        body = reply or b""
    headers = list(extra)
    if body and content_type is not None:
        headers.append((b"Content-Type", content_type))
    headers.append((b"Content-Length", str(len(body)).encode()))
    if nsq_header:
        headers.append(NSQ_HEADER)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_error(
    send: Send, error: HTTPError, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """``{"message": ...}`` with the error's status."""
    await respond(send, error.status, {"message": error.message}, extra=extra)
