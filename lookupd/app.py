"""The composition root: load the metadata, start the TCP and HTTP listeners, run until
cancelled."""

from __future__ import annotations

import logging
import signal
import socket

import trio

from pnsq._netio.cluster_secret import ClusterSecretError, load_cluster_secret

from . import LOOKUPD_VERSION
from .config.options import Options
from .core.decide import Settings
from .core.views import Timeouts
from .ha.codec import NodeInfo, node_id
from .ha.etcd import EtcdClient
from .ha.leadership import HighAvailability
from .http.api import LookupHTTP, serve_http
from .http.metrics import LookupdMetrics
from .state.cluster import Cluster
from .state.store import MetadataStore, StoreError
from .state.supervisor import Supervisor
from .tcp.server import LookupTCPServer

log = logging.getLogger("nsqlookupd")


async def run_lookupd(
    options: Options,
    *,
    secret: bytes = b"",
    task_status: trio.TaskStatus[tuple[int, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run nsqlookupd until cancelled; reports ``(tcp_port, http_port)`` once both listen.
    ``secret``: the cluster credential its V1 port and cluster-control endpoints require
    (``b""``: none).

    With ``--cluster-id`` and ``--cluster-leadership-addresses`` the metadata is in etcd and
    the lookupds elect a leader (:mod:`lookupd.ha.leadership`); ``--data-path`` is then not used.

    Raises:
        StoreError: the metadata file in ``--data-path`` is unreadable, or etcd is unreachable
            at start-up.
    """
    store = MetadataStore(None if options.cluster_id else options.data_directory)
    timeouts = Timeouts(options.inactive_producer_timeout, options.tombstone_lifetime)
    cluster = Cluster(store, timeouts, heartbeat_timeout=options.heartbeat_timeout)
    supervisor = Supervisor(
        cluster,
        Settings(
            heartbeat_timeout=options.heartbeat_timeout,
            replace_after=options.replica_replace_after,
            auto_balance=options.auto_balance,
        ),
    )
    ha: HighAvailability | None = None
    etcd: EtcdClient | None = None
    if options.cluster_id:
        etcd = EtcdClient(options.etcd_endpoints)
        ha = HighAvailability(cluster, etcd, options.cluster_id, supervisor)
        try:
            await ha.load()
        except StoreError:
            await etcd.aclose()
            raise
    else:
        cluster.load()
    try:
        await _serve(options, cluster, supervisor, ha, secret, task_status)
    finally:
        with trio.CancelScope(shield=True):
            if etcd is not None:
                await etcd.aclose()
            else:
                await _compact(store)


async def _compact(store: MetadataStore) -> None:
    """On the way out: the metadata journal folded into its snapshot (:meth:`compact`)."""
    try:
        await trio.to_thread.run_sync(store.compact)
    except StoreError as exc:  # the journal stays, and the next start reads it
        log.error("metadata journal not folded into %s: %s", store, exc)


async def _serve(
    options: Options,
    cluster: Cluster,
    supervisor: Supervisor,
    ha: HighAvailability | None,
    secret: bytes,
    task_status: trio.TaskStatus[tuple[int, int]],
) -> None:
    ports = {"tcp": 0, "http": 0}
    async with trio.open_nursery() as nursery:
        cluster.attach(nursery)
        tcp = LookupTCPServer(cluster, secret)
        tcp_host, tcp_port = options.tcp_host_port()
        ports["tcp"] = await nursery.start(tcp.serve, tcp_host, tcp_port)

        def self_address() -> tuple[str, int, int]:
            return options.broadcast_address, ports["tcp"], ports["http"]

        app = LookupHTTP(
            cluster,
            LOOKUPD_VERSION,
            self_address,
            LookupdMetrics(cluster, supervisor).render,
            ha=ha,
            secret=secret,
            auto_balance=options.auto_balance,
        )
        http_host, http_port = options.http_host_port()
        ports["http"] = await nursery.start(serve_http, app, http_host, http_port)
        tcp.set_reply_info(
            {
                "broadcast_address": options.broadcast_address,
                "hostname": socket.gethostname(),
                "http_port": ports["http"],
                "tcp_port": ports["tcp"],
                "version": LOOKUPD_VERSION,
            }
        )
        if ha is None:
            nursery.start_soon(supervisor.run)  # failover, in-sync sets, re-replication
        else:  # the supervisor runs while this lookupd is the elected leader
            me = NodeInfo(
                node_id(options.broadcast_address, ports["tcp"], ports["http"]),
                options.broadcast_address,
                ports["tcp"],
                ports["http"],
            )
            nursery.start_soon(ha.run, me)
        task_status.started((ports["tcp"], ports["http"]))
        try:
            await trio.sleep_forever()
        finally:
            if app.forwarder is not None:
                with trio.CancelScope(shield=True):
                    await app.forwarder.aclose()


async def main(options: Options) -> None:
    """Run until SIGINT/SIGTERM."""
    try:  # read once at start; lookupd has no client-facing protection that requires it
        secret = load_cluster_secret(options.cluster_secret_file, (), log)
    except ClusterSecretError as exc:
        log.critical("FATAL: %s", exc)
        raise SystemExit(1) from exc
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            nursery.start_soon(_run_or_exit, options, secret)
            async for signum in signals:
                log.info("received signal %s: exiting", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


async def _run_or_exit(options: Options, secret: bytes) -> None:
    try:
        await run_lookupd(options, secret=secret)
    except StoreError as exc:
        log.critical("FATAL: %s", exc)
        raise SystemExit(1) from exc
