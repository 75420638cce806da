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
from typing import Any, Protocol, cast

import trio

from ..broker import (
    Broker,
    ChannelPartitionStatistics,
    ChannelStatistics,
    ReplicationStatistics,
    TopicPartitionStatistics,
    TopicStatistics,
    youzan_style,
)
from ..core.latency import LatencyResult
from .memory import memory_stats

Json = dict[str, Any]

E2E_LATENCY = {"count": 0, "percentiles": None}  # not measured (nsqd: opt-in)


class SessionLike(Protocol):
    """What stats read of a TCP session (``nsqd.tcp.session.Session``); newer attributes (TLS,
    compression, auth, publish counts) are read with defaults."""

    client_id: str
    hostname: str
    remote_address: str
    user_agent: str
    ready_count: int
    in_flight: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_time: int
    sample_rate: int


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
    broker: Broker, sessions: Iterable[SessionLike], query: StatsQuery, version: str
) -> Json:
    """The ``/stats?format=json`` document (nsqd 1.3.0's key order)."""
    doc: Json = {"version": version, "health": health(broker), "start_time": broker.start_time}
    topics = _topic_stats(broker, query)
    doc["topics"] = topics
    if query.include_mem:
        doc["memory"] = memory_stats()
    producers = None
    if topics is not None and query.include_clients:
        found = [client_stats(s, query.topic) for s in sessions if pub_counts(s)]
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
        **replication_stats(partition.replication),
    }


def replication_stats(replication: ReplicationStatistics) -> Json:
    """pnsq's replication view of a partition: its role here, the leader epoch, the
    high-watermark, the in-sync set as lookupd last told it and, on the leader, how far each
    in-sync follower is behind (records)."""
    return {
        "role": replication.role,
        "leader_epoch": replication.leader_epoch,
        "high_watermark": replication.high_watermark,
        "isr": list(replication.isr),
        "replica_lag": dict(replication.replica_lag),
        "leader": 1 if replication.leads else 0,
        "max_replica_lag": replication.max_replica_lag,
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
            (cast(SessionLike, c) for c in channel.subscribers),
            key=lambda s: (s.connect_time, s.remote_address),
        )
        clients = [client_stats(s, query.topic) for s in members]
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


def _youzan_client(session: object) -> Json:
    """youzan's ClientStats keys: ``desired_tag``, ``ext_filter``, ``msg_timeout`` (ms)."""
    ext_filter = getattr(session, "ext_filter", None)
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
        "desired_tag": getattr(session, "desired_tag", ""),
        "ext_filter": shape,
        "msg_timeout": getattr(session, "msg_timeout_ns", 0) // 1_000_000,
    }


def pub_counts(session: object) -> dict[str, int]:
    """Messages this connection published, per topic (empty for a pure consumer)."""
    publisher = getattr(session, "publisher", None)
    counts = getattr(publisher, "pub_counts", None) or getattr(session, "pub_counts", None)
    return dict(counts) if counts else {}


def client_stats(session: SessionLike, topic_filter: str = "") -> Json:
    """One ClientStats (nsqd 1.3.0's keys; the ``omitempty`` ones only when set)."""
    parser = getattr(session, "parser", None)
    state = getattr(getattr(parser, "state", None), "value", 0)
    doc: Json = {
        "client_id": session.client_id,
        "hostname": session.hostname,
        "version": "V2",
        "remote_address": session.remote_address,
        "state": state,
        "ready_count": session.ready_count,
        "in_flight_count": session.in_flight,
        "message_count": session.message_count,
        "finish_count": session.finish_count,
        "requeue_count": session.requeue_count,
        "connect_ts": session.connect_time,
        "sample_rate": session.sample_rate,
        "deflate": bool(getattr(session, "deflate", False)),
        "snappy": bool(getattr(session, "snappy", False)),
        "user_agent": session.user_agent,
    }
    channel = getattr(session, "channel", None)
    if channel is not None and youzan_style(channel.topic):
        doc.update(_youzan_client(session))
    auth = getattr(session, "auth", None)
    if auth is not None and getattr(auth, "authorized", False):
        doc["authed"] = True
        auth_state = getattr(auth, "state", None)
        if identity := getattr(auth_state, "identity", ""):
            doc["auth_identity"] = identity
        if identity_url := getattr(auth_state, "identity_url", ""):
            doc["auth_identity_url"] = identity_url
    counts = [
        {"topic": t, "count": n}
        for t, n in sorted(pub_counts(session).items())
        if not topic_filter or t == topic_filter
    ]
    if counts:
        doc["pub_counts"] = counts
    doc.update(_tls_details(session))
    return doc


def _tls_details(session: object) -> Json:
    stream = getattr(session, "stream", None)
    for _ in range(4):  # compression layers wrap the TLS stream as ``inner``
        if stream is None or isinstance(stream, trio.SSLStream):
            break
        stream = getattr(stream, "inner", None)
    tls = bool(getattr(session, "tls", False)) and isinstance(stream, trio.SSLStream)
    details: Json = {
        "tls": tls,
        "tls_cipher_suite": "",
        "tls_version": "",
        "tls_negotiated_protocol": "",
        "tls_negotiated_protocol_is_mutual": False,
    }
    if tls:
        assert isinstance(stream, trio.SSLStream)
        cipher = stream.cipher()
        details["tls_cipher_suite"] = cipher[0] if cipher else ""
        details["tls_version"] = (stream.version() or "").replace("TLSv", "TLS")
        details["tls_negotiated_protocol"] = stream.selected_alpn_protocol() or ""
        details["tls_negotiated_protocol_is_mutual"] = True  # Go: always true (deprecated)
    return details
