"""The statsd task: every ``--statsd-interval`` the broker's statistics go over UDP to
``--statsd-address``, as nsqd 1.3.0's ``statsdLoop`` sends them (lines and packets:
:mod:`nsqd.observe.statsd`).

Go's timing is kept: the first push one interval after start, then on a fixed cadence (a push
that overran skips the ticks it missed, as a Go ticker drops them); the address is resolved
afresh at every push (a statsd moved behind its name is found again); the packets of one push
are spread over the interval less one second, so a large node does not burst into the statsd
server's socket buffer. A push that cannot resolve or open its socket is skipped and logged,
and its counters roll into the next push's deltas; a packet the network refuses is dropped, as
UDP would. Time comes from the broker's clock.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

import trio

from pnsq._goflag.addresses import parse_host_port

from ..broker import Broker
from .memory import memory_stats
from .statsd import Previous, pack, push_metrics

__all__ = ["StatsdPusher", "StatsdSettings"]

log = logging.getLogger("nsqd.statsd")

#: seconds of the interval not used to spread packets (Go: ``interval - time.Second``)
SPREAD_MARGIN = 1.0


@dataclass(frozen=True, slots=True)
class StatsdSettings:
    """The ``--statsd-*`` options in force; ``prefix`` already expanded (host key, final
    dot)."""

    address: str
    prefix: str
    interval: float
    mem_stats: bool = True
    packet_size: int = 508
    exclude_ephemeral: bool = False


class StatsdPusher:
    """Pushes the broker's statistics to statsd until cancelled."""

    def __init__(self, broker: Broker, settings: StatsdSettings) -> None:
        self.broker = broker
        self.settings = settings
        self._previous = Previous()

    def packets(self) -> list[bytes]:
        """One push's packets now (and the counters the next push's deltas start from)."""
        percentiles = self.broker.config.e2e_percentiles
        now_ns = self.broker.clock.now_ns() if percentiles else 0
        topics = [t.statistics(percentiles, now_ns) for t in self.broker.list_topics()]
        metrics, self._previous = push_metrics(
            topics,
            self._previous,
            exclude_ephemeral=self.settings.exclude_ephemeral,
            memory=memory_stats() if self.settings.mem_stats else None,
        )
        prefix = self.settings.prefix
        return pack((m.line(prefix) for m in metrics), self.settings.packet_size)

    async def run(self) -> None:
        """Push every interval, on the ticks of a fixed cadence."""
        clock = self.broker.clock
        interval = self.settings.interval
        next_at = clock.monotonic() + interval
        while True:
            await trio.sleep_until(next_at)
            await self.push()
            now = clock.monotonic()
            next_at += interval
            while next_at <= now:
                next_at += interval

    async def push(self) -> None:
        """One push: open the socket, then send the packets spread over the interval."""
        address = self.settings.address
        try:
            sock = await _connect(address)
        except (OSError, ValueError) as exc:
            log.error("failed to create UDP socket to statsd(%s) - %s", address, exc)
            return
        log.info("STATSD: pushing stats to %s", address)
        with sock:
            packets = self.packets()
            if not packets:
                return
            step = max(self.settings.interval - SPREAD_MARGIN, 0.0) / len(packets)
            for packet in packets:
                try:
                    await sock.send(packet)
                except OSError as exc:  # e.g. ICMP port unreachable from an earlier send
                    log.debug("statsd packet to %s dropped - %s", address, exc)
                await trio.sleep(step)


async def _connect(address: str) -> trio.socket.SocketType:
    """A UDP socket connected to ``host:port`` (an empty host: this machine, as Go dials)."""
    host, port = parse_host_port(address)
    infos = await trio.socket.getaddrinfo(host or None, port, type=socket.SOCK_DGRAM)
    if not infos:
        raise OSError(f"no address for {address}")
    family, kind, proto, _, sockaddr = infos[0]
    sock = trio.socket.socket(family, kind, proto)
    try:
        await sock.connect(sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock
