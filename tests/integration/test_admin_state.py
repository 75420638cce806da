"""Administrative state is cluster state: a pause, a channel created, deleted, emptied, moved
(youzan's setoffset), skipped or ordered through the real nsqadmin 1.3.0 (or nsqd's HTTP API on
any node holding the topic) reaches every partition's leader and every replica, and survives a
kill -9 of the leader: the promoted replica shows the same state and a consumer sees it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, Peer, nsqadmin
from tests.integration.lookupd_helpers import (
    get_json,
    lookup,
    pnsq_cluster,
    post,
    request,
    roles,
    wait_for,
)
from tests.interop.drivers import Driver
from tests.rawclient import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.interop]

QUIET = 1.5  # seconds a consumer of a paused channel must receive nothing


@dataclass
class Cluster:
    lookupd: Daemon
    nodes: list[Daemon]
    admin: Peer

    def leader(self, topic: str, partition: int) -> Daemon:
        found = lookup(self.lookupd, topic) or {}
        peer = (found.get("partitions") or {}).get(str(partition))
        assert peer, f"no leader of {topic}/{partition}"
        return next(n for n in self.nodes if n.tcp_port == peer["tcp_port"])

    def holders(self, topic: str, partition: int) -> list[Daemon]:
        return [n for n in self.live() if partition in (roles(n, topic) or {})]

    def live(self) -> list[Daemon]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with pnsq_cluster(tmp_path, 3, "--heartbeat-timeout=2s") as (lookupd, nodes):
        admin = nsqadmin(
            tmp_path / "admin", flags=(f"--lookupd-http-address={lookupd.http_address}",)
        )
        admin.start()
        try:
            yield Cluster(lookupd, nodes, admin)
        finally:
            admin.stop()


def admin_send(cluster: Cluster, method: str, path: str, document: dict[str, str]) -> str:
    """A call to nsqadmin's JSON API, as its pages make it; returns its warning ("" if none)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    data = json.dumps(document).encode()
    status, body, _ = request(f"{cluster.admin.url}{path}", method, headers, data)
    assert status == 200, (method, path, document, status, body)
    return str(json.loads(body or b"{}").get("message", ""))


def topic_stats(node: Daemon, topic: str) -> dict[str, Any] | None:
    stats = get_json(node, f"/stats?format=json&topic={topic}")
    found = [t for t in stats["topics"] or () if t["topic_name"] == topic]
    return found[0] if found else None


def channel_stats(node: Daemon, topic: str, channel: str) -> dict[str, Any] | None:
    for c in (topic_stats(node, topic) or {}).get("channels") or ():
        if c["channel_name"] == channel:
            return dict(c)
    return None


def create_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    query = f"/topic/create?topic={topic}&partition_num={partitions}&replicator=2"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(
        lambda: all(len(cluster.holders(topic, p)) == 2 for p in range(partitions)),
        what=f"{topic}'s {partitions} partition(s) on two nodes each",
    )


def publish(node: Daemon, topic: str, partition: int, count: int) -> None:
    client = RawClient(node.tcp_address)
    for i in range(count):
        client.send(Pub(topic, b"m%d" % i, partition))
        assert client.read().data == b"OK"
    client.close()


def received(consumer: RawClient, within: float, enough: int = 0) -> list[bytes]:
    """The messages a subscribed consumer gets within ``within`` seconds (each FINed), or
    as soon as ``enough`` came (0: wait the whole time)."""
    bodies: list[bytes] = []
    consumer.sock.settimeout(within)
    try:
        while not enough or len(bodies) < enough:
            frame = consumer.read(skip_heartbeats=True)
            if frame.is_message:
                bodies.append(frame.body)
                consumer.send(Fin(frame.message_id))
    except TimeoutError:
        pass
    return bodies


def kill_leader(cluster: Cluster, topic: str, partition: int) -> tuple[Daemon, Daemon]:
    """kill -9 the partition's leader; returns it and the promoted replica, once lookupd
    names the replica and the replica leads."""
    old = cluster.leader(topic, partition)
    (replica,) = [n for n in cluster.holders(topic, partition) if n is not old]
    old.kill()
    wait_for(
        lambda: (
            (roles(replica, topic) or {}).get(partition) == "leader"
            and cluster.leader(topic, partition) is replica
        ),
        what="the replica promoted",
    )
    return old, replica


def test_a_pause_through_nsqadmin_survives_kill_9_of_the_leader(cluster: Cluster) -> None:
    """One partition, two copies: create the channel and pause it through nsqadmin; the
    replica holds the pause before nsqadmin answers; kill -9 the leader; the promoted replica
    is paused (a consumer gets nothing) until nsqadmin unpauses it."""
    topic, channel = "adm_one", "c"
    create_topic(cluster, topic, 1)
    # nsqadmin's channel create: lookupd /topic/create (the existing topic: no warning),
    # lookupd /channel/create, then /channel/create on every producer
    warning = admin_send(cluster, "POST", "/api/topics", {"topic": topic, "channel": channel})
    assert warning == ""
    leader = cluster.leader(topic, 0)
    (replica,) = [n for n in cluster.holders(topic, 0) if n is not leader]
    wait_for(lambda: channel_stats(replica, topic, channel), what="the channel on the replica")
    publish(leader, topic, 0, 5)

    assert admin_send(cluster, "POST", f"/api/topics/{topic}/{channel}", {"action": "pause"}) == ""
    assert (channel_stats(replica, topic, channel) or {}).get("paused") is True  # already

    old, new = kill_leader(cluster, topic, 0)
    assert new is replica
    assert old is leader
    stats = channel_stats(new, topic, channel)
    assert stats is not None
    assert stats["paused"] is True
    # a stock go-nsq consumer through lookupd: connected to the new leader, it gets nothing
    # while the channel is paused (its idle phase), then everything once nsqadmin unpauses
    go = Driver("go-nsq")
    try:
        argv = go.sub_argv(
            "", topic, channel, 5, idle=QUIET, timeout=20, lookupd=cluster.lookupd.http_address
        )
        proc = go.start(argv)
        time.sleep(QUIET + 1.0)
        assert proc.poll() is None
        unpause = {"action": "unpause"}
        assert admin_send(cluster, "POST", f"/api/topics/{topic}/{channel}", unpause) == ""
        run = go.finish(proc, timeout=30)
    finally:
        go.cleanup()
    assert run.returncode == 0, run.stderr[-3000:]
    kinds = ["idle" if "idle_ok" in line else "message" for line in run.lines if "done" not in line]
    assert kinds == ["idle"] + ["message"] * 5  # nothing before the unpause
    assert run.first("idle_ok")["idle_ok"] is True
    assert sorted(str(d["body"]) for d in run.deliveries) == [f"m{i}" for i in range(5)]


def test_a_call_on_one_node_reaches_every_partition_and_its_replicas(cluster: Cluster) -> None:
    """Three partitions led by three nodes: nsqd's own HTTP API on one node (no nsqadmin)
    pauses, creates, deletes, skips and orders on every copy; nsqadmin's topic pause too."""
    topic = "adm_spread"
    create_topic(cluster, topic, 3)
    first = cluster.nodes[0]
    for channel in ("c", "gone", "s", "o"):
        assert post(first, f"/channel/create?topic={topic}&channel={channel}") == (200, b"")
    copies = cluster.nodes  # every node holds two of the three partitions

    def everywhere(channel: str, key: str, value: object) -> bool:
        return all((channel_stats(n, topic, channel) or {}).get(key) == value for n in copies)

    assert all(channel_stats(n, topic, "gone") for n in copies)
    assert post(first, f"/channel/pause?topic={topic}&channel=c") == (200, b"")
    assert everywhere("c", "paused", True)  # on the reply, not eventually
    assert post(first, f"/channel/delete?topic={topic}&channel=gone") == (200, b"")
    assert all(channel_stats(n, topic, "gone") is None for n in copies)
    assert post(first, f"/channel/skip?topic={topic}&channel=s")[0] == 200
    assert everywhere("s", "skipped", True)
    assert post(first, f"/channel/setorder?topic={topic}&channel=o&order=true")[0] == 200
    assert everywhere("o", "is_multi_ordered", True)
    assert admin_send(cluster, "POST", f"/api/topics/{topic}", {"action": "pause"}) == ""
    assert all((topic_stats(n, topic) or {}).get("paused") is True for n in copies)
    # a node that holds none of the topic answers as nsqd does for a topic it lacks
    create_topic(cluster, "adm_alone", 1)
    (absent,) = [n for n in cluster.nodes if roles(n, "adm_alone") is None]
    status, body = post(absent, "/channel/pause?topic=adm_alone&channel=c")
    assert (status, json.loads(body)) == (404, {"message": "TOPIC_NOT_FOUND"})


@pytest.mark.fault
def test_every_admin_change_survives_kill_9_of_each_leader(cluster: Cluster) -> None:
    """Three partitions: every change through nsqadmin (and youzan's endpoints on a node),
    then kill -9 the leaders one after the other: each promoted replica shows it all, a
    consumer of it gets nothing, and once nsqadmin unpauses topic and channel, everything."""
    topic = "adm_all"
    create_topic(cluster, topic, 3)
    for channel in ("c", "gone", "s", "o", "m"):
        warning = admin_send(cluster, "POST", "/api/topics", {"topic": topic, "channel": channel})
        assert warning == ""
    for p in range(3):
        publish(cluster.leader(topic, p), topic, p, 4)
    base = f"/api/topics/{topic}"
    assert admin_send(cluster, "POST", f"{base}/c", {"action": "pause"}) == ""
    assert admin_send(cluster, "POST", f"{base}/m", {"action": "empty"}) == ""
    assert admin_send(cluster, "DELETE", f"{base}/gone", {}) == ""
    assert admin_send(cluster, "POST", base, {"action": "pause"}) == ""
    (node,) = [n for n in cluster.nodes if 2 not in (roles(n, topic) or {})]
    assert post(node, f"/channel/skip?topic={topic}&channel=s")[0] == 200
    assert post(node, f"/channel/setorder?topic={topic}&channel=o&order=true")[0] == 200
    # youzan's setoffset: channel m back to the start of partition 2, on a node that does not
    # hold partition 2 (carried to its leader)
    status, _ = post(node, f"/channel/setoffset?topic={topic}&channel=m&partition=2", b"msgcount:0")
    assert status == 200

    def shows_it_all(daemon: Daemon) -> bool:
        t = topic_stats(daemon, topic) or {}
        channels = {c["channel_name"]: c for c in t.get("channels") or ()}
        # m: emptied (confirmed at the end, 4), then partition 2 moved back to its start
        m_offsets = {
            part["partition"]: part["confirmed_offset"]
            for part in channels.get("m", {}).get("partitions") or ()
        }
        return bool(
            t.get("paused") is True
            and "gone" not in channels
            and channels.get("c", {}).get("paused") is True
            and channels.get("s", {}).get("skipped") is True
            and channels.get("o", {}).get("is_multi_ordered") is True
            and m_offsets
            and all(offset == (0 if p == 2 else 4) for p, offset in m_offsets.items())
        )

    promoted = []
    for p in range(3):
        if len(cluster.holders(topic, p)) < 2:
            continue  # a copy of this partition went with an earlier kill
        _, new = kill_leader(cluster, topic, p)
        promoted.append(new)
        assert shows_it_all(new), topic_stats(new, topic)
        consumer = RawClient(new.tcp_address)
        consumer.send(Sub(topic, "c"), Rdy(50))
        assert consumer.read().data == b"OK"
        assert received(consumer, QUIET) == []
        consumer.close()
    assert len(promoted) >= 2
    # unpaused through nsqadmin (which now finds the promoted leaders): the last one delivers
    # its partitions' messages
    consumer = RawClient(promoted[-1].tcp_address)
    consumer.send(Sub(topic, "c"), Rdy(50))
    assert consumer.read().data == b"OK"
    assert admin_send(cluster, "POST", base, {"action": "unpause"}) == ""
    assert received(consumer, QUIET) == []  # the channel is still paused
    assert admin_send(cluster, "POST", f"{base}/c", {"action": "unpause"}) == ""
    led = [p for p, role in (roles(promoted[-1], topic) or {}).items() if role == "leader"]
    expected = sorted(b"m%d" % i for _ in led for i in range(4))
    assert sorted(received(consumer, 5.0, enough=len(expected))) == expected
    consumer.close()
