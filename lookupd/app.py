"""The composition root: load the metadata, start the TCP and HTTP listeners, run until
cancelled."""

from __future__ import annotations

import logging
import signal
import socket

import trio

from .cluster import Cluster
from .decide import Settings
from .http_api import LookupHTTP, serve_http
from .metrics import LookupdMetrics
from .options import Options
from .store import MetadataStore, StoreError
from .supervisor import Supervisor
from .tcp import LookupTCPServer
from .views import Timeouts

log = logging.getLogger("nsqlookupd")

LOOKUPD_VERSION = "1.3.0"  # the nsqlookupd version whose protocol and API pnsq speaks


async def run_lookupd(
    options: Options,
    *,
    task_status: trio.TaskStatus[tuple[int, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run nsqlookupd until cancelled; reports ``(tcp_port, http_port)`` once both listen.

    Raises:
        StoreError: the metadata file in ``--data-path`` is unreadable.
    """
    store = MetadataStore(options.data_directory)
    timeouts = Timeouts(options.inactive_producer_timeout, options.tombstone_lifetime)
    cluster = Cluster(store, timeouts, heartbeat_timeout=options.heartbeat_timeout)
    cluster.load()
    supervisor = Supervisor(
        cluster,
        Settings(
            heartbeat_timeout=options.heartbeat_timeout,
            replace_after=options.replica_replace_after,
        ),
    )
    ports = {"tcp": 0, "http": 0}
    async with trio.open_nursery() as nursery:
        cluster.attach(nursery)
        tcp = LookupTCPServer(cluster)
        tcp_host, tcp_port = options.tcp_host_port()
        ports["tcp"] = await nursery.start(tcp.serve, tcp_host, tcp_port)

        def self_address() -> tuple[str, int, int]:
            return options.broadcast_address, ports["tcp"], ports["http"]

        app = LookupHTTP(
            cluster, LOOKUPD_VERSION, self_address, LookupdMetrics(cluster, supervisor).render
        )
        http_host, http_port = options.http_host_port()
        ports["http"] = await nursery.start(serve_http, app, http_host, http_port)
        tcp.reply_info = {
            "broadcast_address": options.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": ports["http"],
            "tcp_port": ports["tcp"],
            "version": LOOKUPD_VERSION,
        }
        nursery.start_soon(supervisor.run)  # failover, in-sync sets, re-replication
        task_status.started((ports["tcp"], ports["http"]))
        await trio.sleep_forever()


async def main(options: Options) -> None:
    """Run until SIGINT/SIGTERM."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            nursery.start_soon(_run_or_exit, options)
            async for signum in signals:
                log.info("received signal %s: exiting", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


async def _run_or_exit(options: Options) -> None:
    try:
        await run_lookupd(options)
    except StoreError as exc:
        log.critical("FATAL: %s", exc)
        raise SystemExit(1) from exc
