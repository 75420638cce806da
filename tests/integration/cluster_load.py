"""A three-node pnsq cluster on racks, and continuous load through pnsq's client while an
operator's action runs: what the partition-move and cluster-operation tests share."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

from pnsq.client import open_consumer, open_producer
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import free_port

BODY_SIZE = 1024  # bytes of a backlog message
T = TypeVar("T")


class RackedCluster:
    """A pnsq lookupd and nsqd a, b, c on racks r-a, r-b, r-c, on fixed ports (a restarted
    daemon keeps its address; a restarted lookupd its metadata)."""

    def __init__(self, work: Path, *nsqd_flags: str, lookupd_flags: tuple[str, ...] = ()) -> None:
        self.work = work
        self.nsqd_flags = nsqd_flags
        self.lookupd = pnsq_lookupd(
            work / "lookupd",
            "--heartbeat-timeout=2s",
            f"--tcp-address=127.0.0.1:{free_port()}",
            f"--http-address=127.0.0.1:{free_port()}",
            *lookupd_flags,
        ).start()
        self.nodes: list[Daemon] = [self.node(name) for name in "abc"]

    def node(self, name: str) -> Daemon:
        """A new nsqd ``name`` on rack ``r-<name>``, started (not added to :attr:`nodes`)."""
        return pnsq_nsqd(
            self.work / name,
            f"--lookupd-tcp-address={self.lookupd.tcp_address}",
            f"--tcp-address=127.0.0.1:{free_port()}",
            f"--rack=r-{name}",
            *self.nsqd_flags,
        ).start()

    def node_id(self, node: Daemon) -> str:
        return f"127.0.0.1:{node.tcp_port}"

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.lookupd.stop()


class Load:
    """Numbered messages published one after another (the acknowledged ones kept, with the
    longest time between two acknowledgements), and a consumer of them."""

    def __init__(self, backlog: int) -> None:
        self.acked: list[int] = list(range(backlog))
        self.longest_gap = 0.0
        self.received: list[int] = []
        self.publishing = True
        self.published = False  # the producer has stopped: ``acked`` is final

    @property
    def lost(self) -> set[int]:
        return set(self.acked) - set(self.received)

    @property
    def redelivered(self) -> int:
        return len(self.received) - len(set(self.received))


async def _produce(load: Load, seed: str, lookupd: str, topic: str, partition: int | None) -> None:
    async with open_producer(
        seed, lookupd_http_address=lookupd, max_attempts=60, retry_backoff=0.05
    ) as producer:
        number = len(load.acked)
        last = time.monotonic()
        while load.publishing:
            await producer.publish(topic, b"%08d" % number, partition=partition)
            now = time.monotonic()
            load.longest_gap = max(load.longest_gap, now - last)
            last = now
            load.acked.append(number)
            number += 1
            await trio.sleep(0.005)
    load.published = True


async def _consume(load: Load, seed: str, lookupd: str, topic: str, ordered: bool) -> None:
    async with open_consumer(
        seed, topic, "c", lookupd_http_address=lookupd, max_in_flight=200, ordered=ordered
    ) as consumer:
        async for message in consumer:
            load.received.append(int(message.body[:8]))
            await message.finish()


def under_load(
    cluster: RackedCluster,
    action: Callable[[], T],
    topic: str,
    *,
    backlog: int = 0,
    partition: int | None = None,
    ordered: bool = False,
) -> tuple[T, Load]:
    """Publish ``backlog`` messages of :data:`BODY_SIZE` to ``topic`` (to ``partition``, else
    over every partition), then run ``action`` (in a thread) while publishing and consuming
    (``ordered``: with ``SUB_ORDERED``) go on; returns its result once every acknowledged
    message was consumed."""
    seed, lookupd = cluster.nodes[0].tcp_address, cluster.lookupd.http_address
    return load_around(
        seed, lookupd, action, topic, backlog=backlog, partition=partition, ordered=ordered
    )


def load_around(
    seed: str,
    lookupd: str,
    action: Callable[[], T],
    topic: str,
    *,
    backlog: int = 0,
    partition: int | None = None,
    ordered: bool = False,
) -> tuple[T, Load]:
    """:func:`under_load` on any cluster: ``seed`` is a node's TCP address, ``lookupd`` its
    lookupd's HTTP address."""
    load = Load(backlog)

    async def run() -> T:
        async with open_producer(seed, lookupd_http_address=lookupd, max_attempts=10) as producer:
            for number in load.acked:
                body = (b"%08d" % number).ljust(BODY_SIZE, b".")
                await producer.publish(topic, body, partition=partition)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_consume, load, seed, lookupd, topic, ordered)
            nursery.start_soon(_produce, load, seed, lookupd, topic, partition)
            await trio.sleep(1.0)
            result = await trio.to_thread.run_sync(action)
            await trio.sleep(1.0)
            load.publishing = False
            with trio.fail_after(60):
                while not load.published or load.lost:  # the tasks fill them
                    await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        return result

    return trio.run(run), load


def report(what: str, load: Load, **timings: float) -> None:
    """Print an operation's timings and what the load saw of it."""
    times = "".join(f"{name} {value:.2f} s; " for name, value in timings.items())
    print(
        f"{what}: {times}{len(load.acked)} acknowledged, longest write gap "
        f"{load.longest_gap * 1000:.0f} ms, {load.redelivered} redelivered"
    )
