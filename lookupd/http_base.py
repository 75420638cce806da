"""Building blocks of lookupd's HTTP API (ASGI on hypercorn): the request a handler sees, and
the two responders.

* **V1** (nsqlookupd 1.x, every endpoint of youzan's that is not negotiated): a dict is JSON with
  ``X-NSQ-Content-Type: nsq; version=1.0``; ``None`` is an empty 200; an error is its status and
  ``{"message": "<TEXT>"}``.
* **negotiated** (youzan's ``NegotiateVersion``, for ``/lookup``, ``/topics``, ``/channels``,
  ``/nodes``, ``/listlookup``, ``/info``, ``/debug``): with ``Accept: application/vnd.nsq;
  version=1.0`` exactly V1; without it, the pre-1.0 envelope ``{"status_code":200,
  "status_txt":"OK","data":…}`` and no X-NSQ-Content-Type (go-nsq reads the header to pick the
  shape), errors as HTTP 500 ``{"status_code":500,"status_txt":"<TEXT>","data":null}``.

JSON is encoded as Go's ``encoding/json`` does (compact, ``<``, ``>``, ``&`` escaped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from protocol.lookup import NSQ_CONTENT_TYPE, wants_raw, wrap, wrap_error

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

NSQ_HEADER = (b"X-Nsq-Content-Type", NSQ_CONTENT_TYPE.encode())  # Go's canonical casing
JSON_TYPE = b"application/json; charset=utf-8"
TEXT_TYPE = b"text/plain; charset=utf-8"

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028"}
_GO_ESCAPES["\u2029"] = "\\u2029"
_GO_ESCAPE = re.compile("[<>&\u2028\u2029]")


class HTTPError(Exception):
    """An error reply: status and message text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Request:
    """What a handler sees: method, path, query (Go's ``url.ParseQuery``), headers."""

    method: str
    path: str
    raw_query: str
    headers: list[tuple[bytes, bytes]]
    _query: dict[str, list[str]] | None = field(default=None)

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
        """The first value of ``name``, or None when absent."""
        values = self.query.get(name)
        return values[0] if values else None

    def header_values(self, name: bytes) -> list[str]:
        """Every value of header ``name`` (lower case)."""
        return [v.decode("latin-1") for k, v in self.headers if k.lower() == name]

    @property
    def wants_raw(self) -> bool:
        """The client asked for the unwrapped v1 shape."""
        return wants_raw(self.header_values(b"accept"))


Reply = dict[str, Any] | bytes | None
Handler = Callable[[Request], Awaitable[Reply]]


def go_json(value: object) -> bytes:
    """``value`` encoded as Go's ``json.Marshal`` would."""
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
    """Send ``reply`` (dict: JSON; bytes: plain text; None: empty)."""
    content_type: bytes | None = TEXT_TYPE
    if isinstance(reply, dict):
        body, content_type = go_json(reply), JSON_TYPE
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


async def respond_v1(send: Send, reply: Reply) -> None:
    """nsqlookupd 1.x's responder, success."""
    await respond(send, 200, reply)


async def respond_v1_error(
    send: Send, error: HTTPError, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """nsqlookupd 1.x's responder, error: ``{"message": ...}`` with the error's status."""
    await respond(send, error.status, {"message": error.message}, extra=extra)


async def respond_negotiated(send: Send, raw: bool, reply: Reply) -> None:
    """youzan's ``NegotiateVersion`` responder, success."""
    if raw or not isinstance(reply, dict):
        await respond(send, 200, reply, nsq_header=raw)
    else:
        await respond(send, 200, wrap(reply), nsq_header=False)


async def respond_negotiated_error(send: Send, raw: bool, error: HTTPError) -> None:
    """youzan's ``NegotiateVersion`` responder, error."""
    if raw:
        await respond_v1_error(send, error)
    else:
        await respond(send, 500, wrap_error(error.message), nsq_header=False)
