"""The composition root: open the broker, start the TCP and HTTP servers, shut down cleanly."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from protocol.identify import IdentifyLimits
from protocol.parser import ParserLimits

from . import __version__
from .broker import Broker, BrokerConfig, open_broker
from .http_api import HTTPSettings, NsqdHTTP, serve_http
from .options import Options
from .session import SessionSettings
from .tcp import TCPServer

log = logging.getLogger("nsqd")

NSQD_VERSION = "1.3.0"  # the nsqd version whose protocol and API pnsq speaks


def broker_config(options: Options) -> BrokerConfig:
    """The broker's share of the options."""
    return BrokerConfig(
        data_path=Path(options.data_path or ".").resolve(),
        default_partitions=options.default_partitions,
        max_bytes_per_file=options.max_bytes_per_file,
        sync_every=options.sync_every,
        sync_timeout=options.sync_timeout,
        mem_queue_size=options.mem_queue_size,
        retention=options.retention,
        max_req_timeout=options.max_req_timeout,
        max_channel_consumers=options.max_channel_consumers,
        version=NSQD_VERSION,
    )


def session_settings(options: Options) -> SessionSettings:
    """The protocol limits of a TCP connection."""
    ms = 1000
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
        ),
        max_rdy_count=options.max_rdy_count,
        version=NSQD_VERSION,
        auth_required=bool(options.auth_http_addresses),
    )


@contextmanager
def locked_data_path(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data directory, as nsqd does (released even on kill -9)."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
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
    *,
    task_status: trio.TaskStatus[tuple[int, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run nsqd until cancelled; reports ``(tcp_port, http_port)`` once both listen."""
    config = broker_config(options)
    with locked_data_path(config.data_path):
        async with open_broker(config) as broker, trio.open_nursery() as nursery:
            await _start_servers(options, broker, nursery, task_status)
            await trio.sleep_forever()


async def _start_servers(
    options: Options,
    broker: Broker,
    nursery: trio.Nursery,
    task_status: trio.TaskStatus[tuple[int, int]],
) -> None:
    tcp_host, tcp_port = options.tcp_host_port()
    http_host, http_port = options.http_host_port()
    tcp = TCPServer(broker, session_settings(options))
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
    )
    app = NsqdHTTP(broker, http_settings)
    http_port = await nursery.start(serve_http, app, http_host, http_port)
    app.settings = _with_http_port(http_settings, options.broadcast_http_port or http_port)
    log.info(
        "nsqd v%s (pnsq %s) TCP %s:%d HTTP %s:%d data %s",
        NSQD_VERSION,
        __version__,
        tcp_host or "0.0.0.0",
        tcp_port,
        http_host or "0.0.0.0",
        http_port,
        broker.config.data_path,
    )
    task_status.started((tcp_port, http_port))


def _with_http_port(settings: HTTPSettings, port: int) -> HTTPSettings:
    from dataclasses import replace

    return replace(settings, http_port=port)


async def main(options: Options) -> None:
    """Run until SIGINT/SIGTERM, then checkpoint and exit."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            nursery.start_soon(run_nsqd, options)
            async for signum in signals:
                log.info("received signal %s: exiting", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
