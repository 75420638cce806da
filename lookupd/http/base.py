"""Building blocks of lookupd's HTTP API (ASGI on hypercorn): the request a handler sees, and
nsqlookupd 1.x's V1 responder, used by every endpoint whatever the request's ``Accept`` header
(as nsqlookupd 1.3.0): a dict is JSON with ``X-NSQ-Content-Type: nsq; version=1.0``; ``None`` is
an empty 200; an error is its status and ``{"message": "<TEXT>"}``.

JSON is encoded as Go's ``encoding/json`` does (compact, ``<``, ``>``, ``&`` escaped).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pnsq._netio.http import (
    HTTPError,
    QueryArgs,
    Receive,
    Scope,
    Send,
    go_json,
    respond,
    respond_error as respond_v1_error,
)

__all__ = [
    "HTTPError",
    "Handler",
    "Receive",
    "Reply",
    "Request",
    "Scope",
    "Send",
    "go_json",
    "respond",
    "respond_v1",
    "respond_v1_error",
]


@dataclass(slots=True)
class Request(QueryArgs):
    """What a handler sees: method, path, query (Go's ``url.ParseQuery``, parsed on first use: a
    malformed query string is ``400 INVALID_REQUEST``), headers."""

    method: str
    path: str
    raw_query: str
    headers: list[tuple[bytes, bytes]]
    _query: dict[str, list[str]] | None = field(default=None)
    body: bytes = b""  # read only for routes that take a body

    def header_values(self, name: bytes) -> list[str]:
        """Every value of header ``name`` (lower case)."""
        return [v.decode("latin-1") for k, v in self.headers if k.lower() == name]


Reply = dict[str, Any] | bytes | None
Handler = Callable[[Request], Awaitable[Reply]]


async def respond_v1(send: Send, reply: Reply) -> None:
    """nsqlookupd 1.x's responder, success."""
    await respond(send, 200, reply)


_ATOI = re.compile(r"[+-]?[0-9]+")
_INT64 = 1 << 63


def go_atoi(text: str) -> int:
    """Go's ``strconv.Atoi``; the error is Go's text (youzan returns it for ``retention``)."""
    if not _ATOI.fullmatch(text):
        raise HTTPError(400, f'strconv.Atoi: parsing "{text}": invalid syntax')
    value = int(text)
    if not -_INT64 <= value < _INT64:
        raise HTTPError(400, f'strconv.Atoi: parsing "{text}": value out of range')
    return value
