"""The composition root: open the broker, start the TCP and HTTP servers, shut down cleanly."""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import resource
import signal
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

import trio

from pnsq._netio.cluster_link import ClusterLinks, client_tls_context
from pnsq._netio.cluster_secret import ClusterSecretError, load_cluster_secret
from pnsq._netio.limits import open_files_limit
from protocol.cluster_auth import http_credential
from protocol.identify import IdentifyLimits
from protocol.parser import ParserLimits

from . import NSQD_VERSION, replication
from .allocator import tune_malloc
from .auth import AuthClient
from .broker import Broker, BrokerConfig, open_broker
from .cluster.forwarding import Forwarder
from .cluster.lookup import LookupClient
from .cluster.registration import LookupIdentity
from .config.options import Options, OptionsError
from .config.runtime import expand_statsd_prefix
from .http.api import NsqdHTTP, serve_http
from .http.context import HTTPContext, HTTPSettings
from .observe.statsd_push import StatsdPusher, StatsdSettings
from .tcp.server import TCPServer
from .tcp.settings import SessionSettings
from .tcp.streams import tls_server_context

log = logging.getLogger("nsqd")

#: seconds a stopping nsqd waits for lookupd to move its leaderships to in-sync replicas
HANDOVER_DEADLINE = 5.0
#: seconds a stopping nsqd waits for its HTTP requests in progress to be answered (parked
#: ``/consume`` long polls answer at once with nothing)
DRAIN_DEADLINE = 2.0


#: the daemon's cyclic-GC thresholds (CPython's default: 700, 10, 10). Every message read
#: makes two GC-tracked objects (its record and its delivery state) and tens of thousands stay
#: alive (the read cache, messages in flight). With the defaults a young collection ran every
#: ~350 messages (about 1 µs of a consumed message) and a full one, which walks every live
#: object, every 30,000-50,000: a 30-60 ms stall of delivery (publish->deliver p99 at 30 k
#: msgs/s: 34 ms). Measured here (docs/benchmarks.md): consume 4.5 -> 3.4 µs/msg, that p99
#: 34 -> about 2 ms. Reference counting still frees everything at once; only garbage in
#: reference cycles waits longer (old cycles about a minute under load).
GC_THRESHOLDS = (2_000, 10, 1_000)


def broker_config(options: Options) -> BrokerConfig:
    """The broker's share of the options."""
    return BrokerConfig(
        data_path=Path(options.data_path or ".").resolve(),
        default_partitions=options.default_partitions,
        default_replicator=options.default_replicator,
        max_bytes_per_file=options.max_bytes_per_file,
        sync_every=options.sync_every,
        sync_timeout=options.sync_timeout,
        mem_queue_size=options.mem_queue_size,
        read_cache_bytes=options.read_cache_bytes,
        retention=options.retention,
        max_req_timeout=options.max_req_timeout,
        max_channel_consumers=options.max_channel_consumers,
        version=NSQD_VERSION,
        max_disk_usage_percent=options.max_disk_usage_percent,
        e2e_percentiles=options.e2e_processing_latency_percentiles,
        e2e_window=options.e2e_processing_latency_window_time,
        producer_state_ttl=options.producer_state_ttl,
        max_producers=options.max_producers,
        max_segment_fds=options.max_segment_fds or segment_fd_budget(open_files_limit()),
    )


def segment_fd_budget(open_files: int) -> int:
    """``--max-segment-fds=0``: a quarter of the open-files limit for segment files, the rest
    for connections, checkpoints and the runtime (at ``ulimit -n 1024``: 256, i.e. 128 active
    partitions open at once; the others reopen on their next use)."""
    if open_files in (resource.RLIM_INFINITY, -1) or open_files > 1 << 22:
        return 1 << 20
    return max(open_files // 4, 16)


def session_settings(options: Options) -> SessionSettings:
    """The protocol limits, TLS context and auth servers of TCP connections.

    Raises:
        OptionsError: the TLS key pair or CA file cannot be loaded.
    """
    ms = 1000
    tls_context = tls_server_context(
        options.tls_cert,
        options.tls_key,
        options.tls_root_ca_file,
        options.tls_client_auth_policy,
        options.tls_min_version,
    )
    # links with other nodes run over TLS only when the node can verify them: a certificate and
    # the cluster's root CA (a node with a certificate for its clients alone, self-signed or from
    # a public CA, keeps plaintext links, as before; docs/security.md)
    link_tls_context = None
    if tls_context is not None and options.tls_root_ca_file:
        try:
            link_tls_context = client_tls_context(
                options.tls_cert, options.tls_key, options.tls_root_ca_file, options.tls_min_version
            )
        except (OSError, ssl.SSLError) as exc:
            raise OptionsError(f"failed to build TLS config for cluster links - {exc}") from exc
    auth = None
    if options.auth_http_addresses:
        auth = AuthClient(
            options.auth_http_addresses,
            method=options.auth_http_request_method,
            connect_timeout=options.http_client_connect_timeout,
            request_timeout=options.http_client_request_timeout,
            root_ca_file=options.tls_root_ca_file,
        )
    return SessionSettings(
        parser=ParserLimits(
            max_msg_size=options.max_msg_size,
            max_body_size=options.max_body_size,
            max_rdy_count=options.max_rdy_count,
            max_req_timeout_ms=int(options.max_req_timeout * ms),
        ),
        identify=IdentifyLimits(
            max_heartbeat_interval_ms=int(options.max_heartbeat_interval * ms),
            max_output_buffer_size=options.max_output_buffer_size,
            min_output_buffer_timeout_ms=int(options.min_output_buffer_timeout * ms),
            max_output_buffer_timeout_ms=int(options.max_output_buffer_timeout * ms),
            default_output_buffer_timeout_ms=int(options.output_buffer_timeout * ms),
            max_msg_timeout_ms=int(options.max_msg_timeout * ms),
            default_msg_timeout_ms=int(options.msg_timeout * ms),
            max_deflate_level=options.max_deflate_level,
            tls_available=tls_context is not None,
            snappy_available=options.snappy,
            deflate_available=options.deflate,
        ),
        max_rdy_count=options.max_rdy_count,
        max_pending_output_bytes=options.max_pending_output_bytes,
        busy_poll=options.busy_poll,
        version=NSQD_VERSION,
        tls_context=tls_context,
        link_tls_context=link_tls_context,
        # nsqd: "true" and "tcp-https" both require TLS on TCP ("tcp-https" spares only HTTP)
        tls_required=options.tls_required != "false",
        auth=auth,
    )


@contextmanager
def locked_data_path(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data directory, as nsqd does (released even on kill -9)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # the CLI prints it as one FATAL line
        raise OSError(exc.errno, f"--data-path={path} unusable - {exc.strerror}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise SystemExit(
                f"FATAL: --data-path={path} in use (possibly by another nsqd)"
            ) from exc
        yield
    finally:
        os.close(fd)


async def run_nsqd(
    options: Options,
    settings: SessionSettings | None = None,
    *,
    stopping: trio.Event | None = None,
    secret: bytes = b"",
    task_status: trio.TaskStatus[tuple[int, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run nsqd until cancelled, or until ``stopping`` is set: then hand the partitions it
    leads over to in-sync replicas (at most :data:`HANDOVER_DEADLINE` seconds) and return.
    Reports ``(tcp_port, http_port)`` once both listen. ``settings``:
    :func:`session_settings` of ``options``, if already built. ``secret``: the cluster
    credential (:func:`cluster_secret`; ``b""``: cluster links unauthenticated)."""
    config = broker_config(options)
    settings = settings or session_settings(options)
    log.info("NSQ: persisting topic/channel metadata and messages in %s", config.data_path)
    with locked_data_path(config.data_path):
        async with open_broker(config) as broker, trio.open_nursery() as nursery:
            lookup, apps = await _start_servers(
                options, settings, broker, nursery, secret, task_status
            )
            if stopping is None:
                await trio.sleep_forever()
            else:
                await stopping.wait()
                with trio.move_on_after(DRAIN_DEADLINE):  # parked HTTP long polls answer
                    for app in apps:
                        await app.drain()
                with trio.move_on_after(HANDOVER_DEADLINE):
                    await lookup.hand_over()
                nursery.cancel_scope.cancel()


async def _start_servers(
    options: Options,
    settings: SessionSettings,
    broker: Broker,
    nursery: trio.Nursery,
    secret: bytes,
    task_status: trio.TaskStatus[tuple[int, int]],
) -> tuple[LookupClient, list[NsqdHTTP]]:
    tcp_host, tcp_port = options.tcp_host_port()
    http_host, http_port = options.http_host_port()
    identity = LookupIdentity(
        NSQD_VERSION, 0, 0, socket.gethostname(), options.broadcast_address, options.rack
    )
    lookup = LookupClient(
        broker,
        identity,
        options.lookupd_tcp_addresses,
        replica_lag_max=options.replica_lag_max,
        secret=secret,
    )
    # links with other nodes: TLS when this node has a certificate and a root CA, the credential
    # with a secret (without one, links are not authenticated)
    links = ClusterLinks(
        lambda: lookup.identity.node_id,
        broker.clock.monotonic,
        logging.getLogger("nsqd.links"),
        secret=secret,
        client_tls=settings.link_tls_context,
        server_tls=settings.tls_context if settings.link_tls_context is not None else None,
    )
    forwarder = Forwarder(
        lookup.pnsq_http_addresses,
        lambda: lookup.identity.node_id,
        broker.clock.monotonic,
        secret=secret,
        links=links,
    )
    settings = replace(settings, forwarder=forwarder)
    # links are served by a cluster node, or by any node holding the cluster credential; a
    # standalone nsqd without one has no followers and serves no link (a stranger's HELLO or
    # forwarded PUB would otherwise go around AUTH): their magics are refused as unknown ones
    serves_links = bool(secret or options.lookupd_tcp_addresses)
    tcp = TCPServer(broker, settings, links if serves_links else None)
    if serves_links:
        tcp.add_link(
            replication.MAGIC,
            partial(
                replication.serve_follower,
                broker,
                links=links,
                catchup_rate=options.replica_move_rate,
            ),
        )
    tcp_port = await nursery.start(tcp.serve, tcp_host, tcp_port)
    http_settings = HTTPSettings(
        max_msg_size=options.max_msg_size,
        max_body_size=options.max_body_size,
        max_req_timeout_ms=int(options.max_req_timeout * 1000),
        broadcast_address=options.broadcast_address,
        tcp_port=options.broadcast_tcp_port or tcp_port,
        max_heartbeat_interval_ns=int(options.max_heartbeat_interval * 1e9),
        max_output_buffer_size=options.max_output_buffer_size,
        max_output_buffer_timeout_ns=int(options.max_output_buffer_timeout * 1e9),
        max_deflate_level=options.max_deflate_level,
        version=NSQD_VERSION,
        msg_timeout_ms=int(options.msg_timeout * 1000),
        max_msg_timeout_ms=int(options.max_msg_timeout * 1000),
        max_rdy_count=options.max_rdy_count,
    )
    context = HTTPContext(  # one for both listeners: consume leases, metrics, /config
        broker,
        http_settings,
        sessions=tcp.sessions,
        options=options,
        on_lookupd_change=lookup.set_addresses,
        forwarder=forwarder,
        auth=settings.auth,  # the endpoints that hand out messages ask it too
        cluster_credential=http_credential(secret) if secret else "",
    )
    app = NsqdHTTP(context)
    secure = None
    if options.tls_cert and options.tls_key:  # nsqd serves HTTPS only with TLS configured
        https_host, https_port = options.https_host_port()
        secure = NsqdHTTP(context)
        https_port = await nursery.start(
            partial(serve_http, certfile=options.tls_cert, keyfile=options.tls_key),
            secure,
            https_host,
            https_port,
        )
        if options.tls_required == "true":  # "tcp-https" leaves plain HTTP open
            app.tls_required_https_port = https_port
    http_port = await nursery.start(serve_http, app, http_host, http_port)
    context.settings = _with_http_port(http_settings, options.broadcast_http_port or http_port)
    lookup.identity = replace(
        identity, tcp_port=http_settings.tcp_port, http_port=context.settings.http_port
    )
    if options.statsd_address:
        nursery.start_soon(StatsdPusher(broker, statsd_settings(options, context.settings)).run)
    nursery.start_soon(lookup.run)  # registers with --lookupd-tcp-address (none: idle)
    # partitions held as replica follow their leaders (none unless lookupd places replicas)
    nursery.start_soon(replication.Followers(broker, lookup.identity.node_id, links).run)
    task_status.started((tcp_port, http_port))
    return lookup, [app] if secure is None else [app, secure]


def statsd_settings(options: Options, http: HTTPSettings) -> StatsdSettings:
    """The ``--statsd-*`` options, the prefix expanded with the broadcast address and the HTTP
    port announced (known once the HTTP listener is bound), as nsqd does at start-up."""
    return StatsdSettings(
        address=options.statsd_address,
        prefix=expand_statsd_prefix(
            options.statsd_prefix, options.broadcast_address, http.http_port
        ),
        interval=options.statsd_interval,
        mem_stats=options.statsd_mem_stats,
        packet_size=options.statsd_udp_packet_size,
        exclude_ephemeral=options.statsd_exclude_ephemeral,
    )


def _with_http_port(settings: HTTPSettings, port: int) -> HTTPSettings:
    return replace(settings, http_port=port)


def tune_gc() -> None:
    """The daemon's collector settings (:data:`GC_THRESHOLDS`)."""
    gc.set_threshold(*GC_THRESHOLDS)


def cluster_secret(options: Options) -> bytes:
    """The cluster credential (``b""``: none), read once at start. A cluster node (one given
    ``--lookupd-tcp-address``) refuses to run without one when a client-facing protection is
    on, which a replication peer could otherwise bypass; a standalone nsqd serves no
    replication (see :func:`run_nsqd`), so it runs as Go nsqd does, with no credential.

    Raises:
        ClusterSecretError: see :func:`~pnsq._netio.cluster_secret.load_cluster_secret`.
    """
    cluster = bool(options.lookupd_tcp_addresses)
    required_by = []
    if cluster and options.auth_http_addresses:
        required_by.append("--auth-http-address")
    if cluster and options.tls_required != "false":
        required_by.append("--tls-required")
    return load_cluster_secret(options.cluster_secret_file, required_by, log, links=cluster)


async def main(options: Options) -> None:
    """Run until SIGINT/SIGTERM, then checkpoint and exit."""
    try:
        secret = cluster_secret(options)  # first: what matters even before TLS files load
        settings = session_settings(options)
    except (OptionsError, ClusterSecretError) as exc:
        log.critical("FATAL: failed to instantiate nsqd - %s", exc)
        raise SystemExit(1) from exc
    tune_gc()
    tune_malloc()
    stopping = trio.Event()
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def run() -> None:
                await run_nsqd(options, settings, stopping=stopping, secret=secret)
                nursery.cancel_scope.cancel()  # done: stop listening for signals

            nursery.start_soon(run)
            async for signum in signals:
                if stopping.is_set():  # a second signal: no more waiting
                    log.info("received signal %s again: exiting now", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    break
                log.info("received signal %s: exiting", signal.Signals(signum).name)
                stopping.set()
