"""nsqd's HTTP API (v1 responder shape) as an ASGI app served by hypercorn on Trio.

Every response except ``/ping``, ``OPTIONS`` and ``/metrics`` carries ``X-NSQ-Content-Type:
nsq; version=1.0``; errors are ``{"message": "<TEXT>"}`` with nsqd's status codes. Routing
follows nsqd's router (julienschmidt/httprouter): ``405`` with an ``Allow`` header, automatic
``OPTIONS``, and a redirect for a trailing slash. This module has the publishing side (``/pub``,
``/mpub``) and ``/ping``, ``/info``; :mod:`nsqd.http.topic_admin` the rest. Hypercorn answers a
non-HTTP byte stream with ``400`` at once, which go-nsq relies on to detect a producer pointed at
the HTTP port.
"""

from __future__ import annotations

import logging
import re
import socket

import trio

from pnsq._netio.http import JSON_TYPE, lifespan, send_response, serve_http as netio_serve_http
from pnsq._netio.http_paths import fixed_path, redirect, request_path
from protocol.mpub import MpubFormatError, split_mpub_body

from ..broker import new_records
from ..observe.stats import health
from .args import topic_arg
from .base import (
    ClientGone,
    HTTPError,
    Receive,
    Reply,
    Request,
    Route,
    Scope,
    Send,
    respond,
    respond_error,
    routes_with,
)
from .consume import ConsumeAPI
from .context import HTTPContext, HTTPSettings
from .errors import NO_ERRORS, PUBLISH_ERRORS
from .idempotency import idempotency_key, publish_keyed
from .offsets import OffsetsAPI
from .partitions import PartitionsAPI
from .topic_admin import AdminAPI
from .youzan import YouzanAPI

__all__ = ["HTTPContext", "HTTPError", "HTTPSettings", "NsqdHTTP", "Request", "serve_http"]

log = logging.getLogger("nsqd.http")


class PlainTextError(HTTPError):
    """An error sent as plain text without the NSQ header (``/ping``'s ``NOK - <err>``)."""


class NsqdHTTP:
    """The ASGI application: a route table of ``path -> {method: handler}``.

    The endpoint groups get ``context`` (shared by nsqd's HTTP and HTTPS listeners), never
    this app.
    """

    def __init__(self, context: HTTPContext) -> None:
        self.context = context
        self.broker = context.broker
        self._busy = 0  # requests being handled or answered (drain waits for none)
        self._idle: trio.Event | None = None  # set when _busy drops to 0 during a drain
        #: --tls-required=true: the plain-HTTP listener refuses everything (nsqd's ServeHTTP);
        #: set on that listener's app only, with the HTTPS port to point clients at
        self.tls_required_https_port: int | None = None
        admin = AdminAPI(context)
        self.routes: dict[str, Route] = {
            **routes_with(
                NO_ERRORS,
                {"/ping": {"GET": self.ping, "HEAD": self.ping}, "/info": {"GET": self.info}},
            ),
            **routes_with(
                PUBLISH_ERRORS, {"/pub": {"POST": self.pub}, "/mpub": {"POST": self.mpub}}
            ),
            **admin.routes(),
            **PartitionsAPI(context).routes(),
            **OffsetsAPI(context).routes(),
            **ConsumeAPI(context).routes(),
            **YouzanAPI(context).routes(),
        }
        self.config_route = admin.config_route()
        self._lower_paths = {path.lower(): path for path in self.routes}

    @property
    def settings(self) -> HTTPSettings:
        """The settings every listener shares (the bound ports once known)."""
        return self.context.settings

    def route(self, path: str) -> tuple[Route | None, dict[str, str]]:
        """The route of ``path``, and its path parameters."""
        route = self.routes.get(path)
        if route is not None:
            return route, {}
        opt = path.removeprefix("/config/")
        if opt != path and opt and "/" not in opt:
            return self.config_route, {"opt": opt}
        return None, {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if self.tls_required_https_port is not None:
            body = f'{{"message": "TLS_REQUIRED", "https_port": {self.tls_required_https_port}}}'
            await send_response(send, 403, body.encode(), JSON_TYPE)  # nsqd's bytes and type
            return
        path, method = request_path(scope), scope["method"]
        raw_query = scope.get("query_string", b"").decode("latin-1")
        route, params = self.route(path)
        if route is None:
            fixed = fixed_path(path, method, self._spelled)
            if fixed is None:
                await respond_error(send, HTTPError(404, "NOT_FOUND"))
            else:
                await redirect(send, method, fixed + (f"?{raw_query}" if raw_query else ""))
            return
        methods, errors = route.methods, route.errors
        allow = ", ".join(sorted({*methods, "OPTIONS"})).encode()
        if method == "OPTIONS":
            await respond(send, 200, None, nsq_header=False, extra=[(b"Allow", allow)])
            return
        handler = methods.get(method)
        if handler is None:
            error = HTTPError(405, "METHOD_NOT_ALLOWED")
            await respond_error(send, error, extra=[(b"Allow", allow)])
            return
        client = scope.get("client")
        request = Request(
            method,
            path,
            raw_query,
            dict(scope.get("headers", [])),
            receive,
            params,
            remote_ip=str(client[0]) if client else "",
            tls=scope.get("scheme") == "https",
        )
        self._busy += 1
        try:
            try:
                reply = await handler(request)
            except PlainTextError as exc:
                await respond(send, exc.status, exc.message.encode(), nsq_header=False)
                return
            except HTTPError as exc:
                await respond_error(send, exc)
                return
            except ClientGone:
                return  # nobody to answer, and nothing was done
            except errors.handled as exc:  # the one translation of domain errors
                await respond_error(send, errors.error_for(exc, f"{method} {path}"))
                return
            await respond(send, 200, reply, nsq_header=path != "/ping")
        finally:
            self._busy -= 1
            if not self._busy and self._idle is not None:
                self._idle.set()

    async def drain(self) -> None:
        """Shutdown begins: parked ``/consume`` long polls answer at once with nothing (new
        ones get ``503 EXITING``); return once every request in progress has its answer sent
        (the caller bounds the wait)."""
        self.context.puller.stop()
        while self._busy:
            self._idle = trio.Event()
            await self._idle.wait()

    def _spelled(self, path: str, method: str) -> str | None:
        """The route ``path`` names in any case, as the route spells it, if it takes
        ``method`` (:func:`~pnsq._netio.http_paths.fixed_path`)."""
        lower = path.lower()
        spelled = self._lower_paths.get(lower)
        if spelled is None and lower.startswith("/config/"):
            spelled = "/config/" + path[len("/config/") :]  # the option as it was written
        route, _ = self.route(spelled) if spelled is not None else (None, {})
        return spelled if route is not None and method in route.methods else None

    # ------------------------------------------------------------------ endpoints

    async def ping(self, request: Request) -> Reply:
        """``OK`` while healthy, else ``500 NOK - <error>`` (a disk error), as plain text."""
        text = health(self.broker)
        if text != "OK":
            raise PlainTextError(500, text)
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

    async def _publish(
        self, request: Request, topic: str, bodies: list[bytes], defer_ms: int = 0
    ) -> None:
        """Publish through the one publish path (youzan's optional ``partition`` picks one; a
        stock publish for a topic led elsewhere goes to its leader; with an ``Idempotency-Key``
        header, once per key: :mod:`.idempotency`). Refusals are answered by
        :data:`~nsqd.http.errors.PUBLISH_ERRORS`: youzan's replies for partition errors and
        nsqd's ``503 EXITING`` for everything else."""
        partition = _partition_arg(request)
        key = idempotency_key(request)
        if key is not None:  # stored once for the key (:mod:`.idempotency`)
            await publish_keyed(self.context, request, topic, partition, bodies, key, defer_ms)
            return
        now = self.broker.clock.now_ns()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        batch = new_records(now, bodies, deliver_at)
        await self.context.publishing.publish_stock(topic, batch, partition, defer_ms=defer_ms)

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
        topic = topic_arg(request)
        defer_ms = 0
        if "defer" in request.query:
            raw = request.query["defer"][0]
            if not re.fullmatch(r"[+-]?[0-9]+", raw):
                raise HTTPError(400, "INVALID_DEFER")
            defer_ms = int(raw)
            if not 0 <= defer_ms <= self.settings.max_req_timeout_ms:
                raise HTTPError(400, "INVALID_DEFER")
        await self._publish(request, topic, [body], defer_ms)
        return b"OK"

    async def mpub(self, request: Request) -> Reply:
        """Newline-separated messages, or with ``binary`` the TCP MPUB body format."""
        limit = self.settings.max_body_size
        length = request.content_length
        if length is not None and length > limit:
            raise HTTPError(413, "BODY_TOO_BIG")
        topic = topic_arg(request)
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
            await self._publish(request, topic, bodies)
        return b"OK"


async def serve_http(
    app: NsqdHTTP,
    host: str,
    port: int,
    *,
    certfile: str = "",
    keyfile: str = "",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` with hypercorn (HTTPS when given a certificate and key);
    reports the bound port when ready."""
    await netio_serve_http(
        app,
        host,
        port,
        log=log,
        errorlog="nsqd.http.server",
        certfile=certfile,
        keyfile=keyfile,
        task_status=task_status,
    )


def _partition_arg(request: Request) -> int | None:
    """youzan's ``partition`` query parameter (absent: nsqd picks one)."""
    raw = request.query.get("partition", [None])[0]
    if raw is None or raw == "":
        return None
    if not re.fullmatch(r"[0-9]+", raw):
        raise HTTPError(400, "E_BAD_PARTITION")
    return int(raw)
