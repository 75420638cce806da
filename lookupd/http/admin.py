"""The topic and channel admin endpoints of lookupd's HTTP API: what creates, changes and removes
topics and channels (and hides a node from a topic's lookups).

* ``POST /topic/create`` — create and place a topic (nsqlookupd's params plus youzan's);
* ``POST /topic/delete`` — drop its keys and placement (youzan: ``partition=**``);
* ``POST /topic/meta/update``, ``POST /topic/partition/expand`` — youzan's changes to a placed
  topic;
* ``POST /topic/partition/move`` — youzan's move of one copy of a partition (leader or
  replica) to another node (:mod:`lookupd.core.moves`), and ``GET /topic/partition/moves``,
  pnsq's list of the moves in progress;
* ``POST /channel/create``, ``POST /channel/delete`` — a channel key;
* ``POST /topic/tombstone`` — hide ``node`` from the topic's lookups.

Errors are nsqlookupd's/youzan's texts; a write not saved is ``500`` (``503`` when etcd cannot
take it now).
"""

from __future__ import annotations

import logging
import re

import trio

from protocol.names import is_valid_channel_name, is_valid_topic_name

from ..core.placement import MAX_PARTITION_NUM, MAX_REPLICATOR, TopicPlacement
from ..state.cluster import (
    Cluster,
    Move,
    MoveError,
    PlacementError,
    StoreError,
    TopicMeta,
    UnavailableError,
)
from .base import HTTPError, Reply, Request, go_atoi
from .forward import ETCD_UNAVAILABLE

log = logging.getLogger("nsqlookupd.http")

_ATOI = re.compile(r"[+-]?[0-9]+")
#: the longest ``/topic/create`` waits for the placed nodes to register the new partitions, so a
#: client's first ``/lookup`` after it already names them (go-nsq looks up again only 60 s later)
CREATE_REGISTER_WAIT = 2.0
_INT64 = 1 << 63
#: youzan's ``/topic/create`` parameters that describe the topic (an existing topic named with
#: one of them must match it, else ``TOPIC_ALREADY_EXISTS``)
_TOPIC_PARAMS = ("partition_num", "replicator", "orderedmulti", "extend", "multipart")


class AdminEndpoints:
    """The handlers (see the module doc), on ``cluster``'s registry and placements."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def _now(self) -> float:
        return self.cluster.clock()

    async def topic_create(self, request: Request) -> Reply:
        """Create (and place) a topic: nsqlookupd's params plus youzan's. An existing topic
        named without any of youzan's topic parameters is ``200`` and stays as it is, as on
        nsqlookupd (nsqadmin sends ``/topic/create?topic=`` before creating a channel)."""
        topic = _topic_arg(request)  # then youzan's order of checks
        bare = all(request.arg(name) is None for name in _TOPIC_PARAMS)
        partition_num = _bounded(request, "partition_num", 1, 1, MAX_PARTITION_NUM)
        replica = _bounded(request, "replicator", 1, 1, MAX_REPLICATOR, "REPLICATOR")
        _bounded(request, "suggestload", 0, 0, 10000, "LOAD_FACTOR")
        sync_every = _count_arg(request, "syncdisk", "INVALID_ARG_TOPIC_SYNC_DISK")
        min_isr = _bounded(request, "min_isr", 1, 1, replica, "MIN_ISR")
        meta = TopicMeta(
            partition_num=partition_num,
            replica=replica,
            extend_support=request.arg("extend") == "true",
            ordered=request.arg("orderedmulti") == "true",
            multi_part=request.arg("multipart") == "true",
            disable_channel_auto_create=request.arg("disable_channel_auto_create") == "true",
            retention_days=_retention(request.arg("retention") or "0"),
            sync_every=sync_every,
            min_isr=min_isr,
            unclean=request.arg("unclean") == "true",
        )
        try:
            await self.cluster.create_topic(
                topic, meta, request.arg("prefer") or None, keep_existing=bare
            )
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise store_error(topic, exc) from None
        placement = self.cluster.placements.get(topic)
        if placement is None or placement.pending:
            return None  # no node to place it on yet (none registered, or every one drained)
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
        ``disable_channel_auto_create``; the nodes apply it without a restart. A new
        ``replicator`` (1..5) is saved at once and reached partition by partition, copies
        added through moves or dropped (:mod:`lookupd.core.resize`)."""
        topic = _topic_arg(request)
        if topic not in self.cluster.placements:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        meta = self.cluster.placements[topic].meta
        replica = None
        if request.arg("replicator") not in (None, "", "-1"):
            replica = _bounded(request, "replicator", 1, 1, MAX_REPLICATOR, "REPLICATOR")
        sync = request.arg("syncdisk")
        retention = request.arg("retention")
        disable = request.arg("disable_channel_auto_create")
        copies = meta.replica if replica is None else replica
        min_isr = request.arg("min_isr")
        if min_isr in (None, "") and meta.min_isr > copies:
            raise HTTPError(400, "INVALID_ARG_TOPIC_REPLICATOR: below the topic's min_isr")
        try:
            await self.cluster.update_meta(
                topic,
                sync_every=None
                if sync in (None, "")
                else _count_arg(request, "syncdisk", "INVALID_ARG_TOPIC_SYNC_DISK"),
                retention_days=None if retention in (None, "") else _retention(retention),
                extend_support=True if request.arg("upgradeext") == "true" else None,
                disable_channel_auto_create=None if disable is None else disable == "true",
                min_isr=None
                if min_isr in (None, "")
                else _bounded(request, "min_isr", 1, 1, copies, "MIN_ISR"),
                unclean=None
                if request.arg("unclean") is None
                else request.arg("unclean") == "true",
                replica=replica,
            )
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise store_error(topic, exc) from None
        return None

    async def topic_partition_expand(self, request: Request) -> Reply:
        """youzan's ``/topic/partition/expand?topic=&partition_num=``: new partitions are placed
        on the live nodes; the existing ones stay."""
        topic = _topic_arg(request)
        if topic not in self.cluster.placements:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        if not request.arg("partition_num"):  # youzan: Atoi("") fails
            raise HTTPError(400, "INVALID_ARG_TOPIC_PARTITION_NUM")
        count = _bounded(request, "partition_num", 1, 1, MAX_PARTITION_NUM)
        try:
            await self.cluster.expand_topic(topic, count)
        except PlacementError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise store_error(topic, exc) from None
        return None

    async def topic_partition_move(self, request: Request) -> Reply:
        """youzan's ``/topic/partition/move?topic=&partition=&move_from=&move_to=`` (node ids
        ``broadcast_address:tcp_port``; ``move_leader=true`` when ``move_from`` leads): answered
        once the move is saved; the failover loop carries it out (``GET
        /topic/partition/moves`` shows it until it is over)."""
        topic = _topic_arg(request)
        if topic not in self.cluster.placements:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        partition = _bounded(request, "partition", -1, 0, MAX_PARTITION_NUM - 1, "PARTITION")
        if partition < 0:
            raise HTTPError(400, "MISSING_ARG_TOPIC_PARTITION")
        source, target = request.arg("move_from"), request.arg("move_to")
        if not source:
            raise HTTPError(400, "MISSING_ARG_MOVE_FROM")
        if not target:
            raise HTTPError(400, "MISSING_ARG_MOVE_TO")
        wanted = Move(partition, source, target, leader=request.arg("move_leader") == "true")
        try:
            move = await self.cluster.start_move(topic, partition, wanted)
        except MoveError as exc:
            raise HTTPError(400, str(exc)) from None
        except StoreError as exc:
            raise store_error(topic, exc) from None
        log.info("TOPIC(%s/%d): %s started", topic, partition, move.describe())
        placement = self.cluster.placements[topic]
        return _move_info(placement, move, self.cluster.bytes_left(placement, move))

    async def topic_partition_moves(self, request: Request) -> Reply:
        """pnsq: the moves in progress (``topic=`` for one topic's), each with the partition's
        leader, replicas, in-sync set and epoch, as saved (what the nodes are told), and the
        bytes its target still lacks (``bytes_left``, null when unknown)."""
        only = request.arg("topic")
        return {
            "moves": [
                _move_info(placement, move, left)
                for placement, move, left in self.cluster.moves_in_progress()
                if only in (None, placement.name)
            ]
        }

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
            raise store_error(topic, exc) from None
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


def _move_info(placement: TopicPlacement, move: Move, left: int | None) -> dict[str, object]:
    part = placement.partitions[move.partition]
    return {
        "topic": placement.name,
        "partition": move.partition,
        "move_from": move.source,
        "move_to": move.target,
        "move_leader": move.leader,
        "leadership_transfer": move.keep_source,
        "leader": part.leader,
        "replicas": list(part.replicas),
        "isr": list(part.in_sync),
        "epoch": part.epoch,
        "bytes_left": left,
    }


def store_error(topic: str, exc: StoreError) -> HTTPError:
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


def _count_arg(request: Request, name: str, error: str) -> int:
    """:func:`_int_arg` that is not negative (0: the node's own default)."""
    value = _int_arg(request, name, error)
    if value < 0:
        raise HTTPError(400, error)
    return value


def _retention(text: str) -> int:
    """``retention`` (days; 0: the nodes' ``--retention``): Go's Atoi, not negative."""
    days = go_atoi(text)
    if days < 0:
        raise HTTPError(400, "INVALID_ARG_TOPIC_RETENTION")
    return days


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
