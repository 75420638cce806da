"""What a topic and a channel report of themselves: frozen records, as trio's ``statistics()``.

``/stats`` and ``/metrics`` (:mod:`nsqd.observe`) sit above the broker and read only these
records, so the type checker sees every value they show and the counting rules (nsqd's depth of
a topic with or without channels, deferred DPUBs, ephemeral ``backend_depth``) live next to the
state they count. A record is a snapshot: it does not change when the topic does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..core.cursor import PartitionCursor
from ..core.latency import LatencyResult, LatencyWindow, aggregate
from ..storage.errors import StorageError
from .partition import Partition
from .views import Subscriber, TopicView

logger = logging.getLogger("nsqd.broker")


class ChannelSource(Protocol):
    """What a channel's record is read from (:class:`~nsqd.broker.channel.Channel`)."""

    @property
    def name(self) -> str: ...
    @property
    def topic(self) -> TopicView: ...
    @property
    def paused(self) -> bool: ...
    @property
    def ephemeral(self) -> bool: ...
    @property
    def ordered(self) -> bool: ...
    @property
    def skipped(self) -> bool: ...
    @property
    def skip_zan_test(self) -> bool: ...
    @property
    def clients(self) -> set[Subscriber]: ...
    @property
    def e2e_latency(self) -> LatencyWindow | None: ...
    def iter_cursors(self) -> Iterator[tuple[Partition, PartitionCursor]]: ...
    def partition_counts(
        self, partition: Partition, cursor: PartitionCursor
    ) -> tuple[int, int]: ...
    def partition_message_count(self, partition: Partition) -> int: ...


class TopicSource(TopicView, Protocol):
    """What a topic's record is read from (:class:`~nsqd.broker.topic.Topic`)."""

    @property
    def channel_auto_create(self) -> bool: ...
    @property
    def message_count(self) -> int: ...
    @property
    def message_bytes(self) -> int: ...
    @property
    def channels(self) -> Mapping[str, ChannelSource]: ...


__all__ = [
    "ChannelPartitionStatistics",
    "ChannelStatistics",
    "ReplicationStatistics",
    "TopicPartitionStatistics",
    "TopicStatistics",
    "bytes_behind",
    "channel_statistics",
    "replication_statistics",
    "topic_partition_statistics",
    "topic_statistics",
    "youzan_style",
]


@dataclass(frozen=True, slots=True)
class ReplicationStatistics:
    """A partition's replication as this node sees it: its role here, the leader epoch, the
    high-watermark, the in-sync set as lookupd last told it and, on the leader, how far each
    in-sync follower is behind (records; empty and 0 on a replica), how many bytes each replica
    still lacks (:func:`bytes_behind`: in sync or catching up, empty on a replica) and whether
    the in-sync set is short of the partition's copies."""

    role: str
    leader_epoch: int
    high_watermark: int
    isr: tuple[str, ...]
    leads: bool
    replica_lag: tuple[tuple[str, int], ...]
    max_replica_lag: int
    under_replicated: bool
    replica_lag_bytes: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TopicPartitionStatistics:
    """One partition of a topic: nsqd's depth (the backlog kept for a first channel: 0 once the
    topic has channels), what this process appended, the log's bounds and its replication."""

    number: int
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    start_offset: int
    end_offset: int
    replication: ReplicationStatistics
    producers: int = 0  # numbering (idempotent) producers whose last numbers it keeps
    #: producers forgotten for --max-producers while seen within --producer-state-ttl
    producers_evicted: int = 0


@dataclass(frozen=True, slots=True)
class ChannelPartitionStatistics:
    """A channel's cursor in one partition, counted as nsqd counts a channel."""

    number: int
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    confirmed_offset: int
    next_offset: int
    start_offset: int
    end_offset: int
    lag: int  # end offset minus confirmed offset: messages not yet FINed


@dataclass(frozen=True, slots=True)
class ChannelStatistics:
    """A channel over every partition of its topic here; the totals are the partitions' sums.

    ``subscribers`` are the sessions subscribed at the snapshot, for the shells to ask for their
    own statistics (the broker knows them only as :class:`~nsqd.broker.channel.Subscriber`).
    ``e2e_latency`` is None when no ``--e2e-processing-latency-percentile`` is configured.
    """

    name: str
    topic_name: str
    paused: bool
    ephemeral: bool
    ordered: bool
    skipped: bool
    skip_zan_test: bool
    youzan_style: bool  # its topic has youzan's features (see :func:`youzan_style`)
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    client_count: int
    subscribers: tuple[Subscriber, ...]
    partitions: tuple[ChannelPartitionStatistics, ...]
    e2e_latency: LatencyResult | None


@dataclass(frozen=True, slots=True)
class TopicStatistics:
    """A topic over the partitions it holds here, with its channels by name.

    ``e2e_latency`` (its channels' FIN latencies together) is None when no percentile is
    configured or the topic has no channel, as nsqd reports none then.
    """

    name: str
    paused: bool
    ephemeral: bool
    ordered: bool
    ext: bool
    partition_num: int
    channel_auto_create: bool
    youzan_style: bool
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    partitions: tuple[TopicPartitionStatistics, ...]
    channels: tuple[ChannelStatistics, ...]
    e2e_latency: LatencyResult | None


def youzan_style(topic: TopicView) -> bool:
    """A topic with youzan's features (ext, ordered, or several partitions): its stats carry
    youzan's extra keys; a plain topic's keep nsqd 1.3.0's exact shape for stock tools."""
    return topic.ext or topic.ordered or topic.partition_num > 1


def replication_statistics(partition: Partition) -> ReplicationStatistics:
    """The replication record of ``partition`` on this node."""
    state = partition.state
    leads = state.leads
    placement = state.placement
    in_sync = len(placement.isr or (placement.leader,))  # () means the leader alone
    lag = {node: state.log_end - state.acked(node) for node in state.followers} if leads else {}
    return ReplicationStatistics(
        role=state.role.value,
        leader_epoch=state.epoch,
        high_watermark=state.high_watermark,
        isr=tuple(placement.isr),
        leads=leads,
        replica_lag=tuple(lag.items()),
        max_replica_lag=max(lag.values(), default=0),
        under_replicated=leads and in_sync < 1 + len(placement.replicas),
        replica_lag_bytes=tuple(bytes_behind(partition).items()),
    )


def bytes_behind(partition: Partition) -> dict[str, int]:
    """On the leader, the bytes of ``partition``'s log each replica still lacks: from the end it
    last acknowledged under this epoch to the log's end (what a new, moved or returning copy
    has left to copy; :meth:`~nsqd.storage.log.PartitionLog.bytes_from` says how precise). A
    replica that acknowledged nothing under this epoch yet is left out (unknown), as is one
    whose count an unreadable index prevents (logged); nothing on a node that does not lead."""
    state = partition.state
    if not state.leads:
        return {}
    behind = {}
    for node in state.placement.replicas:
        if not state.has_acked(node):
            continue
        try:
            behind[node] = partition.log.bytes_from(state.acked(node))
        except StorageError as exc:
            logger.warning("partition %d: bytes behind %s unknown: %s", partition.number, node, exc)
    return behind


def _topic_partition(topic: TopicSource, partition: Partition) -> TopicPartitionStatistics:
    log = partition.log
    depth = 0
    if not topic.channels:  # the backlog kept for a first channel (nsqd's topic depth)
        depth = log.end_offset - max(partition.topic_start, log.start_offset)
    return TopicPartitionStatistics(
        number=partition.number,
        depth=depth,
        backend_depth=0 if topic.ephemeral else depth,
        message_count=partition.message_count,
        message_bytes=partition.message_bytes,
        start_offset=log.start_offset,
        end_offset=log.end_offset,
        replication=replication_statistics(partition),
        producers=len(partition.producers),
        producers_evicted=partition.producers.evicted_early,
    )


def topic_partition_statistics(topic: TopicSource) -> tuple[TopicPartitionStatistics, ...]:
    """The records of the partitions ``topic`` holds here, by number (no channel counted)."""
    return tuple(_topic_partition(topic, p) for p in topic.partitions)


def topic_statistics(
    topic: TopicSource, e2e_percentiles: Sequence[float] = (), now_ns: int = 0
) -> TopicStatistics:
    """The record of ``topic`` and its channels; latencies over the window at ``now_ns``. Its
    depth is that of the partitions led here (as its channels' counts)."""
    parts = topic_partition_statistics(topic)
    led = [p for p in parts if p.replication.leads]
    channels = sorted(topic.channels.values(), key=lambda c: c.name)
    e2e = None
    if e2e_percentiles and topic.channels:
        windows = [c.e2e_latency for c in topic.channels.values() if c.e2e_latency is not None]
        e2e = aggregate(e2e_percentiles, windows, now_ns)
    return TopicStatistics(
        name=topic.name,
        paused=topic.paused,
        ephemeral=topic.ephemeral,
        ordered=topic.ordered,
        ext=topic.ext,
        partition_num=topic.partition_num,
        channel_auto_create=topic.channel_auto_create,
        youzan_style=youzan_style(topic),
        depth=sum(p.depth for p in led),
        backend_depth=sum(p.backend_depth for p in led),
        message_count=topic.message_count,
        message_bytes=topic.message_bytes,
        partitions=parts,
        channels=tuple(channel_statistics(c, e2e_percentiles, now_ns) for c in channels),
        e2e_latency=e2e,
    )


def channel_statistics(
    channel: ChannelSource, e2e_percentiles: Sequence[float] = (), now_ns: int = 0
) -> ChannelStatistics:
    """The record of ``channel``; its latencies over the window at ``now_ns``. Its counts are
    those of the partitions led here (each node's ``/stats`` adds its own: nsqadmin and
    nsq_stat sum them over the nodes); ``partitions`` lists every one held."""
    parts, led = [], []
    for partition, cursor in channel.iter_cursors():
        end = partition.log.end_offset
        depth, deferred = channel.partition_counts(partition, cursor)
        parts.append(
            ChannelPartitionStatistics(
                number=partition.number,
                depth=depth,
                backend_depth=0 if channel.ephemeral or channel.topic.ephemeral else depth,
                in_flight_count=len(cursor.in_flight),
                deferred_count=deferred,
                message_count=channel.partition_message_count(partition),
                requeue_count=cursor.requeue_count,
                timeout_count=cursor.timeout_count,
                confirmed_offset=cursor.confirmed,
                next_offset=cursor.next_read,
                start_offset=partition.log.start_offset,
                end_offset=end,
                lag=end - cursor.confirmed,
            )
        )
        if partition.state.leads:  # a replica's copy of the channel is counted by its leader
            led.append(parts[-1])
    e2e = None
    if e2e_percentiles:
        windows = [channel.e2e_latency] if channel.e2e_latency is not None else []
        e2e = aggregate(e2e_percentiles, windows, now_ns)
    return ChannelStatistics(
        name=channel.name,
        topic_name=channel.topic.name,
        paused=channel.paused,
        ephemeral=channel.ephemeral,
        ordered=channel.ordered,
        skipped=channel.skipped,
        skip_zan_test=channel.skip_zan_test,
        youzan_style=youzan_style(channel.topic),
        depth=sum(p.depth for p in led),
        backend_depth=sum(p.backend_depth for p in led),
        in_flight_count=sum(p.in_flight_count for p in led),
        deferred_count=sum(p.deferred_count for p in led),
        message_count=sum(p.message_count for p in led),
        requeue_count=sum(p.requeue_count for p in led),
        timeout_count=sum(p.timeout_count for p in led),
        client_count=len(channel.clients),
        subscribers=tuple(channel.clients),
        partitions=tuple(parts),
        e2e_latency=e2e,
    )
