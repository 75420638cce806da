"""``/topic/partition/move`` with real processes under continuous load: lookupd and three nsqd
(each its own rack), a topic with two copies, pnsq's client publishing (with retries) and
consuming all along. One replica is moved to the third node, then the leader is moved to the
node the replica left. No acknowledged message is lost, every one is consumed, the channel's
position moves with the partition (no replay from the start), the copy catches up at
``--replica-move-rate`` and the longest write gap is measured and printed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from pnsq.client import open_consumer, open_producer
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import get_json, post, roles, wait_for

pytestmark = pytest.mark.integration

MOVE_RATE = 256 * 1024  # bytes/s a catching-up copy is fed (--replica-move-rate)
BACKLOG = 600  # messages of BODY_SIZE published before the first move
BODY_SIZE = 1024


class Cluster:
    """A pnsq lookupd and nsqd a, b, c on racks r-a, r-b, r-c."""

    def __init__(self, work: Path) -> None:
        self.lookupd = pnsq_lookupd(work / "lookupd", "--heartbeat-timeout=2s").start()
        self.nodes: list[Daemon] = []
        for name in "abc":
            self.nodes.append(
                pnsq_nsqd(
                    work / name,
                    f"--lookupd-tcp-address={self.lookupd.tcp_address}",
                    f"--rack=r-{name}",
                    f"--replica-move-rate={MOVE_RATE}",
                ).start()
            )

    def node_id(self, node: Daemon) -> str:
        return f"127.0.0.1:{node.tcp_port}"

    def by_id(self, node_id: str) -> Daemon:
        return next(n for n in self.nodes if self.node_id(n) == node_id)

    def placement(self, topic: str) -> dict[str, Any]:
        """Partition 0 as lookupd placed it (from the assignments of a node holding it)."""
        for node in self.nodes:
            doc = get_json(self.lookupd, f"/pnsq/assignments?node={self.node_id(node)}")
            if topic in doc["topics"]:
                return dict(doc["topics"][topic]["partitions"]["0"])
        raise AssertionError(f"{topic} is not placed")

    def moves(self) -> list[dict[str, Any]]:
        return list(get_json(self.lookupd, "/topic/partition/moves")["moves"])

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.lookupd.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(tmp_path)
    try:
        wait_for(lambda: len(get_json(started.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        yield started
    finally:
        started.stop()


class Load:
    """A producer publishing numbered messages one after another (acknowledged ones kept,
    with the longest time between two acknowledgements) and a consumer taking them."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.longest_gap = 0.0
        self.received: list[int] = []
        self.publishing = True


async def _produce(load: Load, seed: str, lookupd: str, start: int) -> None:
    async with open_producer(
        seed, lookupd_http_address=lookupd, max_attempts=40, retry_backoff=0.05
    ) as producer:
        number = start
        last = time.monotonic()
        while load.publishing:
            await producer.publish("mv", b"%08d" % number, partition=0)
            now = time.monotonic()
            load.longest_gap = max(load.longest_gap, now - last)
            last = now
            load.acked.append(number)
            number += 1
            await trio.sleep(0.005)


async def _consume(load: Load, seed: str, lookupd: str, expected: set[int]) -> None:
    async with open_consumer(
        seed, "mv", "c", lookupd_http_address=lookupd, max_in_flight=200
    ) as consumer:
        async for message in consumer:
            load.received.append(int(message.body[:8]))
            await message.finish()
            if not load.publishing and expected.union(load.acked) <= set(load.received):
                return


def _move(cluster: Cluster, source: str, target: str, *, leader: bool) -> float:
    """Ask for a move and wait for it to end; returns how long it took."""
    flag = "true" if leader else "false"
    query = f"/topic/partition/move?topic=mv&partition=0&move_from={source}&move_to={target}"
    asked = time.monotonic()
    status, body = post(cluster.lookupd, f"{query}&move_leader={flag}")
    assert status == 200, body
    started = json.loads(body)
    assert (started["move_from"], started["move_to"]) == (source, target)
    assert cluster.moves(), "the move is listed while in progress"
    wait_for(lambda: not cluster.moves(), timeout=60, what="the move to end")
    return time.monotonic() - asked


def test_move_a_replica_then_the_leader_under_load(cluster: Cluster) -> None:
    status, body = post(cluster.lookupd, "/topic/create?topic=mv&partition_num=1&replicator=2")
    assert status == 200, body
    wait_for(lambda: len(cluster.placement("mv")["isr"]) == 2, what="both copies in sync")
    first = cluster.placement("mv")
    leader, replica = first["leader"], first["replicas"][0]
    spare = next(
        cluster.node_id(n) for n in cluster.nodes if cluster.node_id(n) not in first["isr"]
    )
    lookupd = cluster.lookupd.http_address
    seed = cluster.nodes[0].tcp_address
    load = Load()
    backlog = set(range(BACKLOG))

    async def run() -> dict[str, float]:
        timings: dict[str, float] = {}
        async with open_producer(seed, lookupd_http_address=lookupd, max_attempts=10) as producer:
            for number in sorted(backlog):
                body = (b"%08d" % number).ljust(BODY_SIZE, b".")
                await producer.publish("mv", body, partition=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_consume, load, seed, lookupd, backlog)
            nursery.start_soon(_produce, load, seed, lookupd, BACKLOG)
            await trio.sleep(1.0)
            timings["replica"] = await trio.to_thread.run_sync(
                lambda: _move(cluster, replica, spare, leader=False)
            )
            moved = cluster.placement("mv")
            assert (moved["leader"], moved["replicas"], moved["epoch"]) == (
                leader,
                [spare],
                first["epoch"],
            )
            # the node the copy left stops serving it (its files stay)
            gone = cluster.by_id(replica)
            await trio.to_thread.run_sync(
                lambda: wait_for(lambda: roles(gone, "mv") in (None, {}), what="copy released")
            )
            await trio.sleep(1.0)
            timings["leader"] = await trio.to_thread.run_sync(
                lambda: _move(cluster, leader, replica, leader=True)
            )
            await trio.sleep(1.0)
            load.publishing = False
            with trio.fail_after(30):
                while not backlog.union(load.acked) <= set(load.received):
                    await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        return timings

    timings = trio.run(run)
    final = cluster.placement("mv")
    assert final["leader"] == replica  # the leader moved to the node the replica left
    assert final["replicas"] == [spare]
    assert final["epoch"] == first["epoch"] + 1
    assert sorted(final["isr"]) == sorted([replica, spare])
    assert roles(cluster.by_id(leader), "mv") in (None, {})  # the source holds no copy now
    lost = backlog.union(load.acked) - set(load.received)
    duplicates = len(load.received) - len(set(load.received))
    print(
        f"moves: replica {timings['replica']:.2f} s, leader {timings['leader']:.2f} s; "
        f"{len(load.acked)} acknowledged under load, longest write gap "
        f"{load.longest_gap * 1000:.0f} ms; {duplicates} redelivered"
    )
    assert not lost
    # the backlog (~600 KiB) was fed to the new copy at MOVE_RATE (after a second's burst)
    assert timings["replica"] >= 0.7 * (BACKLOG * BODY_SIZE - MOVE_RATE) / MOVE_RATE
    # the channel's position moved with the partition: no replay of what was finished
    assert duplicates < BACKLOG // 2
    assert load.longest_gap < 5.0
