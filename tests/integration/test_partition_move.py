"""``/topic/partition/move`` with real processes under continuous load: lookupd and three nsqd
(each its own rack), a topic with two copies, pnsq's client publishing (with retries) and
consuming all along.

The default round moves one replica to the third node, then the leader to the node the replica
left: no acknowledged message is lost, every one is consumed, the channel's position moves with
the partition (no replay from the start), the copy catches up at ``--replica-move-rate`` and
the longest write gap is measured and printed. A throttled copy shows its bytes left, shrinking
to the end, on ``GET /topic/partition/moves``, lookupd's and the leader's ``/metrics``. The fault
rounds kill -9 the target or the
source in the middle of a move, or restart lookupd: the move rolls back or finishes, and
nothing acknowledged is lost."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import Dpub, Fin, Pub, Rdy, Req, Sub
from protocol.frames import FrameType
from tests.daemons import TOOLS, Daemon
from tests.integration import cluster_load
from tests.integration.cluster_load import BODY_SIZE, Load, RackedCluster, report
from tests.integration.lookupd_helpers import get_json, post, request, roles, wait_for
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

MOVE_RATE = 256 * 1024  # bytes/s a catching-up copy is fed (--replica-move-rate)
BACKLOG = 600  # messages of BODY_SIZE published before the first move
COPY_BACKLOG = 1500  # messages of BODY_SIZE behind a throttled copy (about 6 s at MOVE_RATE)
T = TypeVar("T")


class Cluster(RackedCluster):
    """:class:`RackedCluster` whose nodes feed a catching-up copy at :data:`MOVE_RATE`."""

    def __init__(self, work: Path) -> None:
        super().__init__(work, f"--replica-move-rate={MOVE_RATE}")

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

    def create(self, *, ordered: bool = False) -> tuple[str, str, str, dict[str, Any]]:
        """Topic ``mv``, one partition, two copies in sync: (leader, replica, spare, placed)."""
        query = "/topic/create?topic=mv&partition_num=1&replicator=2"
        status, body = post(self.lookupd, query + ("&orderedmulti=true" if ordered else ""))
        assert status == 200, body
        wait_for(lambda: len(self.placement("mv")["isr"]) == 2, what="both copies in sync")
        placed = self.placement("mv")
        spare = next(self.node_id(n) for n in self.nodes if self.node_id(n) not in placed["isr"])
        return placed["leader"], placed["replicas"][0], spare, placed


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(tmp_path)
    try:
        wait_for(lambda: len(get_json(started.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        yield started
    finally:
        started.stop()


def under_load(
    cluster: Cluster, action: Callable[[], T], *, ordered: bool = False
) -> tuple[T, Load]:
    """:func:`~tests.integration.cluster_load.under_load` on partition 0 of ``mv``, after a
    backlog of :data:`BACKLOG` messages."""
    return cluster_load.under_load(
        cluster, action, "mv", backlog=BACKLOG, partition=0, ordered=ordered
    )


def start_move(cluster: Cluster, source: str, target: str, *, leader: bool) -> None:
    flag = "true" if leader else "false"
    query = f"/topic/partition/move?topic=mv&partition=0&move_from={source}&move_to={target}"
    status, body = post(cluster.lookupd, f"{query}&move_leader={flag}")
    assert status == 200, body
    started = json.loads(body)
    assert (started["move_from"], started["move_to"]) == (source, target)


def move(cluster: Cluster, source: str, target: str, *, leader: bool) -> float:
    """Ask for a move and wait for it to end; returns how long it took."""
    asked = time.monotonic()
    start_move(cluster, source, target, leader=leader)
    assert cluster.moves(), "the move is listed while in progress"
    wait_for(lambda: not cluster.moves(), timeout=60, what="the move to end")
    return time.monotonic() - asked


def gauge(daemon: Daemon, name: str, **labels: str) -> float | None:
    """The sample ``name`` with ``labels`` on the daemon's ``/metrics``, None if absent."""
    status, body, _ = request(f"http://{daemon.http_address}/metrics", "GET", {})
    assert status == 200, body
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def catching_up(cluster: Cluster, target: str) -> None:
    """Wait until ``target`` is an assigned replica, outside the in-sync set."""
    wait_for(
        lambda: (m := cluster.moves()) and target in m[0]["replicas"] and target not in m[0]["isr"],
        what="the target catching up",
    )


def test_move_a_replica_then_the_leader_under_load(cluster: Cluster) -> None:
    leader, replica, spare, first = cluster.create()

    def moves() -> dict[str, float]:
        timings = {"replica move": move(cluster, replica, spare, leader=False)}
        moved = cluster.placement("mv")
        assert (moved["leader"], moved["replicas"], moved["epoch"]) == (
            leader,
            [spare],
            first["epoch"],
        )
        # the node the copy left stops serving it (its files stay)
        gone = cluster.by_id(replica)
        wait_for(lambda: roles(gone, "mv") in (None, {}), what="the copy released")
        time.sleep(1.0)
        timings["leader move"] = move(cluster, leader, replica, leader=True)
        return timings

    timings, load = under_load(cluster, moves)
    report("moves", load, **timings)
    final = cluster.placement("mv")
    assert final["leader"] == replica  # the leader moved to the node the replica left
    assert final["replicas"] == [spare]
    assert final["epoch"] == first["epoch"] + 1
    assert sorted(final["isr"]) == sorted([replica, spare])
    assert roles(cluster.by_id(leader), "mv") in (None, {})  # the source holds no copy now
    assert not load.lost
    # the backlog (~600 KiB) was fed to the new copy at MOVE_RATE (after a second's burst)
    assert timings["replica move"] >= 0.7 * (BACKLOG * BODY_SIZE - MOVE_RATE) / MOVE_RATE
    # the channel's position moved with the partition: no replay of what was finished
    assert load.redelivered < BACKLOG // 2
    assert load.longest_gap < 5.0


def test_a_throttled_copy_shows_its_bytes_left_until_the_move_ends(cluster: Cluster) -> None:
    leader_id, replica, spare, _ = cluster.create()
    leader = cluster.by_id(leader_id)
    batch = b"\n".join((b"%08d" % i).ljust(BODY_SIZE, b".") for i in range(300))
    for _ in range(COPY_BACKLOG // 300):
        assert post(leader, "/mpub?topic=mv", batch) == (200, b"OK")
    on_disk = get_json(leader, "/stats?format=json&topic=mv")["topics"][0]["message_bytes"]
    start_move(cluster, replica, spare, leader=False)
    listed: list[int] = []  # bytes_left as GET /topic/partition/moves showed them
    on_lookupd: list[float] = []  # pnsq_lookupd_move_bytes_left
    on_leader: list[float] = []  # pnsq_replica_lag_bytes of the new copy
    deadline = time.monotonic() + 60
    while moves := cluster.moves():
        assert time.monotonic() < deadline, "the move did not end"
        if moves[0]["bytes_left"] is not None:
            listed.append(moves[0]["bytes_left"])
        assert gauge(cluster.lookupd, "pnsq_lookupd_moves_in_progress") in (0, 1)
        on_lookupd.append(gauge(cluster.lookupd, "pnsq_lookupd_move_bytes_left") or 0)
        lag = gauge(leader, "pnsq_replica_lag_bytes", topic="mv", partition="0", replica=spare)
        on_leader.append(lag or 0)
        time.sleep(0.1)
    print(f"bytes left seen: {listed}")
    positive = [n for n in listed if n > 0]
    assert len(set(positive)) >= 2, listed  # shrinking as the copy went on
    assert listed == sorted(listed, reverse=True)  # nothing was published meanwhile
    assert positive[0] <= on_disk * 1.2  # bodies plus record headers, at most
    assert max(on_lookupd) > 0
    assert max(on_leader) > 0
    # the move is over: nothing left anywhere
    assert gauge(cluster.lookupd, "pnsq_lookupd_moves_in_progress") == 0
    assert gauge(cluster.lookupd, "pnsq_lookupd_move_bytes_left") == 0
    labels = {"topic": "mv", "partition": "0", "replica": spare}
    wait_for(lambda: gauge(leader, "pnsq_replica_lag_bytes", **labels) == 0, what="no lag")
    assert gauge(leader, "pnsq_replica_lag_bytes", topic="mv", replica=replica) is None


def test_an_ordered_topic_stays_in_order_across_a_leader_move(cluster: Cluster) -> None:
    leader, replica, spare, first = cluster.create(ordered=True)
    _, load = under_load(cluster, lambda: move(cluster, leader, spare, leader=True), ordered=True)
    report("ordered leader move", load)
    after = cluster.placement("mv")
    assert (after["leader"], after["replicas"]) == (spare, [replica])
    assert after["epoch"] == first["epoch"] + 1
    assert not load.lost
    firsts = list(dict.fromkeys(load.received))
    assert firsts == sorted(firsts)  # every message, in log order (redeliveries aside)


def test_channel_state_delays_and_pauses_move_with_the_leader(cluster: Cluster) -> None:
    leader_id, replica_id, spare_id, _ = cluster.create()
    leader, spare = cluster.by_id(leader_id), cluster.by_id(spare_id)
    producer = RawClient(leader.tcp_address)
    for i in range(10):
        producer.send(Pub("mv", b"m%d" % i, 0))
        assert producer.read().data == b"OK"
    producer.send(Dpub("mv", 60_000, b"deferred a minute"))  # the one partition
    assert producer.read().data == b"OK"
    consumer = RawClient(leader.tcp_address)
    consumer.send(Sub("mv", "c", 0), Rdy(5))
    assert consumer.read().data == b"OK"
    for path in ("/channel/create", "/channel/pause"):
        assert post(leader, f"{path}?topic=mv&channel=paused") == (200, b"")
    got = [consumer.read(skip_heartbeats=True) for _ in range(5)]
    assert [f.body for f in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    for frame in got[:3]:
        consumer.send(Fin(frame.message_id))
    consumer.send(Req(got[3].message_id, 60_000))  # held back a minute
    time.sleep(1.0)  # the channel state reaches the replica (every 0.2 s)

    move(cluster, leader_id, spare_id, leader=True)
    # the consumer on the old leader is told to look the leader up again
    frames = [consumer.read(skip_heartbeats=True)]
    while frames[-1].type == FrameType.MESSAGE and len(frames) < 10:  # what RDY still let in
        frames.append(consumer.read(skip_heartbeats=True))
    assert (frames[-1].type, frames[-1].data) == (FrameType.ERROR, b"E_FAILED_ON_NOT_LEADER ")
    again = RawClient(spare.tcp_address, timeout=2.0)
    again.send(Sub("mv", "c", 0), Rdy(20))
    assert again.read().data == b"OK"
    bodies = again.bodies_until_quiet()
    # finished ones are not delivered again, the REQ'd and DPUB'd ones wait for their time;
    # m4 was in flight on the old leader (delivered again: at least once)
    assert bodies == [b"m4", b"m5", b"m6", b"m7", b"m8", b"m9"]
    paused = [
        c
        for t in get_json(spare, "/stats?format=json&topic=mv")["topics"]
        for c in t["channels"]
        if c["channel_name"] == "paused"
    ]
    assert [c["paused"] for c in paused] == [True]
    assert cluster.placement("mv")["replicas"] == [replica_id]


def test_a_stock_consumer_through_lookupd_follows_a_leader_move_at_once(cluster: Cluster) -> None:
    """A stock SUB (every partition the node leads) on the old leader is closed when the
    partition moves, after a fatal E_FAILED_ON_NOT_LEADER: nsq_tail (go-nsq, lookupd polled
    every minute) asks lookupd again at once and reads the rest from the new leader; left
    open, it heard nothing until its next poll. A stock producer's connection to the old
    leader (served by the publish reactor) keeps getting OK: its PUBs are forwarded."""
    leader_id, _, spare_id, _ = cluster.create()
    leader, spare = cluster.by_id(leader_id), cluster.by_id(spare_id)
    assert post(leader, "/channel/create?topic=mv&channel=stock") == (200, b"")
    tail = subprocess.Popen(
        [
            str(TOOLS / "nsq-1.3.0" / "bin" / "nsq_tail"),
            f"--lookupd-http-address={cluster.lookupd.http_address}",
            "--topic=mv",
            "--channel=stock",
            "-n=20",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _clients(leader, "stock") == 1, what="nsq_tail subscribed")
        stock = RawClient(leader.tcp_address)  # stock PUBs, kept across the move
        for i in range(10):
            stock.send(Pub("mv", b"m%d" % i))
            assert stock.read().data == b"OK"
        move(cluster, leader_id, spare_id, leader=True)
        for i in range(10, 15):
            stock.send(Pub("mv", b"m%d" % i))
            assert stock.read().data == b"OK"  # forwarded to the new leader
        stock.close()
        producer = RawClient(spare.tcp_address)
        for i in range(15, 20):
            producer.send(Pub("mv", b"m%d" % i, 0))
            assert producer.read().data == b"OK"
        producer.close()
        out, err = tail.communicate(timeout=40)  # its next lookupd poll: 60 s
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()
    assert tail.returncode == 0, err
    assert {b"m%d" % i for i in range(20)} <= set(out.splitlines())  # at least once


def _clients(node: Daemon, channel: str) -> int:
    stats = get_json(node, "/stats?format=json&topic=mv")
    return sum(
        c["client_count"]
        for t in stats["topics"] or ()
        for c in t["channels"] or ()
        if c["channel_name"] == channel
    )


@pytest.mark.fault
def test_kill_9_of_the_target_mid_move_rolls_it_back(cluster: Cluster) -> None:
    leader, replica, spare, first = cluster.create()

    def action() -> None:
        start_move(cluster, replica, spare, leader=False)
        catching_up(cluster, spare)
        cluster.by_id(spare).kill()
        wait_for(lambda: not cluster.moves(), timeout=30, what="the move rolled back")

    _, load = under_load(cluster, action)
    report("target killed", load)
    after = cluster.placement("mv")
    assert (after["leader"], after["replicas"], after["epoch"]) == (
        leader,
        [replica],
        first["epoch"],
    )
    assert sorted(after["isr"]) == sorted([leader, replica])
    assert not load.lost
    assert "rolled back" in cluster.lookupd.log_text()


@pytest.mark.fault
def test_kill_9_of_the_source_leader_mid_move_fails_over_and_finishes(cluster: Cluster) -> None:
    leader, replica, spare, first = cluster.create()

    def action() -> None:
        start_move(cluster, leader, spare, leader=True)
        catching_up(cluster, spare)
        cluster.by_id(leader).kill()
        wait_for(lambda: not cluster.moves(), timeout=60, what="the move to end")

    _, load = under_load(cluster, action)
    report("source killed", load)
    after = cluster.placement("mv")
    # the in-sync replica took over at once; the target caught up from it and the dead
    # source was dropped
    assert after["leader"] == replica
    assert after["replicas"] == [spare]
    assert after["epoch"] == first["epoch"] + 1
    assert not load.lost


@pytest.mark.fault
def test_a_move_survives_a_lookupd_restart(cluster: Cluster) -> None:
    leader, replica, spare, first = cluster.create()

    def action() -> None:
        start_move(cluster, replica, spare, leader=False)
        catching_up(cluster, spare)
        cluster.lookupd.kill()
        cluster.lookupd.start()
        wait_for(lambda: not cluster.moves(), timeout=60, what="the move to end")

    _, load = under_load(cluster, action)
    report("lookupd restarted", load)
    after = cluster.placement("mv")
    assert (after["leader"], after["replicas"], after["epoch"]) == (
        leader,
        [spare],
        first["epoch"],
    )
    assert not load.lost
