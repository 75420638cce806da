"""nsqd's ``/stats``: the JSON document nsqadmin, nsq_stat and the exporters read, built from
the broker and the live TCP sessions (its text layout: :mod:`nsqd.observe.stats_text`).

The same document feeds ``/metrics`` (:mod:`nsqd.observe.metrics`), so the two always agree. Keys
are nsqd 1.3.0's; pnsq adds a ``partitions`` list to each topic and channel (per-partition depth,
offsets and lag), which nsqadmin ignores. Everything is on disk, so ``backend_depth`` equals
``depth`` except for #ephemeral topics and channels (0, as nsqd's in-memory-only queues).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..broker import (
    Broker,
    ChannelPartitionStatistics,
    ChannelStatistics,
    ReplicationStatistics,
    TopicPartitionStatistics,
    TopicStatistics,
)
from ..core.latency import LatencyResult
from .memory import memory_stats
from .records import ClientStatistics, HasStatistics

Json = dict[str, Any]

E2E_LATENCY = {"count": 0, "percentiles": None}  # not measured (nsqd: opt-in)


#: what ``/stats`` and ``/metrics`` ask of a TCP session (the HTTP app's name for it)
SessionLike = HasStatistics


@dataclass(frozen=True, slots=True)
class StatsQuery:
    """The ``/stats`` parameters."""

    topic: str = ""
    channel: str = ""
    include_clients: bool = True
    include_mem: bool = True


def health(broker: Broker) -> str:
    """nsqd's health text: ``OK``, or ``NOK - <error>`` after a disk error or past the disk
    high-water mark."""
    error = broker.health_problem
    return "OK" if error is None else f"NOK - {error}"


def stats_document(
    broker: Broker, sessions: Iterable[HasStatistics], query: StatsQuery, version: str
) -> Json:
    """The ``/stats?format=json`` document (nsqd 1.3.0's key order)."""
    doc: Json = {"version": version, "health": health(broker), "start_time": broker.start_time}
    topics = _topic_stats(broker, query)
    doc["topics"] = topics
    if query.include_mem:
        doc["memory"] = memory_stats()
    producers = None
    if topics is not None and query.include_clients:
        records = (s.statistics() for s in sessions)
        found = [client_stats(c, query.topic) for c in records if c.pub_counts]
        producers = found or None
    doc["producers"] = producers
    return doc


def _topic_stats(broker: Broker, query: StatsQuery) -> list[Json] | None:
    if query.topic:
        only = broker.find_topic(query.topic)
        if only is None:
            return None  # nsqd: "topics": null when the filter matches nothing
        chosen = [only]
    else:
        chosen = broker.list_topics()
    percentiles = broker.config.e2e_percentiles
    now_ns = broker.clock.now_ns() if percentiles else 0
    out = []
    for topic in chosen:
        record = topic.statistics(percentiles, now_ns)
        channels = record.channels
        if query.channel:
            channels = tuple(c for c in channels if c.name == query.channel)
            if not channels:
                continue  # nsqd leaves out the topics without that channel
        channel_docs = [channel_stats(c, query) for c in channels]
        out.append(topic_stats(record, channel_docs))
    return out


def e2e_json(result: LatencyResult | None) -> Json:
    """nsqd's ``e2e_processing_latency``: ``{"count", "percentiles": [{"quantile", "value"
    (ns)}]}`` with ``--e2e-processing-latency-percentile``, else no percentiles."""
    if result is None:
        return dict(E2E_LATENCY)
    percentiles = [{"quantile": q, "value": value} for q, value in result.percentiles]
    return {"count": result.count, "percentiles": percentiles}


def topic_stats(topic: TopicStatistics, channels: list[Json]) -> Json:
    """One TopicStats, with pnsq's per-partition list."""
    parts = [_topic_partition(p) for p in topic.partitions]
    return {
        "topic_name": topic.name,
        "channels": channels,
        "depth": topic.depth,
        "backend_depth": topic.backend_depth,
        "message_count": topic.message_count,
        "message_bytes": topic.message_bytes,
        "paused": topic.paused,
        "e2e_processing_latency": e2e_json(topic.e2e_latency),
        "partitions": parts,
        **(_youzan_topic(topic, channels) if topic.youzan_style else {}),
    }


def _youzan_topic(topic: TopicStatistics, channels: list[Json]) -> Json:
    """youzan's TopicStats keys that a pnsq concept backs (one pnsq entry spans the topic's
    partitions here: ``topic_partition`` lists them, comma-separated)."""
    return {
        "topic_partition": ",".join(str(p.number) for p in topic.partitions),
        "is_leader": any(p.replication.leads for p in topic.partitions),
        "is_multi_ordered": topic.ordered,
        "is_multi_part": topic.partition_num > 1,
        "is_ext": topic.ext,
        "is_channel_auto_create_disabled": not topic.channel_auto_create,
        "channel_num": len(channels),
    }


def _topic_partition(partition: TopicPartitionStatistics) -> Json:
    return {
        "partition": partition.number,
        "depth": partition.depth,
        "backend_depth": partition.backend_depth,
        "message_count": partition.message_count,
        "message_bytes": partition.message_bytes,
        "start_offset": partition.start_offset,
        "end_offset": partition.end_offset,
        "producers": partition.producers,
        "producers_evicted": partition.producers_evicted,
        **replication_stats(partition.replication),
    }


def replication_stats(replication: ReplicationStatistics) -> Json:
    """pnsq's replication view of a partition: its role here, the leader epoch, the
    high-watermark, the in-sync set as lookupd last told it and, on the leader, how far each
    in-sync follower is behind (records) and how many bytes each replica still lacks, in sync
    or catching up (``replica_lag_bytes``)."""
    return {
        "role": replication.role,
        "leader_epoch": replication.leader_epoch,
        "high_watermark": replication.high_watermark,
        "isr": list(replication.isr),
        "replica_lag": dict(replication.replica_lag),
        "leader": 1 if replication.leads else 0,
        "max_replica_lag": replication.max_replica_lag,
        "replica_lag_bytes": dict(replication.replica_lag_bytes),
    }


def _channel_partition(part: ChannelPartitionStatistics) -> Json:
    return {
        "partition": part.number,
        "depth": part.depth,
        "backend_depth": part.backend_depth,
        "in_flight_count": part.in_flight_count,
        "deferred_count": part.deferred_count,
        "message_count": part.message_count,
        "requeue_count": part.requeue_count,
        "timeout_count": part.timeout_count,
        "confirmed_offset": part.confirmed_offset,
        "next_offset": part.next_offset,
        "start_offset": part.start_offset,
        "end_offset": part.end_offset,
        "lag": part.lag,
    }


def channel_stats(channel: ChannelStatistics, query: StatsQuery) -> Json:
    """One ChannelStats, with pnsq's per-partition list."""
    clients: list[Json] | None = None
    if query.include_clients:
        members = sorted(
            (c.statistics() for c in channel.subscribers if isinstance(c, HasStatistics)),
            key=lambda c: (c.connect_time, c.remote_address),
        )
        clients = [client_stats(c, query.topic) for c in members]
    return {
        "channel_name": channel.name,
        "depth": channel.depth,
        "backend_depth": channel.backend_depth,
        "in_flight_count": channel.in_flight_count,
        "deferred_count": channel.deferred_count,
        "message_count": channel.message_count,
        "requeue_count": channel.requeue_count,
        "timeout_count": channel.timeout_count,
        "client_count": channel.client_count,
        "clients": clients,
        "paused": channel.paused,
        "e2e_processing_latency": e2e_json(channel.e2e_latency),
        "partitions": [_channel_partition(p) for p in channel.partitions],
        **(_youzan_channel(channel) if channel.youzan_style else {}),
    }


def _youzan_channel(channel: ChannelStatistics) -> Json:
    """youzan's ChannelStats keys that pnsq backs."""
    return {
        "client_num": channel.client_count,
        "skipped": channel.skipped,
        "zan_test_skipped": channel.skip_zan_test,
        "is_multi_ordered": channel.ordered,
    }


def _youzan_client(client: ClientStatistics) -> Json:
    """youzan's ClientStats keys: ``desired_tag``, ``ext_filter``, ``msg_timeout`` (ms)."""
    ext_filter = client.ext_filter
    shape: Json = {"type": 0, "inverse": False, "filter_ext_key": "", "filter_data": ""}
    if ext_filter is not None:
        shape = {
            "type": ext_filter.type,
            "inverse": ext_filter.inverse,
            "filter_ext_key": ext_filter.key,
            "filter_data": ext_filter.data,
            "filter_data_list": [
                {"filter_ext_key": k, "filter_data": d} for k, d in ext_filter.data_list
            ],
        }
    return {
        "desired_tag": client.desired_tag,
        "ext_filter": shape,
        "msg_timeout": client.msg_timeout_ns // 1_000_000,
    }


def client_stats(client: ClientStatistics, topic_filter: str = "") -> Json:
    """One ClientStats (nsqd 1.3.0's keys; the ``omitempty`` ones only when set)."""
    doc: Json = {
        "client_id": client.client_id,
        "hostname": client.hostname,
        "version": "V2",
        "remote_address": client.remote_address,
        "state": client.state,
        "ready_count": client.ready_count,
        "in_flight_count": client.in_flight_count,
        "message_count": client.message_count,
        "finish_count": client.finish_count,
        "requeue_count": client.requeue_count,
        "connect_ts": client.connect_time,
        "sample_rate": client.sample_rate,
        "deflate": client.deflate,
        "snappy": client.snappy,
        "user_agent": client.user_agent,
    }
    if client.youzan_style:
        doc.update(_youzan_client(client))
    if client.authed:
        doc["authed"] = True
        if client.auth_identity:
            doc["auth_identity"] = client.auth_identity
        if client.auth_identity_url:
            doc["auth_identity_url"] = client.auth_identity_url
    counts = [
        {"topic": t, "count": n}
        for t, n in client.pub_counts
        if not topic_filter or t == topic_filter
    ]
    if counts:
        doc["pub_counts"] = counts
    doc["tls"] = client.tls
    doc["tls_cipher_suite"] = client.tls_cipher_suite
    doc["tls_version"] = client.tls_version
    doc["tls_negotiated_protocol"] = client.tls_negotiated_protocol
    doc["tls_negotiated_protocol_is_mutual"] = client.tls_negotiated_protocol_is_mutual
    return doc
