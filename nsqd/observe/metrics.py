"""Prometheus ``/metrics`` for pnsq's nsqd, on the HTTP port.

At each scrape a custom collector builds the same document as ``/stats`` (:mod:`nsqd.observe.stats`)
and renders it, so the two always agree:

* the names the NSQ exporters made conventional (lovoo/timonwong ``nsq_exporter``), all gauges:
  ``nsq_topic_depth``, ``nsq_topic_backend_depth``, ``nsq_topic_message_count``,
  ``nsq_topic_message_bytes`` and ``nsq_channel_depth``, ``nsq_channel_backend_depth``,
  ``nsq_channel_in_flight_count``, ``nsq_channel_deferred_count``,
  ``nsq_channel_message_count``, ``nsq_channel_requeue_count``, ``nsq_channel_timeout_count``,
  one series per partition (labels ``topic``, ``partition``, [``channel``,] ``paused``): their
  sum over partitions is the /stats value; ``nsq_topic_channel_count`` and
  ``nsq_channel_client_count`` (alias ``nsq_channel_clients``, statsd's name) per topic/channel;
  ``nsqd_info{version,health}``;
* what only pnsq knows: ``pnsq_partition_start_offset`` / ``pnsq_partition_end_offset`` (log
  offsets), ``pnsq_channel_confirmed_offset``, ``pnsq_channel_next_offset`` and
  ``pnsq_channel_lag`` (end offset minus confirmed offset: messages not yet FINed) per channel
  and partition, ``pnsq_replica_lag_bytes{topic,partition,replica}`` (on a leader: the bytes of
  the log a replica, in sync or catching up, still lacks), ``pnsq_connections{type}``, and the
  histograms ``pnsq_publish_latency_seconds`` (one append to a partition log) and
  ``pnsq_fsync_latency_seconds`` (one partition fsync); ``pnsq_segment_fds`` (descriptors held
  by open segment files), ``pnsq_segment_fds_max`` (``--max-segment-fds`` in force) and
  ``pnsq_segment_fd_evictions_total`` (idle segment files closed to stay under it);
  ``pnsq_disk_usage_ratio`` (used share of the data path's file system, 0..1, at the last
  check), ``pnsq_disk_usage_max_ratio`` (``--max-disk-usage-percent`` / 100) and
  ``pnsq_disk_writable`` (0 while publishes are refused for disk space);
  ``pnsq_corrupt_skipped_records_total`` and ``pnsq_corrupt_skipped_bytes_total`` per topic and
  partition (damaged records that reads skipped, since the process started),
  ``pnsq_corrupt_healed_records_total`` (damaged records replaced by an in-sync replica's copy)
  and ``pnsq_corrupt_checkpoints_total`` (damaged checkpoint files moved aside);
* with ``--e2e-processing-latency-percentile``, nsqd's statsd ``e2e_processing_latency_<NN>`` as
  summaries: ``nsq_topic_e2e_processing_latency_seconds{topic,quantile}`` and
  ``nsq_channel_e2e_processing_latency_seconds{topic,channel,quantile}`` (FIN minus publish
  time over the window), each with ``_count`` (FINs in the window);
* the client library's process and Python GC collectors.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from ..broker import Broker, HandleCache
from ..broker.diskguard import DiskGuard
from .memory import GC_PAUSES
from .records import HasStatistics
from .stats import Json, StatsQuery, stats_document

PUBLISH_BUCKETS = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
FSYNC_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip

_TOPIC_GAUGES = (
    ("nsq_topic_depth", "Messages kept for a topic's first channel", "depth"),
    ("nsq_topic_backend_depth", "Topic depth on disk", "backend_depth"),
    ("nsq_topic_message_count", "Messages published to the topic", "message_count"),
    ("nsq_topic_message_bytes", "Bytes published to the topic", "message_bytes"),
)
_CHANNEL_GAUGES = (
    ("nsq_channel_depth", "Messages waiting for delivery", "depth"),
    ("nsq_channel_backend_depth", "Channel depth on disk", "backend_depth"),
    ("nsq_channel_in_flight_count", "Messages delivered and not yet finished", "in_flight_count"),
    ("nsq_channel_deferred_count", "Messages waiting for their delay", "deferred_count"),
    ("nsq_channel_message_count", "Messages put into the channel", "message_count"),
    ("nsq_channel_requeue_count", "Messages requeued (REQ)", "requeue_count"),
    ("nsq_channel_timeout_count", "Messages that timed out in flight", "timeout_count"),
    ("pnsq_channel_confirmed_offset", "Offset below which all is finished", "confirmed_offset"),
    ("pnsq_channel_next_offset", "Next offset the channel reads from the log", "next_offset"),
    ("pnsq_channel_lag", "End offset minus confirmed offset", "lag"),
)

_PARTITION_GAUGES = (
    ("pnsq_partition_start_offset", "First offset still in the partition log", "start_offset"),
    ("pnsq_partition_end_offset", "Offset of the next append to the partition log", "end_offset"),
    (
        "pnsq_partition_high_watermark",
        "Offset below which every in-sync replica holds",
        "high_watermark",
    ),
    (
        "pnsq_partition_leader_epoch",
        "Leader epoch of the partition as this node knows it",
        "leader_epoch",
    ),
    (
        "pnsq_partition_leader",
        "1 if this node leads the partition, 0 if it replicates it",
        "leader",
    ),
    (
        "pnsq_partition_max_replica_lag",
        "Records the furthest in-sync follower is behind (leader)",
        "max_replica_lag",
    ),
)


def _paused(value: object) -> str:
    return "true" if value else "false"


def _add_e2e(family: Metric, labels: dict[str, str], latency: Json) -> None:
    """One topic's or channel's ``e2e_processing_latency`` as summary samples: a quantile
    sample per percentile (seconds) and ``_count`` (FINs in the window); nothing when the
    percentiles are not configured."""
    if not latency["percentiles"]:
        return
    for item in latency["percentiles"]:
        quantile = {**labels, "quantile": format(item["quantile"], "g")}
        family.add_sample(family.name, quantile, item["value"] / 1e9)
    family.add_sample(f"{family.name}_count", labels, latency["count"])


class NsqCollector(Collector):
    """Renders a /stats snapshot, taken at scrape time, as gauges."""

    def __init__(self, snapshot: Callable[[], Json], sessions: Collection[HasStatistics]) -> None:
        self.snapshot = snapshot
        self.sessions = sessions

    def collect(self) -> Iterator[Metric]:
        doc = self.snapshot()
        info = GaugeMetricFamily(
            "nsqd_info", "nsqd version and health", labels=["version", "health"]
        )
        info.add_metric([doc["version"], doc["health"]], 1)
        yield info
        yield from self._topics(doc["topics"] or [])
        yield self._connections()

    def _topics(self, topics: list[Json]) -> Iterator[Metric]:
        topic_gauges = [
            (GaugeMetricFamily(n, h, labels=["topic", "partition", "paused"]), key)
            for n, h, key in _TOPIC_GAUGES
        ]
        channel_gauges = [
            (GaugeMetricFamily(n, h, labels=["topic", "partition", "channel", "paused"]), key)
            for n, h, key in _CHANNEL_GAUGES
        ]
        channel_count = GaugeMetricFamily(
            "nsq_topic_channel_count", "Channels of the topic", labels=["topic", "paused"]
        )
        clients = [
            GaugeMetricFamily(n, "Clients subscribed", labels=["topic", "channel", "paused"])
            for n in ("nsq_channel_client_count", "nsq_channel_clients")
        ]
        offsets = [
            (GaugeMetricFamily(n, h, labels=["topic", "partition"]), key)
            for n, h, key in _PARTITION_GAUGES
        ]
        replica_bytes = GaugeMetricFamily(
            "pnsq_replica_lag_bytes",
            "Bytes of the partition log the replica still lacks (leader)",
            labels=["topic", "partition", "replica"],
        )
        topic_e2e = Metric(
            "nsq_topic_e2e_processing_latency_seconds",
            "FIN time minus publish time over the topic's channels, by quantile "
            "(--e2e-processing-latency-percentile)",
            "summary",
        )
        channel_e2e = Metric(
            "nsq_channel_e2e_processing_latency_seconds",
            "FIN time minus publish time on the channel, by quantile "
            "(--e2e-processing-latency-percentile)",
            "summary",
        )
        for t in topics:
            name, paused = t["topic_name"], _paused(t["paused"])
            channel_count.add_metric([name, paused], len(t["channels"]))
            _add_e2e(topic_e2e, {"topic": name}, t["e2e_processing_latency"])
            for p in t["partitions"]:
                number = str(p["partition"])
                for family, key in topic_gauges:
                    family.add_metric([name, number, paused], p[key])
                for family, key in offsets:
                    family.add_metric([name, number], p[key])
                for replica, behind in sorted(p["replica_lag_bytes"].items()):
                    replica_bytes.add_metric([name, number, replica], behind)
            for c in t["channels"]:
                channel, cpaused = c["channel_name"], _paused(c["paused"])
                for family in clients:
                    family.add_metric([name, channel, cpaused], c["client_count"])
                e2e_labels = {"topic": name, "channel": channel}
                _add_e2e(channel_e2e, e2e_labels, c["e2e_processing_latency"])
                for p in c["partitions"]:
                    labels = [name, str(p["partition"]), channel, cpaused]
                    for family, key in channel_gauges:
                        family.add_metric(labels, p[key])
        yield channel_count
        for family, _ in topic_gauges:
            yield family
        yield from clients
        for family, _ in channel_gauges:
            yield family
        for family, _ in offsets:
            yield family
        yield replica_bytes
        yield topic_e2e
        yield channel_e2e

    def _connections(self) -> Metric:
        counts = {"producer": 0, "consumer": 0, "idle": 0}
        for session in list(self.sessions):
            client = session.statistics()
            if client.pub_counts:
                counts["producer"] += 1
            elif client.subscribed:
                counts["consumer"] += 1
            else:
                counts["idle"] += 1
        family = GaugeMetricFamily(
            "pnsq_connections",
            "TCP connections: producers (have published), consumers (subscribed), idle",
            labels=["type"],
        )
        for kind, count in counts.items():
            family.add_metric([kind], count)
        return family


class SegmentFilesCollector(Collector):
    """The broker's bound on open segment files (:class:`~nsqd.storage.handles.HandleCache`)."""

    def __init__(self, handles: HandleCache) -> None:
        self.handles = handles

    def collect(self) -> Iterator[Metric]:
        handles = self.handles
        yield GaugeMetricFamily(
            "pnsq_segment_fds", "Descriptors held by open segment files", value=handles.open_fds
        )
        yield GaugeMetricFamily(
            "pnsq_segment_fds_max",
            "Open segment files' descriptors kept at most (0: no bound)",
            value=handles.max_fds,
        )
        yield CounterMetricFamily(
            "pnsq_segment_fd_evictions",
            "Idle segment files closed to stay under --max-segment-fds",
            value=handles.evictions,
        )


class DiskCollector(Collector):
    """The disk high-water mark (:class:`~nsqd.broker.diskguard.DiskGuard`)."""

    def __init__(self, disk: DiskGuard) -> None:
        self.disk = disk

    def collect(self) -> Iterator[Metric]:
        disk = self.disk
        yield GaugeMetricFamily(
            "pnsq_disk_usage_ratio",
            "Used share of the data path's file system at the last check",
            value=disk.percent / 100,
        )
        yield GaugeMetricFamily(
            "pnsq_disk_usage_max_ratio",
            "Disk usage past which publishes are refused (--max-disk-usage-percent / 100)",
            value=disk.max_percent / 100,
        )
        yield GaugeMetricFamily(
            "pnsq_disk_writable",
            "1 while publishes are accepted, 0 while refused for disk space",
            value=int(disk.reason is None),
        )


class CorruptionCollector(Collector):
    """Records that reads skipped because their bytes on disk were damaged, per partition."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        records = CounterMetricFamily(
            "pnsq_corrupt_skipped_records",
            "Offsets lost to damaged bytes in segments (skipped on read)",
            labels=labels,
        )
        nbytes = CounterMetricFamily(
            "pnsq_corrupt_skipped_bytes",
            "Bytes of segments skipped with the damaged records",
            labels=labels,
        )
        healed = CounterMetricFamily(
            "pnsq_corrupt_healed_records",
            "Damaged records replaced by an in-sync replica's intact copy",
            labels=labels,
        )
        for topic, partition, lost, skipped_bytes, repaired in self.broker.skipped_records():
            values = [topic, str(partition)]
            records.add_metric(values, lost)
            nbytes.add_metric(values, skipped_bytes)
            healed.add_metric(values, repaired)
        yield records
        yield nbytes
        yield healed
        yield CounterMetricFamily(
            "pnsq_corrupt_checkpoints",
            "Damaged checkpoint files (state.json, pnsq.dat) moved aside since the start",
            value=self.broker.damaged_checkpoints,
        )


class ReplicationCollector(Collector):
    """Partitions led here, those with an in-sync set short of their copies, role changes."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        led = under = 0
        for topic in self.broker.list_topics():
            for partition in topic.partition_statistics():
                led += partition.replication.leads
                under += partition.replication.under_replicated
        yield GaugeMetricFamily("pnsq_leader_partitions", "Partitions led by this node", value=led)
        yield GaugeMetricFamily(
            "pnsq_under_replicated_partitions",
            "Partitions led here whose in-sync set is smaller than their number of copies",
            value=under,
        )
        yield CounterMetricFamily(
            "pnsq_role_changes",
            "Partitions whose role on this node changed (leader <-> replica) by lookupd's word",
            value=self.broker.role_changes,
        )


class Metrics:
    """The metrics of one nsqd: a private registry, the latency histograms (installed on the
    broker as its observers) and the collector over /stats."""

    def __init__(
        self, broker: Broker, sessions: Collection[HasStatistics], version: str = "1.3.0"
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.publish_latency = Histogram(
            "pnsq_publish_latency_seconds",
            "Time to append one publish batch to a partition log",
            buckets=PUBLISH_BUCKETS,
            registry=self.registry,
        )
        self.fsync_latency = Histogram(
            "pnsq_fsync_latency_seconds",
            "Time to fsync one partition log",
            buckets=FSYNC_BUCKETS,
            registry=self.registry,
        )
        broker.publish_latency = self.publish_latency
        broker.fsync_latency = self.fsync_latency

        def snapshot() -> Json:
            query = StatsQuery(include_clients=False, include_mem=False)
            return stats_document(broker, (), query, version)

        self.registry.register(NsqCollector(snapshot, sessions))
        self.registry.register(SegmentFilesCollector(broker.handles))
        self.registry.register(DiskCollector(broker.disk))
        self.registry.register(CorruptionCollector(broker))
        self.registry.register(ReplicationCollector(broker))
        GC_PAUSES.install()  # /stats' gc_pause_usec_* from now on
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(standard)

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition and its content type, negotiated on the ``Accept`` header as the
        client library's own handler does: Prometheus text 0.0.4 by default, OpenMetrics or
        text 1.0.0 when asked for."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type
