"""nsqd's HTTP API (v1 responder shape) as an ASGI app served by hypercorn on Trio.

Every response except ``/ping`` carries ``X-NSQ-Content-Type: nsq; version=1.0``; errors are
``{"message": "<TEXT>"}`` with nsqd's status codes. Hypercorn answers a non-HTTP byte stream
with ``400`` at once, which go-nsq relies on to detect a producer pointed at the HTTP port.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from protocol.mpub import MpubFormatError, split_mpub_body
from protocol.names import is_valid_name

from .broker import Broker
from .core.errors import BrokerError
from .storage.errors import StorageError
from .storage.record import NewRecord

log = logging.getLogger("nsqd.http")

Scope = Mapping[str, Any]  # the ASGI interface is untyped JSON-like dicts
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

NSQ_HEADER = (b"X-Nsq-Content-Type", b"nsq; version=1.0")  # Go's canonical casing
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class HTTPError(Exception):
    """An error reply: status and nsqd's message text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class HTTPSettings:
    """What the HTTP API needs of nsqd's options."""

    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout_ms: int = 3_600_000
    broadcast_address: str = ""
    tcp_port: int = 4150
    http_port: int = 4151
    max_heartbeat_interval_ns: int = 60_000_000_000
    max_output_buffer_size: int = 65_536
    max_output_buffer_timeout_ns: int = 30_000_000_000
    max_deflate_level: int = 6
    version: str = "1.3.0"


@dataclass(slots=True)
class Request:
    """What a handler sees of a request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[bytes, bytes]
    receive: Receive

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


Reply = bytes | dict[str, object] | None
Handler = Callable[[Request], Awaitable[Reply]]


class NsqdHTTP:
    """The ASGI application: a route table of ``(method, path) -> handler``."""

    def __init__(self, broker: Broker, settings: HTTPSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.routes: dict[str, dict[str, Handler]] = {
            "/ping": {"GET": self.ping, "HEAD": self.ping},
            "/info": {"GET": self.info},
            "/pub": {"POST": self.pub},
            "/mpub": {"POST": self.mpub},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        methods = self.routes.get(path)
        raw_query = scope.get("query_string", b"").decode("latin-1")
        try:
            if methods is None:
                raise HTTPError(404, "NOT_FOUND")
            handler = methods.get(scope["method"])
            if handler is None:
                raise HTTPError(405, "METHOD_NOT_ALLOWED")
            if ";" in raw_query or _BAD_ESCAPE.search(raw_query):
                raise HTTPError(400, "INVALID_REQUEST")
            request = Request(
                scope["method"],
                path,
                parse_qs(raw_query, keep_blank_values=True),
                dict(scope.get("headers", [])),
                receive,
            )
            reply = await handler(request)
        except HTTPError as exc:
            await _respond(send, exc.status, {"message": exc.message})
            return
        if path == "/ping":
            await _respond(send, 200, reply, nsq_header=False)
        else:
            await _respond(send, 200, reply)

    # ------------------------------------------------------------------ endpoints

    async def ping(self, request: Request) -> Reply:
        """``OK`` while healthy."""
        return b"OK"

    async def info(self, request: Request) -> Reply:
        """Version, addresses and limits (durations in ns, as Go's time.Duration)."""
        s = self.settings
        return {
            "version": s.version,
            "broadcast_address": s.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": s.http_port,
            "tcp_port": s.tcp_port,
            "start_time": self.broker.start_time,
            "max_heartbeat_interval": s.max_heartbeat_interval_ns,
            "max_output_buffer_size": s.max_output_buffer_size,
            "max_output_buffer_timeout": s.max_output_buffer_timeout_ns,
            "max_deflate_level": s.max_deflate_level,
        }

    def _topic(self, request: Request) -> str:
        names = request.query.get("topic")
        if not names:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(names[0]):
            raise HTTPError(400, "INVALID_TOPIC")
        return names[0]

    def _publish(self, topic: str, bodies: list[bytes], defer_ms: int = 0) -> None:
        now = time.time_ns()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        entries = [NewRecord(timestamp_ns=now, body=b, deliver_at_ns=deliver_at) for b in bodies]
        try:
            self.broker.publish(topic, entries)
        except (BrokerError, StorageError, OSError) as exc:
            log.error("PUB to %s failed: %s", topic, exc)
            raise HTTPError(503, "EXITING") from exc

    async def pub(self, request: Request) -> Reply:
        """One message; the body is checked before the topic, as nsqd does."""
        limit = self.settings.max_msg_size
        length = request.content_length
        if length is not None and length > limit:
            raise HTTPError(413, "MSG_TOO_BIG")
        body = await request.body(limit)
        if len(body) > limit:
            raise HTTPError(413, "MSG_TOO_BIG")
        if not body:
            raise HTTPError(400, "MSG_EMPTY")
        topic = self._topic(request)
        defer_ms = 0
        if "defer" in request.query:
            raw = request.query["defer"][0]
            if not re.fullmatch(r"[+-]?[0-9]+", raw):
                raise HTTPError(400, "INVALID_DEFER")
            defer_ms = int(raw)
            if not 0 <= defer_ms <= self.settings.max_req_timeout_ms:
                raise HTTPError(400, "INVALID_DEFER")
        if self.broker.durable_acks:
            self._publish(topic, [body], defer_ms)
            await self.broker.wait_durable()
        else:
            self._publish(topic, [body], defer_ms)
        return b"OK"

    async def mpub(self, request: Request) -> Reply:
        """Newline-separated messages, or with ``binary`` the TCP MPUB body format."""
        limit = self.settings.max_body_size
        length = request.content_length
        if length is not None and length > limit:
            raise HTTPError(413, "BODY_TOO_BIG")
        topic = self._topic(request)
        binary = request.query.get("binary", [None])[0] not in (None, "false", "0")
        body = await request.body(limit)
        if len(body) > limit:
            raise HTTPError(413, "BODY_TOO_BIG")
        if binary:
            try:
                bodies = split_mpub_body(body, self.settings.max_msg_size, limit)
            except MpubFormatError as exc:
                raise HTTPError(413, exc.code.removeprefix("E_")) from exc
        else:
            bodies = []
            for line in body.split(b"\n"):
                if not line:
                    continue  # nsqd silently skips empty lines
                if len(line) > self.settings.max_msg_size:
                    raise HTTPError(413, "MSG_TOO_BIG")
                bodies.append(line)
        if bodies:
            self._publish(topic, bodies)
            if self.broker.durable_acks:
                await self.broker.wait_durable()
        return b"OK"


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _respond(send: Send, status: int, reply: Reply, *, nsq_header: bool = True) -> None:
    if isinstance(reply, dict):
        body = json.dumps(reply, separators=(",", ":")).encode()
        content_type = b"application/json; charset=utf-8"
    else:
        body = reply or b""
        content_type = b"text/plain; charset=utf-8"
    headers = [(b"Content-Type", content_type), (b"Content-Length", str(len(body)).encode())]
    if nsq_header:
        headers.append(NSQ_HEADER)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_http(
    app: NsqdHTTP,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` with hypercorn; reports the bound port when ready."""
    config = HypercornConfig()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("nsqd.http.server")
    config.include_server_header = False
    config.keep_alive_timeout = 60.0
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn_serve, app, config)
        bound = int(str(binds[0]).rsplit(":", 1)[1])
        log.info("HTTP: listening on %s", binds[0])
        task_status.started(bound)
