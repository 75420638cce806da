"""Failover on a 2-node cluster: a leader killed with SIGKILL is replaced by its in-sync replica
at the next epoch, every acknowledged message is on the new leader, and the old leader, back,
cuts its log to the new leader's history and rejoins the in-sync set as replica."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from protocol import Dpub, Fin, Pub, Rdy, Req, Sub, SubMode
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import (
    free_port,
    get_json,
    lookup,
    post,
    request,
    wait_for,
)
from tests.interop.drivers import Driver
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


@contextmanager
def two_nodes(work: Path) -> Iterator[Cluster]:
    """A :class:`Cluster`, both nodes registered; stopped after."""
    started = Cluster(work)
    try:
        wait_for(lambda: len(get_json(started.lookupd, "/nodes")["producers"]) == 2, what="nodes")
        yield started
    finally:
        started.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with two_nodes(tmp_path) as started:
        yield started


def _metrics(daemon: Daemon) -> dict[str, float]:
    """The unlabelled samples of ``/metrics``."""
    status, body, _ = request(f"http://{daemon.http_address}/metrics", "GET", {})
    assert status == 200
    samples = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def publish(node: Daemon, topic: str, bodies: list[bytes]) -> None:
    client = RawClient(node.tcp_address)
    for body in bodies:
        client.send(Pub(topic, body, 0))
        assert client.read().data == b"OK"
    client.close()


def try_publish(node: Daemon, topic: str, body: bytes) -> bool:
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
    publish(leader, "fo", acked)

    leader.kill()
    killed = time.monotonic()
    wait_for(
        lambda: try_publish(survivor, "fo", b"after the kill"),
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
    lookupd_metrics = _metrics(cluster.lookupd)
    assert lookupd_metrics["pnsq_lookupd_failovers_total"] == 1
    assert lookupd_metrics["pnsq_lookupd_under_replicated_partitions"] == 1
    assert lookupd_metrics["pnsq_lookupd_offline_partitions"] == 0
    node_metrics = _metrics(survivor)
    assert node_metrics["pnsq_under_replicated_partitions"] == 1
    assert node_metrics["pnsq_role_changes_total"] == 1
    got = _drain(survivor, "fo", len(acked) + 1)
    assert set(acked) <= set(got)

    # the old leader returns: it follows the new leader at the new epoch and catches up
    leader.start()
    wait_for(lambda: len(cluster.placement("fo")["isr"]) == 2, timeout=30, what="back in sync")
    publish(survivor, "fo", [b"with both again"])
    view = {
        p["partition"]: p
        for t in get_json(leader, "/stats?format=json&topic=fo")["topics"]
        for p in t["partitions"]
    }[0]
    assert view["role"] == "replica"
    assert view["leader_epoch"] == after["epoch"]
    assert view["end_offset"] == len(acked) + 2


def create(cluster: Cluster, topic: str) -> tuple[Daemon, Daemon, dict[str, Any]]:
    query = f"/topic/create?topic={topic}&partition_num=1&replicator=2"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(lambda: len(cluster.placement(topic)["isr"]) == 2, what="both in sync")
    placed = cluster.placement(topic)
    leader = cluster.by_id(placed["leader"])
    return leader, next(n for n in cluster.nodes if n is not leader), placed


def test_sigterm_hands_leadership_over_before_exiting(cluster: Cluster) -> None:
    leader, replica, placed = create(cluster, "handed")
    publish(leader, "handed", [b"one", b"two"])
    assert leader.stop() == 0
    after = cluster.placement("handed")
    # the handover was decided and pushed before the old leader exited: no wait for a
    # heartbeat timeout, the replica leads at once
    assert after["leader"] == f"127.0.0.1:{replica.tcp_port}"
    assert after["epoch"] == placed["epoch"] + 1
    wait_for(lambda: try_publish(replica, "handed", b"three"), timeout=5, what="writable")
    assert "handing over handed/0" in leader.log_text()
    assert set(_drain(replica, "handed", 3)) == {b"one", b"two", b"three"}


def test_a_dead_replica_leaves_the_isr_and_writes_go_on(cluster: Cluster) -> None:
    leader, replica, placed = create(cluster, "lonely")
    publish(leader, "lonely", [b"both"])
    replica.kill()
    # acks wait for the in-sync replica until lookupd takes it out (its connection dropped)
    wait_for(lambda: try_publish(leader, "lonely", b"alone"), timeout=10, what="writable")
    after = cluster.placement("lonely")
    assert (after["leader"], after["epoch"]) == (placed["leader"], placed["epoch"])
    assert after["isr"] == [placed["leader"]]
    replica.start()
    wait_for(lambda: len(cluster.placement("lonely")["isr"]) == 2, timeout=30, what="back")


def test_a_paused_leader_is_replaced_and_cannot_acknowledge_after(cluster: Cluster) -> None:
    leader, replica, placed = create(cluster, "paused")
    publish(leader, "paused", [b"before"])
    pending = RawClient(leader.tcp_address, timeout=20.0)
    assert leader.proc is not None
    os.kill(leader.proc.pid, signal.SIGSTOP)
    try:
        pending.send(Pub("paused", b"sent to the paused leader", 0))
        wait_for(
            lambda: cluster.placement("paused")["leader"] != placed["leader"],
            timeout=10,
            what="failover past the heartbeat timeout",
        )
        # the decision is on lookupd; the new leader hears of it a few ms later
        wait_for(lambda: try_publish(replica, "paused", b"to the new leader"), what="writable")
    finally:
        os.kill(leader.proc.pid, signal.SIGCONT)
    # back, the old leader learns it was deposed: the publish it held is refused, not acked
    assert pending.read().data == b"E_FAILED_ON_NOT_LEADER "
    wait_for(lambda: len(cluster.placement("paused")["isr"]) == 2, timeout=30, what="rejoined")
    bodies = _drain(replica, "paused", 2)
    assert set(bodies) == {b"before", b"to the new leader"}


def test_channel_state_and_delays_survive_a_failover(cluster: Cluster) -> None:
    leader, replica, _ = create(cluster, "resumed")
    publish(leader, "resumed", [b"m%d" % i for i in range(10)])
    producer = RawClient(leader.tcp_address)
    producer.send(Dpub("resumed", 60_000, b"deferred a minute"))
    assert producer.read().data == b"OK"
    consumer = RawClient(leader.tcp_address)
    consumer.send(Sub("resumed", "c", 0), Rdy(5))
    assert consumer.read().data == b"OK"
    got = [consumer.read(skip_heartbeats=True) for _ in range(5)]
    assert [f.body for f in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    for frame in got[:3]:
        consumer.send(Fin(frame.message_id))
    consumer.send(Req(got[3].message_id, 60_000))  # held back a minute
    time.sleep(1.0)  # the channel state reaches the replica (every 0.2 s)
    leader.kill()
    wait_for(lambda: try_publish(replica, "resumed", b"m10"), timeout=20, what="failover")
    again = RawClient(replica.tcp_address, timeout=2.0)
    again.send(Sub("resumed", "c", 0), Rdy(20))
    assert again.read().data == b"OK"
    bodies = again.bodies_until_quiet()
    # finished ones are not redelivered, the REQ'd and DPUB'd ones wait for their time; m4
    # was in flight on the dead leader (redelivered: at least once)
    assert bodies == [b"m4", b"m5", b"m6", b"m7", b"m8", b"m9", b"m10"]


def test_min_isr_refuses_publishes_while_too_few_copies_are_in_sync(cluster: Cluster) -> None:
    query = "/topic/create?topic=strict&partition_num=1&replicator=2&min_isr=2"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(lambda: len(cluster.placement("strict")["isr"]) == 2, what="both in sync")
    leader = cluster.by_id(cluster.placement("strict")["leader"])
    replica = next(n for n in cluster.nodes if n is not leader)
    publish(leader, "strict", [b"with both"])
    replica.kill()
    wait_for(lambda: len(cluster.placement("strict")["isr"]) == 1, what="the replica out")
    client = RawClient(leader.tcp_address)

    def refused() -> bool:
        client.send(Pub("strict", b"alone", 0))
        return client.read().data == b"E_FAILED_ON_NOT_WRITABLE "

    wait_for(refused, what="refused below min_isr")  # non-fatal: the connection stays
    assert post(cluster.lookupd, "/topic/create?topic=bad&replicator=1&min_isr=2")[0] == 400
    replica.start()
    wait_for(lambda: len(cluster.placement("strict")["isr"]) == 2, timeout=30, what="back")
    client.send(Pub("strict", b"with both again", 0))
    assert client.read().data == b"OK"


def test_a_stock_reader_through_lookupd_follows_the_new_leader(cluster: Cluster) -> None:
    """pynsq's Reader (lookupd polled every second) loses its connection with the leader and
    finds the new one through /lookup: it gets every message, before and after the kill."""
    leader, replica, _ = create(cluster, "followed")
    assert post(leader, "/channel/create?topic=followed&channel=r")[0] == 200
    time.sleep(0.5)  # the channel reaches the replica with the channel state
    publish(leader, "followed", [b"before-%d" % i for i in range(50)])
    reader = Driver("pynsq")
    try:
        argv = reader.sub_argv(
            "", "followed", "r", 100, timeout=60, lookupd=cluster.lookupd.http_address
        )
        proc = reader.start(argv)
        time.sleep(2.0)
        leader.kill()
        wait_for(lambda: try_publish(replica, "followed", b"after-0"), timeout=20)
        publish(replica, "followed", [b"after-%d" % i for i in range(1, 50)])
        run = reader.finish(proc, timeout=90)
    finally:
        reader.cleanup()
    assert run.returncode == 0, run.stderr[-3000:]
    bodies = {str(d["body"]) for d in run.deliveries}
    assert bodies == {f"before-{i}" for i in range(50)} | {f"after-{i}" for i in range(50)}


def test_an_ordered_channel_goes_on_exactly_after_the_last_fin(cluster: Cluster) -> None:
    """On an ordered topic a message is released only once every in-sync replica holds the
    FIN of the one before: after a failover the new leader resumes right there."""
    query = "/topic/create?topic=inorder&partition_num=1&replicator=2&orderedmulti=true"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(lambda: len(cluster.placement("inorder")["isr"]) == 2, what="both in sync")
    leader = cluster.by_id(cluster.placement("inorder")["leader"])
    replica = next(n for n in cluster.nodes if n is not leader)
    publish(leader, "inorder", [b"m%d" % i for i in range(10)])
    consumer = RawClient(leader.tcp_address)
    consumer.send(Sub("inorder", "c", 0, SubMode.ORDERED), Rdy(1))
    assert consumer.read().data == b"OK"
    for i in range(4):
        frame = consumer.read(skip_heartbeats=True)
        assert frame.data.endswith(b"m%d" % i)  # after youzan's ordered detail block
        if i < 3:
            consumer.send(Fin(frame.message_id))
    leader.kill()  # m3 is in flight: m0..m2 finished, the last FIN just before m3 went out
    wait_for(lambda: try_publish(replica, "inorder", b"m10"), timeout=20, what="failover")
    again = RawClient(replica.tcp_address)
    again.send(Sub("inorder", "c", 0, SubMode.ORDERED), Rdy(1))
    assert again.read().data == b"OK"
    first = again.read(skip_heartbeats=True)
    assert first.data.endswith(b"m3")  # not m2 (finished before m3 was released), not m4
