"""lookupd's HTTP API: nsqlookupd 1.3.0's endpoints with youzan's additions, as an ASGI app served
by hypercorn on Trio.

Every endpoint answers in nsqlookupd 1.x's V1 shape (bare JSON, errors ``{"message": …}``)
whatever the ``Accept`` header, as nsqlookupd 1.3.0; ``/ping`` is plain ``OK``. pnsq's own
extension, ``GET /pnsq/assignments?node=<broadcast_address>:<tcp_port>``, tells an nsqd which
topics (and how many partitions) it must hold. Unknown paths are ``404 NOT_FOUND``, a wrong
method ``405 METHOD_NOT_ALLOWED`` with ``Allow``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import trio

from pnsq._netio.http import TEXT_TYPE, lifespan, send_response, serve_http as netio_serve_http
from protocol.lookup import ASSIGNMENTS_PATH
from protocol.names import is_valid_channel_name, is_valid_topic_name

from . import views
from .cluster import Cluster, PlacementError, StoreError, TopicMeta, UnavailableError
from .forward import ETCD_UNAVAILABLE, FORWARDED_HEADER, NOT_LEADER, WRITE_PATHS, Forwarder
from .ha import HighAvailability
from .http_base import (
    Handler,
    HTTPError,
    Receive,
    Reply,
    Request,
    Scope,
    Send,
    go_atoi,
    respond,
    respond_v1,
    respond_v1_error,
)
from .http_pnsq import LEAVING_PATH, MAX_BODY, PROGRESS_PATH, PnsqEndpoints, read_body
from .placement import MAX_PARTITION_NUM, MAX_REPLICATOR

log = logging.getLogger("nsqlookupd.http")

_ATOI = re.compile(r"[+-]?[0-9]+")
#: the longest ``/topic/create`` waits for the placed nodes to register the new partitions, so a
#: client's first ``/lookup`` after it already names them (go-nsq looks up again only 60 s later)
CREATE_REGISTER_WAIT = 2.0
_INT64 = 1 << 63


@dataclass(frozen=True, slots=True)
class Route:
    """A handler (answered by the V1 responder)."""

    handler: Handler
    body: bool = False  # the handler reads a JSON body (pnsq's node-to-lookupd endpoints)


class LookupHTTP:
    """The ASGI application. ``self_address()`` gives ``(broadcast_address, tcp_port,
    http_port)`` for ``/listlookup``. With ``ha`` (etcd), a write reaching a follower is
    forwarded to the leader (:mod:`lookupd.forward`)."""

    def __init__(
        self,
        cluster: Cluster,
        version: str,
        self_address: Callable[[], tuple[str, int, int]],
        metrics: Callable[[], bytes] | None = None,
        *,
        ha: HighAvailability | None = None,
    ) -> None:
        self.cluster = cluster
        self.ha = ha
        self.forwarder = Forwarder() if ha is not None else None
        self.version = version
        self.self_address = self_address
        #: the endpoints pnsq's nodes use (assignments, progress, leaving) and /metrics
        self.pnsq = PnsqEndpoints(cluster, metrics)
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
            "/topic/create": ({"POST", "PUT"}, Route(self.topic_create)),
            "/topic/delete": ({"POST"}, Route(self.topic_delete)),
            "/channel/create": ({"POST"}, Route(self.channel_create)),
            "/channel/delete": ({"POST"}, Route(self.channel_delete)),
            "/topic/tombstone": ({"POST"}, Route(self.topic_tombstone)),
            "/topic/meta/update": ({"POST"}, Route(self.topic_meta_update)),
            "/topic/partition/expand": ({"POST"}, Route(self.topic_partition_expand)),
            ASSIGNMENTS_PATH: (get, Route(self.pnsq.assignments)),
            PROGRESS_PATH: ({"POST"}, Route(self.pnsq.progress, body=True)),
            LEAVING_PATH: ({"POST"}, Route(self.pnsq.leaving)),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        raw_query = scope.get("query_string", b"").decode("latin-1")
        entry = self.routes.get(path)
        if entry is None:
            await respond_v1_error(send, HTTPError(404, "NOT_FOUND"))
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

    async def _forward(self, send: Send, request: Request) -> None:
        """HA: a write on a follower goes to the leader (see :mod:`lookupd.forward`)."""
        assert self.ha is not None
        assert self.forwarder is not None
        leader = self.ha.leader_http_address()
        if not self.ha.etcd_healthy():
            raise HTTPError(503, ETCD_UNAVAILABLE, {"detail": "etcd unreachable: no leader"})
        if leader is None:  # none elected yet (or this lookupd's leadership just lapsed)
            raise HTTPError(503, ETCD_UNAVAILABLE, {"detail": "no leader lookupd in etcd now"})
        if request.header_values(FORWARDED_HEADER):  # leadership moved while forwarded
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
            )
        except views.ViewError as exc:
            raise HTTPError(exc.status, exc.message) from None

    async def topics(self, request: Request) -> Reply:
        """Every topic key."""
        meta_info = request.arg("metaInfo") == "true"
        return views.topics(self.cluster.registry, self.cluster.placements, meta_info=meta_info)

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

    # ------------------------------------------------------------------ admin endpoints

    async def topic_create(self, request: Request) -> Reply:
        """Create (and place) a topic: nsqlookupd's params plus youzan's."""
        topic = _topic_arg(request)  # then youzan's order of checks
        partition_num = _bounded(request, "partition_num", 1, 1, MAX_PARTITION_NUM)
        replica = _bounded(request, "replicator", 1, 1, MAX_REPLICATOR, "REPLICATOR")
        _bounded(request, "suggestload", 0, 0, 10000, "LOAD_FACTOR")
        sync_every = _int_arg(request, "syncdisk", "INVALID_ARG_TOPIC_SYNC_DISK")
        min_isr = _bounded(request, "min_isr", 1, 1, replica, "MIN_ISR")
        meta = TopicMeta(
            partition_num=partition_num,
            replica=replica,
            extend_support=request.arg("extend") == "true",
            ordered=request.arg("orderedmulti") == "true",
            multi_part=request.arg("multipart") == "true",
            disable_channel_auto_create=request.arg("disable_channel_auto_create") == "true",
            retention_days=go_atoi(request.arg("retention") or "0"),
            sync_every=sync_every,
            min_isr=min_isr,
            unclean=request.arg("unclean") == "true",
        )
        try:
            await self.cluster.create_topic(topic, meta, request.arg("prefer") or None)
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise _store_error(topic, exc) from None
        with trio.move_on_after(CREATE_REGISTER_WAIT):
            # the registry is pure state without change notifications: a short bounded poll
            while not self._registered(topic, partition_num):  # noqa: ASYNC110
                await trio.sleep(0.01)
        return None

    def _registered(self, topic: str, partition_num: int) -> bool:
        """Every partition of ``topic`` is registered by a live producer."""
        timeouts = self.cluster.timeouts
        producers = self.cluster.registry.producers(
            topic, self._now(), timeouts.inactive, timeouts.tombstone
        )
        held = {pid for producer in producers for pid in producer.partitions}
        return held >= set(range(partition_num))

    async def topic_meta_update(self, request: Request) -> Reply:
        """youzan's ``/topic/meta/update``: ``syncdisk``, ``retention``, ``upgradeext=true``,
        ``disable_channel_auto_create``; the nodes apply it without a restart. Changing
        ``replicator`` needs replica moves, which this release does not do."""
        topic = _topic_arg(request)
        if topic not in self.cluster.placements:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        replicator = request.arg("replicator")
        if replicator not in (None, "", "-1"):
            current = self.cluster.placements[topic].meta.replica
            if go_atoi(replicator) != current:
                raise HTTPError(400, "REPLICATOR_CHANGE_NOT_SUPPORTED")
        sync = request.arg("syncdisk")
        retention = request.arg("retention")
        disable = request.arg("disable_channel_auto_create")
        replica = self.cluster.placements[topic].meta.replica
        min_isr = request.arg("min_isr")
        try:
            await self.cluster.update_meta(
                topic,
                sync_every=None
                if sync in (None, "")
                else _int_arg(request, "syncdisk", "INVALID_ARG_TOPIC_SYNC_DISK"),
                retention_days=None if retention in (None, "") else go_atoi(retention),
                extend_support=True if request.arg("upgradeext") == "true" else None,
                disable_channel_auto_create=None if disable is None else disable == "true",
                min_isr=None
                if min_isr in (None, "")
                else _bounded(request, "min_isr", 1, 1, replica, "MIN_ISR"),
                unclean=None
                if request.arg("unclean") is None
                else request.arg("unclean") == "true",
            )
        except StoreError as exc:
            raise _store_error(topic, exc) from None
        return None

    async def topic_partition_expand(self, request: Request) -> Reply:
        """youzan's ``/topic/partition/expand?topic=&partition_num=``: new partitions are placed
        on the live nodes; the existing ones stay."""
        topic = _topic_arg(request)
        if topic not in self.cluster.placements:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        count = _bounded(request, "partition_num", 1, 1, MAX_PARTITION_NUM)
        try:
            await self.cluster.expand_topic(topic, count)
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise _store_error(topic, exc) from None
        return None

    async def topic_delete(self, request: Request) -> Reply:
        """Delete the topic's keys and placement (youzan: ``partition`` must be ``**``)."""
        topic = request.arg("topic")
        if topic is None:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        if request.arg("partition") not in (None, "**"):
            raise HTTPError(400, "REMOVE_SINGLE_PARTITION_NOT_ALLOWED")
        try:
            await self.cluster.delete_topic(topic)
        except StoreError as exc:
            raise _store_error(topic, exc) from None
        log.info("DB: removed topic(%s)", topic)
        return None

    async def channel_create(self, request: Request) -> Reply:
        """Add the channel key (and the topic key)."""
        topic, channel = _topic_channel_args(request)
        self.cluster.registry.add_channel(topic, channel)
        return None

    async def channel_delete(self, request: Request) -> Reply:
        """Delete a channel key; 404 if there is none."""
        topic, channel = _topic_channel_args(request)
        if not self.cluster.registry.delete_channel(topic, channel):
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        return None

    async def topic_tombstone(self, request: Request) -> Reply:
        """Hide ``node`` (``broadcast_address:http_port``) from the topic's lookups."""
        topic = request.arg("topic")
        if topic is None:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        node = request.arg("node")
        if node is None:
            raise HTTPError(400, "MISSING_ARG_NODE")
        self.cluster.registry.tombstone(topic, node, self._now())
        return None


def _store_error(topic: str, exc: StoreError) -> HTTPError:
    """A write not saved: ``503`` when etcd (HA) cannot take it now, else ``500``."""
    log.error("TOPIC(%s): %s", topic, exc)
    if isinstance(exc, UnavailableError):
        return HTTPError(503, ETCD_UNAVAILABLE, {"detail": str(exc)})
    return HTTPError(500, "INTERNAL_ERROR")


def _topic_arg(request: Request) -> str:
    topic = request.arg("topic")
    if topic is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not is_valid_topic_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    return topic


def _topic_channel_args(request: Request) -> tuple[str, str]:
    """nsqd's ``GetTopicChannelArgs``."""
    topic = _topic_arg(request)
    channel = request.arg("channel")
    if channel is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_channel_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _int_arg(request: Request, name: str, error: str) -> int:
    raw = request.arg(name) or "0"
    if not _ATOI.fullmatch(raw) or not -_INT64 <= int(raw) < _INT64:
        raise HTTPError(400, error)
    return int(raw)


def _bounded(
    request: Request, name: str, default: int, low: int, high: int, what: str = "PARTITION_NUM"
) -> int:
    """An optional integer in ``[low, high]``; ``INVALID_ARG_TOPIC_<what>`` otherwise."""
    raw = request.arg(name)
    if raw is None or raw == "":
        return default
    if not _ATOI.fullmatch(raw) or not low <= int(raw) <= high:
        raise HTTPError(400, f"INVALID_ARG_TOPIC_{what}")
    return int(raw)


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


__all__ = ["HTTPError", "LookupHTTP", "serve_http"]
