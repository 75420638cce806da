"""lookupd's HTTP API: nsqlookupd 1.3.0's endpoints with youzan's additions, as an ASGI app served
by hypercorn on Trio.

Every endpoint answers in nsqlookupd 1.x's V1 shape (bare JSON, errors ``{"message": …}``)
whatever the ``Accept`` header, as nsqlookupd 1.3.0; ``/ping`` is plain ``OK``. pnsq's own
extension, ``GET /pnsq/assignments?node=<broadcast_address>:<tcp_port>``, tells an nsqd which
topics (and how many partitions) it must hold. Unknown paths are ``404 NOT_FOUND``, a wrong
method ``405 METHOD_NOT_ALLOWED`` with ``Allow``.

This module routes every request (and forwards a follower's writes to the leader) and answers
the read endpoints; the topic/channel admin endpoints are :mod:`lookupd.http.admin`'s, the ones
pnsq's nodes use :mod:`lookupd.http.pnsq`'s.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import trio

from pnsq._netio.http import TEXT_TYPE, lifespan, send_response, serve_http as netio_serve_http
from pnsq._netio.http_paths import fixed_path, redirect, request_path
from protocol.cluster_auth import carries_credential, http_credential
from protocol.lookup import ASSIGNMENTS_PATH

from ..core import views
from ..ha.leadership import HighAvailability
from ..state.cluster import Cluster
from .admin import AdminEndpoints
from .base import (
    Handler,
    HTTPError,
    Receive,
    Reply,
    Request,
    Scope,
    Send,
    respond,
    respond_v1,
    respond_v1_error,
)
from .cluster_admin import ClusterEndpoints
from .forward import ETCD_UNAVAILABLE, FORWARDED_HEADER, NOT_LEADER, WRITE_PATHS, Forwarder
from .pnsq import LEAVING_PATH, MAX_BODY, PROGRESS_PATH, PnsqEndpoints, read_body

log = logging.getLogger("nsqlookupd.http")

_ATOI = re.compile(r"[+-]?[0-9]+")
#: the answer to a cluster-control request without the credential (docs/security.md)
AUTH_REQUIRED = "CLUSTER_AUTH_REQUIRED"


@dataclass(frozen=True, slots=True)
class Route:
    """A handler (answered by the V1 responder)."""

    handler: Handler
    body: bool = False  # the handler reads a JSON body (pnsq's node-to-lookupd endpoints)
    #: it moves leadership, membership, ISR or placement (or reveals placement): with a cluster
    #: secret, only a request carrying the credential reaches it; NSQ's own endpoints stay
    #: open so that nsqadmin and the NSQ tools keep working
    control: bool = False


class LookupHTTP:
    """The ASGI application. ``self_address()`` gives ``(broadcast_address, tcp_port,
    http_port)`` for ``/listlookup``. With ``ha`` (etcd), a write reaching a follower is
    forwarded to the leader (:mod:`lookupd.http.forward`). With ``secret`` (the cluster
    credential) the cluster-control routes answer ``401 CLUSTER_AUTH_REQUIRED`` to a request
    without ``X-Pnsq-Cluster-Auth: http_credential(secret)``."""

    def __init__(
        self,
        cluster: Cluster,
        version: str,
        self_address: Callable[[], tuple[str, int, int]],
        metrics: Callable[[], bytes] | None = None,
        *,
        ha: HighAvailability | None = None,
        secret: bytes = b"",
        auto_balance: bool = True,
    ) -> None:
        self.cluster = cluster
        self._credential = http_credential(secret).encode() if secret else None
        self.ha = ha
        self.forwarder = Forwarder(secret) if ha is not None else None
        self.version = version
        self.self_address = self_address
        #: the endpoints pnsq's nodes use (assignments, progress, leaving) and /metrics
        self.pnsq = PnsqEndpoints(cluster, metrics)
        #: topic/channel create, change, delete and tombstone
        self.admin = AdminEndpoints(cluster)
        self.cluster_admin = ClusterEndpoints(cluster, auto_balance)
        get = {"GET"}
        self.routes: dict[str, tuple[set[str], Route]] = {
            "/ping": (get, Route(self.ping)),
            "/metrics": (get, Route(self.pnsq.metrics)),
            "/info": (get, Route(self.info)),
            "/debug": (get, Route(self.debug)),
            "/lookup": (get, Route(self.lookup)),
            "/topics": (get, Route(self.topics)),
            "/channels": (get, Route(self.channels)),
            "/nodes": (get, Route(self.nodes)),
            "/listlookup": (get, Route(self.listlookup)),
            "/topic/create": ({"POST", "PUT"}, Route(self.admin.topic_create)),
            "/topic/delete": ({"POST"}, Route(self.admin.topic_delete)),
            "/channel/create": ({"POST"}, Route(self.admin.channel_create)),
            "/channel/delete": ({"POST"}, Route(self.admin.channel_delete)),
            "/topic/tombstone": ({"POST"}, Route(self.admin.topic_tombstone)),
            "/topic/meta/update": ({"POST"}, Route(self.admin.topic_meta_update, control=True)),
            "/topic/partition/expand": (
                {"POST"},
                Route(self.admin.topic_partition_expand, control=True),
            ),
            "/topic/partition/move": (
                {"POST"},
                Route(self.admin.topic_partition_move, control=True),
            ),
            "/topic/partition/moves": (
                get,
                Route(self.admin.topic_partition_moves, control=True),
            ),
            "/cluster/node/remove": (
                {"POST"},
                Route(self.cluster_admin.node_remove, control=True),
            ),
            "/cluster/stats": (get, Route(self.cluster_admin.stats, control=True)),
            "/cluster/balance": (
                {"GET", "POST"},
                Route(self.cluster_admin.balance, control=True),
            ),
            "/cluster/upgrade/begin": (
                {"POST"},
                Route(self.cluster_admin.upgrade_begin, control=True),
            ),
            "/cluster/upgrade/done": (
                {"POST"},
                Route(self.cluster_admin.upgrade_done, control=True),
            ),
            ASSIGNMENTS_PATH: (get, Route(self.pnsq.assignments, control=True)),
            PROGRESS_PATH: ({"POST"}, Route(self.pnsq.progress, body=True, control=True)),
            LEAVING_PATH: ({"POST"}, Route(self.pnsq.leaving, control=True)),
        }
        self._lower_paths = {path.lower(): path for path in self.routes}

    def _spelled(self, path: str, method: str) -> str | None:
        """The route ``path`` names in any case, as the route spells it, if it takes
        ``method`` (:func:`~pnsq._netio.http_paths.fixed_path`)."""
        spelled = self._lower_paths.get(path.lower())
        return spelled if spelled is not None and method in self.routes[spelled][0] else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = request_path(scope), scope["method"]
        raw_query = scope.get("query_string", b"").decode("latin-1")
        entry = self.routes.get(path)
        if entry is None:
            fixed = fixed_path(path, method, self._spelled)
            if fixed is None:
                await respond_v1_error(send, HTTPError(404, "NOT_FOUND"))
            else:
                await redirect(send, method, fixed + (f"?{raw_query}" if raw_query else ""))
            return
        methods, route = entry
        allow = ", ".join(sorted({*methods, "OPTIONS"})).encode()
        if method == "OPTIONS":  # httprouter answers OPTIONS itself
            await respond(send, 200, None, nsq_header=False, extra=[(b"Allow", allow)])
            return
        if method not in methods:
            error = HTTPError(405, "METHOD_NOT_ALLOWED")
            await respond_v1_error(send, error, extra=[(b"Allow", allow)])
            return
        request = Request(method, path, raw_query, list(scope.get("headers", [])))
        if route.control and not self._authorized(request):
            await respond_v1_error(send, HTTPError(401, AUTH_REQUIRED))
            return
        if route.body or (self.ha is not None and path in WRITE_PATHS):
            request.body = await read_body(receive, MAX_BODY)
        try:
            if self.ha is not None and path in WRITE_PATHS and not self.cluster.leading:
                await self._forward(send, request)
                return
            reply = await route.handler(request)
        except HTTPError as exc:
            await respond_v1_error(send, exc)
            return
        if path in ("/ping", "/metrics"):  # plain text
            await respond(send, 200, reply, nsq_header=False)
        else:
            await respond_v1(send, reply)

    def _authorized(self, request: Request) -> bool:
        """Whether ``request`` may reach a cluster-control route: always without a secret;
        with one, when it carries the credential (compared in constant time, so timing tells
        a stranger nothing of it)."""
        return self._credential is None or carries_credential(request.headers, self._credential)

    async def _forward(self, send: Send, request: Request) -> None:
        """HA: a write on a follower goes to the leader (see :mod:`lookupd.http.forward`)."""
        assert self.ha is not None
        assert self.forwarder is not None
        leader = self.ha.leader_http_address()
        if not self.ha.etcd_healthy():
            raise HTTPError(503, ETCD_UNAVAILABLE, {"detail": "etcd unreachable: no leader"})
        if leader is None:  # none elected yet (or this lookupd's leadership just lapsed)
            raise HTTPError(503, ETCD_UNAVAILABLE, {"detail": "no leader lookupd in etcd now"})
        # leadership moved while forwarded; with a secret only a lookupd's own forward (one
        # carrying the credential) says so: a stranger's header changes nothing
        if request.header_values(FORWARDED_HEADER) and self._authorized(request):
            listed = self.ha.leader.listed() if self.ha.leader is not None else {}
            raise HTTPError(400, NOT_LEADER, {"leader": listed})
        reply = await self.forwarder.forward(leader, request)
        await send_response(send, reply.status, reply.body, reply.content_type or TEXT_TYPE)

    # ------------------------------------------------------------------ read endpoints

    def _now(self) -> float:
        return self.cluster.clock()

    async def ping(self, request: Request) -> Reply:
        """``OK``."""
        return b"OK"

    async def info(self, request: Request) -> Reply:
        """The nsqlookupd version pnsq speaks."""
        return {"version": self.version}

    async def debug(self, request: Request) -> Reply:
        """Every registration key and its producers."""
        return views.debug(self.cluster.registry)

    async def lookup(self, request: Request) -> Reply:
        """The producers (and youzan's partitions, meta) of a topic."""
        topic = request.arg("topic")
        if topic is None:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        access = request.arg("access") or None
        try:
            return views.lookup(
                self.cluster.registry,
                self.cluster.placements,
                topic,
                self._now(),
                self.cluster.timeouts,
                access=access,
                partition=request.arg("partition"),
                metainfo=bool(request.arg("metainfo")),
                deleted=self.cluster.deleted,
            )
        except views.ViewError as exc:
            raise HTTPError(exc.status, exc.message) from None

    async def topics(self, request: Request) -> Reply:
        """Every topic key."""
        meta_info = request.arg("metaInfo") == "true"
        cluster = self.cluster
        return views.topics(
            cluster.registry, cluster.placements, cluster.deleted, meta_info=meta_info
        )

    async def channels(self, request: Request) -> Reply:
        """A topic's channel keys (``[]`` for an unknown topic)."""
        topic = request.arg("topic")
        if topic is None:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        partition = request.arg("partition")
        pid = None
        if partition not in (None, "", "*"):
            pid = int(partition) if _ATOI.fullmatch(partition) else -1
        return {"channels": self.cluster.registry.channel_names(topic, pid)}

    async def nodes(self, request: Request) -> Reply:
        """Every active nsqd."""
        return views.nodes(self.cluster.registry, self._now(), self.cluster.timeouts)

    async def listlookup(self, request: Request) -> Reply:
        """youzan's list of lookupds and their leader (without HA: this one)."""
        if self.ha is not None:
            return self.ha.listlookup()
        return views.listlookup(*self.self_address())


async def serve_http(
    app: LookupHTTP,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` with hypercorn; reports the bound port when ready."""
    await netio_serve_http(
        app, host, port, log=log, errorlog="nsqlookupd.http.server", task_status=task_status
    )


__all__ = ["AUTH_REQUIRED", "HTTPError", "LookupHTTP", "serve_http"]
