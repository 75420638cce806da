"""nsqd's administrative HTTP endpoints: ``/stats``, ``/topic/*``, ``/channel/*``,
``/config/:opt``, plus pnsq's ``/metrics``. Names, status codes and error texts are nsqd
1.3.0's, including its inconsistencies: ``/topic/create`` and ``/topic/empty`` say
``INVALID_TOPIC`` where the channel endpoints say ``INVALID_ARG_TOPIC``; ``/topic/delete`` and
``/topic/pause`` do not validate the name (an invalid one is simply ``TOPIC_NOT_FOUND``).
youzan's additions: ``/topic/create``'s topic parameters and ``/channel/setoffset`` (youzan's
statuses and texts). Domain errors are answered by :data:`~nsqd.http.errors.ADMIN_ERRORS`.

In a pnsq cluster the pause, unpause and channel calls, applied here, are then carried to the
topic's other partition leaders (:mod:`~nsqd.cluster.admin_spread`) before the reply.
"""

from __future__ import annotations

import re

import trio

from protocol.cluster_auth import carries_credential
from protocol.consume import parse_consume_start
from protocol.gostr import go_quote
from protocol.message import MAX_PARTITIONS

from ..broker import admin
from ..cluster.admin_spread import HOP_HEADER
from ..observe.stats import StatsQuery, stats_document
from ..observe.stats_text import render_text
from .args import topic_arg, topic_channel_args
from .base import HTTPError, JsonValue, Raw, Reply, Request, Route, routes_with
from .context import HTTPContext
from .errors import ADMIN_ERRORS

BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}  # nsqd's boolParams
_ATOI = re.compile(r"[+-]?[0-9]+")  # Go's strconv.Atoi syntax
#: the longest a node's ``/topic/delete`` of a topic lookupd placed waits for lookupd's own
#: deletion of it to arrive (nsqadmin's Delete asks lookupd, then every node at once)
DELETE_WAIT = 2.0
LOOKUPDS = "nsqlookupd_tcp_addresses"  # the /config option that changes cluster state


def _bool_param(value: str | None, default: bool) -> bool:
    return BOOL_PARAMS.get(value or "", default)


async def spread(
    context: HTTPContext,
    request: Request,
    topic: str,
    body: bytes = b"",
    partition: int | None = None,
) -> list[str]:
    """Carry an applied admin call to the topic's other partition leaders (only
    ``partition``'s when given), unless it was carried here
    (:data:`~nsqd.cluster.admin_spread.HOP_HEADER`); the leaders it reached."""
    if HOP_HEADER.lower().encode() in request.headers:
        return []
    return await context.spread.spread(
        topic,
        request.path,
        request.raw_query,
        body,
        partition,
        request.headers.get(b"authorization", b""),
    )


def _flag_arg(request: Request, name: str) -> bool | None:
    """A youzan topic flag: None when absent, else true only for ``true`` (youzan's test)."""
    value = request.arg(name)
    return None if value is None else value == "true"


class AdminAPI:
    """The handlers; :meth:`routes` gives the app's route table entries."""

    def __init__(self, context: HTTPContext) -> None:
        self.context = context
        self.broker = context.broker
        self.runtime = context.runtime

    def routes(self) -> dict[str, Route]:
        """Exact-path routes (``/config/:opt`` is matched by the app: :meth:`config_route`)."""
        return routes_with(
            ADMIN_ERRORS,
            {
                "/stats": {"GET": self.stats},
                "/metrics": {"GET": self.metrics},
                "/topic/create": {"POST": self.topic_create},
                "/topic/delete": {"POST": self.topic_delete},
                "/topic/empty": {"POST": self.topic_empty},
                "/topic/pause": {"POST": self.topic_pause},
                "/topic/unpause": {"POST": self.topic_pause},
                "/channel/create": {"POST": self.channel_create},
                "/channel/delete": {"POST": self.channel_delete},
                "/channel/empty": {"POST": self.channel_empty},
                "/channel/pause": {"POST": self.channel_pause},
                "/channel/unpause": {"POST": self.channel_pause},
                "/channel/setoffset": {"POST": self.channel_setoffset},
            },
        )

    def config_route(self) -> Route:
        """``/config/:opt``'s handlers."""
        return Route({"GET": self.config, "PUT": self.config}, ADMIN_ERRORS)

    # ------------------------------------------------------------------ stats

    async def stats(self, request: Request) -> Reply:
        """nsqd's ``/stats``: JSON with ``format=json``, nsqd's text layout otherwise."""
        query = StatsQuery(
            topic=request.arg("topic") or "",
            channel=request.arg("channel") or "",
            include_clients=_bool_param(request.arg("include_clients"), True),
            include_mem=_bool_param(request.arg("include_mem"), True),
        )
        doc = stats_document(
            self.broker, self.context.sessions, query, self.context.settings.version
        )
        if request.arg("format") == "json":
            return doc
        return render_text(doc, self.broker.clock.now())

    async def metrics(self, request: Request) -> Reply:
        """Prometheus exposition (see :mod:`nsqd.observe.metrics`)."""
        accept = request.headers.get(b"accept", b"").decode("latin-1")
        body, content_type = self.context.metrics.render(accept)
        return Raw(body, content_type.encode())

    # ------------------------------------------------------------------ topics

    async def topic_create(self, request: Request) -> Reply:
        """nsqd's ``/topic/create``, plus youzan's topic parameters (``partition_num``,
        ``orderedmulti``, ``extend``; see docs/http-api.md)."""
        name = topic_arg(request)
        partitions = None
        raw = request.arg("partition_num")
        if raw:
            partitions = int(raw) if _ATOI.fullmatch(raw) else 0
            if not 1 <= partitions < MAX_PARTITIONS:
                raise HTTPError(400, "INVALID_ARG_TOPIC_PARTITION_NUM")
        ordered, ext = _flag_arg(request, "orderedmulti"), _flag_arg(request, "extend")
        forwarder = self.context.forwarder
        if forwarder is not None and forwarder.active and self.broker.find_topic(name) is None:
            # placed by lookupd: created through it, never as a copy of this node's own
            await forwarder.create_topic(self.broker, name, partitions, ordered, ext)
            if self.broker.find_topic(name) is None:
                return None  # lookupd holds it on other nodes
        await admin.create_topic(self.broker, name, partitions, ordered, ext)
        return None

    async def topic_delete(self, request: Request) -> Reply:
        """nsqd's ``/topic/delete``; on a cluster node, a topic lookupd placed is deleted only
        through lookupd (:meth:`_deleted_through_lookupd`), and one lookupd deleted is done
        (nsqadmin's Delete asks lookupd first, then each node, which had deleted it by then)."""
        name = topic_arg(request, validate=False)
        topic = self.broker.find_topic(name)
        forwarder = self.context.forwarder
        if forwarder is not None and forwarder.active:
            if topic is not None and topic.managed:
                await self._deleted_through_lookupd(name)
                return None
            if topic is None and name in self.broker.deleted_on_lookupd:
                return None
        await admin.delete_topic(self.broker, name)
        return None

    async def _deleted_through_lookupd(self, name: str) -> None:
        """A topic lookupd placed is one topic over its copies: this copy deleted alone left
        its partitions led here to be made again empty, and their replicas were cut back to
        them (acknowledged messages gone on every node). nsqadmin's Delete asks lookupd first,
        then each node: this waits (:data:`DELETE_WAIT`) for lookupd's deletion to reach this
        node. Otherwise (nsqadmin's per-node tombstone) ``400 TOPIC_PLACED_BY_LOOKUPD``: delete
        it on lookupd, or move its partitions away (a drain)."""
        broker = self.broker
        with trio.move_on_after(DELETE_WAIT):
            while (topic := broker.find_topic(name)) is not None and not topic.deleted:
                await broker.changes.wait_after(broker.changes.generation)
        if broker.find_topic(name) is not None:
            raise HTTPError(400, "TOPIC_PLACED_BY_LOOKUPD")

    async def topic_empty(self, request: Request) -> Reply:
        name = topic_arg(request)
        admin.empty_topic(self.broker, name)
        return None

    async def topic_pause(self, request: Request) -> Reply:
        name = topic_arg(request, validate=False)
        paused = not request.path.endswith("unpause")
        await admin.pause_topic(self.broker, name, paused)
        await spread(self.context, request, name)
        return None

    # ------------------------------------------------------------------ channels

    async def channel_create(self, request: Request) -> Reply:
        topic, channel = topic_channel_args(request)
        await admin.create_channel(self.broker, topic, channel)
        await spread(self.context, request, topic)
        return None

    async def channel_delete(self, request: Request) -> Reply:
        topic, channel = topic_channel_args(request)
        await admin.delete_channel(self.broker, topic, channel)
        await spread(self.context, request, topic)
        return None

    async def channel_empty(self, request: Request) -> Reply:
        topic, channel = topic_channel_args(request)
        await admin.empty_channel(self.broker, topic, channel)
        await spread(self.context, request, topic)
        return None

    async def channel_pause(self, request: Request) -> Reply:
        topic, channel = topic_channel_args(request)
        paused = not request.path.endswith("unpause")
        await admin.pause_channel(self.broker, topic, channel, paused)
        await spread(self.context, request, topic)
        return None

    async def channel_setoffset(self, request: Request) -> Reply:
        """youzan's ``/channel/setoffset?topic=&channel=[&partition=]``, body
        ``timestamp:<s>`` | ``msgcount:<n>`` | ``virtual_queue:<offset>`` | ``special:-1``."""
        topic, channel = topic_channel_args(request)
        await self.context.auth.require(request, topic, channel)
        raw = request.arg("partition") or ""
        partition = None
        if raw:
            if not _ATOI.fullmatch(raw):
                raise HTTPError(
                    400, f"strconv.Atoi: parsing {go_quote(raw.encode())}: invalid syntax"
                )
            partition = None if int(raw) == -1 else int(raw)
        found = self.broker.find_topic(topic)
        if found is None or (partition is not None and not found.holds(partition)):
            if found is not None and await self._carry_setoffset(request, topic, partition):
                return None  # the partition's leader did it
            raise HTTPError(404, "E_TOPIC_NOT_EXIST")
        if channel not in found.channels:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        body = await request.body(self.context.settings.max_msg_size)
        if not body:
            raise HTTPError(406, "MSG_EMPTY")
        start = parse_consume_start(body.strip())
        await admin.set_channel_offset(self.broker, topic, channel, partition, start)
        await spread(self.context, request, topic, body, partition)
        return None

    async def _carry_setoffset(self, request: Request, topic: str, partition: int | None) -> bool:
        """A setoffset of a partition of a held topic that this node does not hold: carried to
        that partition's leader (a pnsq cluster); whether it was done there."""
        if partition is None:
            return False
        body = await request.body(self.context.settings.max_msg_size)
        return bool(await spread(self.context, request, topic, body, partition))

    # ------------------------------------------------------------------ config

    def _check_cluster_credential(self, request: Request) -> None:
        """On a node with the cluster credential, the lookupds it registers with are cluster
        state: pointed at none, its partitions fail over (or go offline); pointed at a
        stranger, it hands that stranger its handshake to relay. ``401
        CLUSTER_AUTH_REQUIRED`` without ``X-Pnsq-Cluster-Auth`` (as lookupd's control
        endpoints); nsqd's open endpoint as before on a node without one."""
        expected = self.context.cluster_credential
        if expected and not carries_credential(request.headers.items(), expected.encode()):
            raise HTTPError(401, "CLUSTER_AUTH_REQUIRED")

    async def config(self, request: Request) -> Reply:
        """``GET``/``PUT /config/:opt``."""
        name = request.params["opt"]
        if request.method == "PUT" and name == LOOKUPDS:
            self._check_cluster_credential(request)
        if request.method == "PUT":
            limit = self.context.settings.max_msg_size
            body = await request.body(limit)
            if not body or len(body) > limit:
                raise HTTPError(413, "INVALID_VALUE")
            value = self.runtime.put(name, body)
        else:
            value = self.runtime.get(name)
        if isinstance(value, str):
            return value.encode()  # nsqd's responder sends a string as is
        return JsonValue(value)
