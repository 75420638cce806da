"""Failover on a 2-node cluster: a leader killed with SIGKILL is replaced by its in-sync replica
at the next epoch, every acknowledged message is on the new leader, and the old leader, back,
cuts its log to the new leader's history and rejoins the in-sync set as replica."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol import Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import free_port, get_json, lookup, post, wait_for
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration


class Cluster:
    """pnsq lookupd + 2 nsqd on fixed ports (a node keeps its id across restarts)."""

    def __init__(self, work: Path) -> None:
        self.lookupd = pnsq_lookupd(work / "lookupd", "--heartbeat-timeout=2s").start()
        flag = f"--lookupd-tcp-address={self.lookupd.tcp_address}"
        self.nodes = [
            pnsq_nsqd(work / name, flag, f"--tcp-address=127.0.0.1:{free_port()}")
            for name in ("a", "b")
        ]
        for node in self.nodes:
            node.start()

    def by_id(self, node_id: str) -> Daemon:
        return next(n for n in self.nodes if f"127.0.0.1:{n.tcp_port}" == node_id)

    def partition(self, topic: str) -> dict[str, Any]:
        parts = lookup(self.lookupd, topic, "&metainfo=true")["partitions"]
        return dict(parts["0"])

    def placement(self, topic: str) -> dict[str, Any]:
        node = f"127.0.0.1:{self.nodes[0].tcp_port}"
        doc = get_json(self.lookupd, f"/pnsq/assignments?node={node}")
        return dict(doc["topics"][topic]["partitions"]["0"])

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.lookupd.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(tmp_path)
    try:
        wait_for(lambda: len(get_json(started.lookupd, "/nodes")["producers"]) == 2, what="nodes")
        yield started
    finally:
        started.stop()


def _publish(node: Daemon, topic: str, bodies: list[bytes]) -> None:
    client = RawClient(node.tcp_address)
    for body in bodies:
        client.send(Pub(topic, body, 0))
        assert client.read().data == b"OK"
    client.close()


def _try_publish(node: Daemon, topic: str, body: bytes) -> bool:
    try:
        client = RawClient(node.tcp_address, timeout=2.0)
        client.send(Pub(topic, body, 0))
        ok = client.read().data == b"OK"
        client.close()
        return ok
    except OSError:
        return False


def _drain(node: Daemon, topic: str, expected: int) -> list[bytes]:
    consumer = RawClient(node.tcp_address)
    consumer.send(Sub(topic, "check", 0))
    assert consumer.read().data == b"OK"
    consumer.send(Rdy(expected + 10))
    bodies = []
    while len(bodies) < expected:
        frame = consumer.read(skip_heartbeats=True)
        bodies.append(frame.body)
    return bodies


def test_kill_9_of_a_leader_loses_no_acknowledged_message(cluster: Cluster) -> None:
    assert post(cluster.lookupd, "/topic/create?topic=fo&partition_num=1&replicator=2") == (
        200,
        b"",
    )
    wait_for(lambda: len(cluster.placement("fo")["isr"]) == 2, what="both in sync")
    first = cluster.placement("fo")
    leader = cluster.by_id(first["leader"])
    survivor = next(n for n in cluster.nodes if n is not leader)
    acked = [b"before %d" % i for i in range(200)]
    _publish(leader, "fo", acked)

    leader.kill()
    killed = time.monotonic()
    wait_for(
        lambda: _try_publish(survivor, "fo", b"after the kill"),
        timeout=20,
        what="the survivor writable",
    )
    writable = time.monotonic() - killed
    print(f"writable again {writable:.2f} s after kill -9")
    after = cluster.placement("fo")
    assert after["leader"] == f"127.0.0.1:{survivor.tcp_port}"
    assert after["epoch"] == first["epoch"] + 1
    assert after["isr"] == [after["leader"]]  # the dead leader left the in-sync set
    assert writable < 10  # the goal (3 s p99) is measured by the fault suite
    got = _drain(survivor, "fo", len(acked) + 1)
    assert set(acked) <= set(got)

    # the old leader returns: it follows the new leader at the new epoch and catches up
    leader.start()
    wait_for(lambda: len(cluster.placement("fo")["isr"]) == 2, timeout=30, what="back in sync")
    _publish(survivor, "fo", [b"with both again"])
    view = {
        p["partition"]: p
        for t in get_json(leader, "/stats?format=json&topic=fo")["topics"]
        for p in t["partitions"]
    }[0]
    assert view["role"] == "replica"
    assert view["leader_epoch"] == after["epoch"]
    assert view["end_offset"] == len(acked) + 2
