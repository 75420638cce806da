"""Replication on a 2-node cluster (pnsq lookupd + 2 pnsq nsqd, replicator=2): a publish is
acknowledged only once the in-sync replica holds it, consumers read only what every in-sync
replica holds, and the leader cannot leave a silent replica behind on its own."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from protocol import Pub, Rdy, Sub
from tests.daemons import Daemon
from tests.integration.lookupd_helpers import get_json, pnsq_cluster, post, roles, wait_for
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, list[Daemon]]]:
    # a paused replica must not be taken for dead while the tests watch it hold acks back
    work = tmp_path_factory.mktemp("replication")
    with pnsq_cluster(work, 2, "--heartbeat-timeout=30s") as started:
        yield started


def partition_view(node: Daemon, topic: str, number: int) -> dict[str, Any]:
    stats = get_json(node, f"/stats?format=json&topic={topic}")
    (entry,) = [t for t in stats["topics"] if t["topic_name"] == topic]
    (part,) = [p for p in entry["partitions"] if p["partition"] == number]
    return dict(part)


def create(lookupd: Daemon, cluster: list[Daemon], topic: str) -> tuple[Daemon, Daemon]:
    """A 1-partition topic replicated twice; returns (leader, replica)."""
    query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
    assert post(lookupd, query) == (200, b"")
    wait_for(lambda: all(roles(n, topic) for n in cluster), what="placed on both")
    leader = next(n for n in cluster if (roles(n, topic) or {}).get(0) == "leader")
    replica = next(n for n in cluster if n is not leader)
    wait_for(
        lambda: (
            partition_view(leader, topic, 0)["isr"]
            == [
                f"127.0.0.1:{leader.tcp_port}",
                f"127.0.0.1:{replica.tcp_port}",
            ]
        ),
        what="both in sync",
    )
    return leader, replica


def test_an_acknowledged_publish_is_on_the_replica(nodes: tuple[Daemon, list[Daemon]]) -> None:
    lookupd, cluster = nodes
    leader, replica = create(lookupd, cluster, "copied")
    producer = RawClient(leader.tcp_address)
    for i in range(1, 21):
        producer.send(Pub("copied", b"m%d" % i, 0))
        assert producer.read().data == b"OK"
        view = partition_view(replica, "copied", 0)
        assert view["role"] == "replica"
        assert view["end_offset"] >= i  # on the replica before the producer heard OK
    led = partition_view(leader, "copied", 0)
    assert (led["end_offset"], led["high_watermark"]) == (20, 20)
    assert led["replica_lag"] == {f"127.0.0.1:{replica.tcp_port}": 0}


def _pid(node: Daemon) -> int:
    assert node.proc is not None
    return node.proc.pid


def _has_frame(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except TimeoutError:
        return False


def test_a_silent_replica_holds_acks_and_consumers_back(
    nodes: tuple[Daemon, list[Daemon]],
) -> None:
    lookupd, cluster = nodes
    leader, replica = create(lookupd, cluster, "held")
    consumer = RawClient(leader.tcp_address)
    consumer.send(Sub("held", "c", 0))
    assert consumer.read().data == b"OK"
    consumer.send(Rdy(10))
    producer = RawClient(leader.tcp_address)
    os.kill(_pid(replica), signal.SIGSTOP)
    try:
        producer.send(Pub("held", b"waits for the replica", 0))
        # stored on the leader, but neither acknowledged nor delivered: the replica lacks it,
        # and the leader may not drop it from the in-sync set on its own
        assert not _has_frame(producer.sock, 1.5)
        assert not _has_frame(consumer.sock, 0.2)
        view = partition_view(leader, "held", 0)
        assert (view["end_offset"], view["high_watermark"]) == (1, 0)
    finally:
        os.kill(_pid(replica), signal.SIGCONT)
    assert producer.read().data == b"OK"
    frame = consumer.read(skip_heartbeats=True)
    assert frame.body == b"waits for the replica"
    assert struct.unpack(">H", frame.data[8:10])[0] == 1  # first attempt


def test_publishes_share_round_trips_to_the_replica(nodes: tuple[Daemon, list[Daemon]]) -> None:
    """Pipelined PUBs from many connections all complete (group commit), none lost."""
    lookupd, cluster = nodes
    leader, replica = create(lookupd, cluster, "grouped")
    clients = [RawClient(leader.tcp_address) for _ in range(8)]
    started = time.monotonic()
    for client in clients:
        client.send(*[Pub("grouped", b"x", 0) for _ in range(50)])
    for client in clients:
        for _ in range(50):
            assert client.read().data == b"OK"
    assert time.monotonic() - started < 30
    assert partition_view(replica, "grouped", 0)["end_offset"] == 400
