"""nsqd's options: the configuration of one daemon, nsqd 1.3.0's defaults and start-up checks.

:class:`Options` holds every setting of nsqd 1.3.0 plus pnsq's own (``default_partitions``,
``retention``, ``max_disk_usage_percent``, ``read_cache_bytes``, ``max_pending_output_bytes``,
``busy_poll``) and ``auth_http_request_method`` from nsqd's master branch;
:func:`validate_options` applies nsqd's start-up checks. An attribute is named after its
command-line flag with ``-`` → ``_`` (:func:`attribute_name`), except ``--version``
(``show_version``) and the repeatable flags, which are plural: ``lookupd_tcp_addresses``,
``auth_http_addresses``, ``e2e_processing_latency_percentiles`` (the names nsqd's config file
uses). Durations are float seconds. The command line itself is :mod:`nsqd.config.flags`.

Errors: :class:`OptionsError` for values nsqd rejects at start-up (nsqd logs
``FATAL: failed to instantiate nsqd - <message>`` and exits 1).
"""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import zlib
from dataclasses import dataclass, field

from pnsq._goflag.addresses import address_kind, parse_host_port
from pnsq._goflag.syntax import format_go_float

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")
TLS_VERSIONS = ("tls1.0", "tls1.1", "tls1.2", "tls1.3")
_ATTRIBUTES = {
    "version": "show_version",
    "auth-http-address": "auth_http_addresses",
    "lookupd-tcp-address": "lookupd_tcp_addresses",
    "e2e-processing-latency-percentile": "e2e_processing_latency_percentiles",
}


class OptionsError(ValueError):
    """An option value nsqd refuses at start-up; the message is nsqd's text where it has one."""


def default_node_id(hostname: str | None = None) -> int:
    """nsqd's default ``--node-id``: ``crc32(md5(hostname)) % 1024``."""
    name = socket.gethostname() if hostname is None else hostname
    digest = hashlib.md5(name.encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


@dataclass(frozen=True, slots=True)
class Options:
    """nsqd's configuration. ``Options()`` holds nsqd's defaults for this host."""

    # basic
    show_version: bool = False
    config: str = ""
    log_level: str = "info"  # lower case: debug, info, warn, error or fatal
    log_prefix: str = "[nsqd] "
    verbose: bool = False  # deprecated, no effect
    node_id: int = field(default_factory=default_node_id)
    worker_id: bool = False  # deprecated, no effect
    https_address: str = "0.0.0.0:4152"
    http_address: str = "0.0.0.0:4151"
    tcp_address: str = "0.0.0.0:4150"
    auth_http_addresses: tuple[str, ...] = ()
    auth_http_request_method: str = "get"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0  # 0: the port --tcp-address listens on
    broadcast_http_port: int = 0  # 0: the port --http-address listens on
    lookupd_tcp_addresses: tuple[str, ...] = ()
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    # disk queue
    data_path: str = ""  # "": the current directory
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 104857600
    sync_every: int = 2500
    sync_timeout: float = 2.0
    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20
    # messages and commands
    msg_timeout: float = 60.0
    max_msg_timeout: float = 900.0
    max_msg_size: int = 1048576
    max_req_timeout: float = 3600.0
    max_body_size: int = 5242880
    # client-overridable
    max_heartbeat_interval: float = 60.0
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65536
    max_output_buffer_timeout: float = 30.0
    min_output_buffer_timeout: float = 0.025
    output_buffer_timeout: float = 0.25
    max_channel_consumers: int = 0  # 0: unlimited
    # statsd
    statsd_address: str = ""
    statsd_interval: float = 60.0
    statsd_mem_stats: bool = True
    statsd_prefix: str = "nsq.%s"
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False
    # end-to-end latency
    e2e_processing_latency_percentiles: tuple[float, ...] = ()  # sorted, largest first
    e2e_processing_latency_window_time: float = 600.0
    # TLS
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""  # "", "require" or "require-verify"
    tls_root_ca_file: str = ""
    tls_required: str = "false"  # "false", "true" or "tcp-https"
    tls_min_version: str = "tls1.0"
    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True
    # pnsq's own
    default_partitions: int = 1
    default_replicator: int = 1  # copies of a topic created through pnsq's lookupd
    replica_lag_max: float = 10.0  # a follower behind this long is reported lagging
    replica_move_rate: int = 32 << 20  # bytes/s to a follower outside the in-sync set
    producer_state_ttl: float = 86400.0  # a numbering producer idle this long is forgotten
    max_producers: int = 10_000  # numbering producers a partition keeps (least recent go)
    retention: float = 604800.0
    max_disk_usage_percent: int = 95
    read_cache_bytes: int = 16 * 1024 * 1024  # every partition's tail cache together
    max_pending_output_bytes: int = 1024 * 1024  # message frames queued for one consumer
    busy_poll: float = 200e-6  # seconds the publish reactor polls on after close turns
    max_segment_fds: int = 0  # 0: a quarter of the open-files limit (see segment_fd_budget)
    cluster_secret_file: str = ""  # the cluster credential (pnsq._netio.cluster_secret)
    rack: str = field(default_factory=socket.gethostname)  # failure domain, for placement

    def tcp_host_port(self) -> tuple[str, int]:
        """``--tcp-address`` as ``(host, port)`` (Go host:port syntax)."""
        return parse_host_port(self.tcp_address)

    def http_host_port(self) -> tuple[str, int]:
        """``--http-address`` as ``(host, port)`` (Go host:port syntax)."""
        return parse_host_port(self.http_address)

    def https_host_port(self) -> tuple[str, int]:
        """``--https-address`` as ``(host, port)`` (Go host:port syntax)."""
        return parse_host_port(self.https_address)


def attribute_name(flag: str) -> str:
    """The :class:`Options` attribute that holds ``--flag``."""
    return _ATTRIBUTES.get(flag, flag.replace("-", "_"))


def validate_options(options: Options) -> Options:
    """nsqd's start-up checks, in nsqd's order, plus pnsq's. Returns the options with nsqd's
    adjustment applied (``--tls-client-auth-policy`` implies ``--tls-required``). With
    ``--version`` nothing is checked: nsqd prints its version before validating."""
    if options.show_version:
        return options
    if not 1 <= options.max_deflate_level <= 9:
        raise OptionsError("--max-deflate-level must be [1,9]")
    if not 0 <= options.node_id < 1024:
        raise OptionsError("--node-id must be [0,1024)")
    if options.tls_client_auth_policy and options.tls_required == "false":
        options = dataclasses.replace(options, tls_required="true")
    if options.tls_required != "false" and not (options.tls_cert or options.tls_key):
        raise OptionsError("cannot require TLS client connections without TLS key and cert")
    for percentile in options.e2e_processing_latency_percentiles:
        if not 0 < percentile <= 1:  # also rejects NaN, which nsqd lets through
            text = format_go_float(percentile)
            raise OptionsError(f"invalid E2E processing latency percentile: {text}")
    if options.auth_http_request_method not in ("get", "post"):
        raise OptionsError("--auth-http-request-method must be post or get")
    if options.statsd_address and options.statsd_interval <= 0:  # nsqd's ticker panics
        raise OptionsError("--statsd-interval must be positive")
    if options.default_partitions < 1:
        raise OptionsError("--default-partitions must be >= 1")
    if not 1 <= options.default_replicator <= 5:
        raise OptionsError("--default-replicator must be between 1 and 5")
    if options.replica_lag_max <= 0:
        raise OptionsError("--replica-lag-max must be positive")
    if options.producer_state_ttl <= 0:
        raise OptionsError("--producer-state-ttl must be positive")
    if options.max_producers <= 0:
        raise OptionsError("--max-producers must be positive")
    if options.replica_move_rate <= 0:
        raise OptionsError("--replica-move-rate must be positive")
    if options.retention < 0:
        raise OptionsError("--retention must not be negative")
    if not 1 <= options.max_disk_usage_percent <= 100:
        raise OptionsError("--max-disk-usage-percent must be [1,100]")
    if options.read_cache_bytes < 0:
        raise OptionsError("--read-cache-bytes must not be negative")
    if not 0 <= options.busy_poll <= 0.01:
        raise OptionsError("--busy-poll must be between 0 and 10ms")
    if options.max_pending_output_bytes < 1:
        raise OptionsError("--max-pending-output-bytes must be >= 1")
    if options.max_segment_fds < 0:
        raise OptionsError("--max-segment-fds must not be negative")
    listeners = ["tcp-address", "http-address"]
    if options.tls_cert or options.tls_key:
        listeners.append("https-address")  # nsqd listens for HTTPS only with TLS configured
    for flag in listeners:
        address = getattr(options, attribute_name(flag))
        if address and address_kind(address) == "tcp":
            try:
                parse_host_port(address)
            except ValueError as exc:
                raise OptionsError(f"--{flag}: {exc}") from None
    return options
