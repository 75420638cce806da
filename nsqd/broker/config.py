"""The broker's configuration: its share of nsqd's options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..storage.cache import DEFAULT_CACHE_BYTES


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """What the broker needs of nsqd's options (durations in seconds)."""

    data_path: Path
    default_partitions: int = 1
    default_replicator: int = 1  # copies of a topic created through pnsq's lookupd
    max_bytes_per_file: int = 100 * 1024 * 1024
    sync_every: int = 2500
    sync_timeout: float = 2.0
    mem_queue_size: int = 10_000
    read_cache_bytes: int = DEFAULT_CACHE_BYTES  # all partition logs' tail caches together
    retention: float = 7 * 24 * 3600.0
    retention_check_interval: float = 60.0
    max_req_timeout: float = 3600.0
    max_channel_consumers: int = 0  # 0: unlimited
    version: str = "1.3.0"
    max_segment_fds: int = 0  # descriptors of open segment files kept at most (0: no bound)
    max_disk_usage_percent: int = 95  # past it, publishes are refused (E_FAILED_ON_NOT_WRITABLE)
    # --e2e-processing-latency-percentile (largest first; none: not measured) and -window-time
    e2e_percentiles: tuple[float, ...] = ()
    e2e_window: float = 600.0
    producer_state_ttl: float = 24 * 3600.0  # a numbering producer idle this long is forgotten
    max_producers: int = 10_000  # numbering producers a partition keeps (least recent go)

    @property
    def durable_acks(self) -> bool:
        """True when acks wait for fsync (``--sync-every=1``)."""
        return self.sync_every <= 1
