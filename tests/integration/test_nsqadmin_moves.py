"""The real nsqadmin 1.3.0 on pnsq's lookupd while partitions move: during a throttled replica
move, and after a leader move, its ``/api/topics/<topic>`` and ``/api/nodes`` name exactly the
nodes that lead a partition of the topic (the producers of ``/lookup``), and no node that
stopped leading stays listed once the move is over. lookupd's ``/nodes`` gives each node's rack.

nsqadmin reads lookupd's ``/lookup?topic=`` and ``/nodes``, then each producer's
``/stats?format=json&topic=`` (internal/clusterinfo in github.com/nsqio/nsq@v1.3.0).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import Daemon, Peer, nsqadmin
from tests.integration.cluster_load import BODY_SIZE, RackedCluster
from tests.integration.lookupd_helpers import get_json, post, request, roles, wait_for
from tests.integration.test_nsqadmin import get

pytestmark = pytest.mark.integration

TOPIC = "adm"
MOVE_RATE = 256 * 1024  # bytes/s a catching-up copy is fed (--replica-move-rate)
BACKLOG = 900  # messages of BODY_SIZE on partition 0: about three seconds of copying


class AdminCluster(RackedCluster):
    """:class:`RackedCluster` (throttled copies) with nsqadmin reading its lookupd."""

    def __init__(self, work: Path) -> None:
        super().__init__(work, f"--replica-move-rate={MOVE_RATE}")
        self.admin: Peer | None = None

    def start_admin(self, work: Path) -> Peer:
        flag = f"--lookupd-http-address={self.lookupd.http_address}"
        self.admin = nsqadmin(work / "admin", flags=(flag,)).start()
        return self.admin

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.stop()
        super().stop()

    def by_id(self, node_id: str) -> Daemon:
        return next(n for n in self.nodes if self.node_id(n) == node_id)

    def partitions(self) -> dict[int, dict[str, Any]]:
        """The topic's partitions as lookupd placed them (as saved), by number."""
        for node in self.nodes:
            doc = get_json(self.lookupd, f"/pnsq/assignments?node={self.node_id(node)}")
            if TOPIC in doc["topics"]:
                parts = doc["topics"][TOPIC]["partitions"]
                return {int(number): dict(part) for number, part in parts.items()}
        raise AssertionError(f"{TOPIC} is not placed")

    def leaders(self) -> set[str]:
        """HTTP addresses of the nodes leading a partition of the topic."""
        return {self.by_id(p["leader"]).http_address for p in self.partitions().values()}

    def moves(self) -> list[dict[str, Any]]:
        return list(get_json(self.lookupd, f"/topic/partition/moves?topic={TOPIC}")["moves"])


def shown(admin: Peer) -> tuple[set[str], set[str], str]:
    """What nsqadmin shows of the topic: the nodes of ``/api/topics/<topic>``, the nodes
    (``host:http_port``) whose ``/api/nodes`` entry lists the topic, and its warning text."""
    status, topic = get(f"{admin.url}/api/topics/{TOPIC}")
    assert status == 200, topic
    status, nodes = get(f"{admin.url}/api/nodes")
    assert status == 200, nodes
    holding = {
        f"{n['broadcast_address']}:{n['http_port']}"
        for n in nodes["nodes"]
        if any(t["topic"] == TOPIC for t in n["topics"] or ())
    }
    return {n["node"] for n in topic["nodes"]}, holding, topic["message"] + nodes["message"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AdminCluster]:
    started = AdminCluster(tmp_path)
    try:
        wait_for(lambda: len(get_json(started.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        yield started
    finally:
        started.stop()


def start_move(cluster: AdminCluster, source: str, target: str, *, leader: bool) -> None:
    flag = "true" if leader else "false"
    query = f"/topic/partition/move?topic={TOPIC}&partition=0&move_from={source}&move_to={target}"
    status, body = post(cluster.lookupd, f"{query}&move_leader={flag}")
    assert status == 200, body


def test_nsqadmin_shows_the_leading_nodes_during_and_after_moves(
    cluster: AdminCluster, tmp_path: Path
) -> None:
    query = f"/topic/create?topic={TOPIC}&partition_num=2&replicator=2"
    assert post(cluster.lookupd, query) == (200, b"")
    wait_for(lambda: all(len(p["isr"]) == 2 for p in cluster.partitions().values()), what="isr")
    placed = cluster.partitions()
    leader0, replica0 = placed[0]["leader"], placed[0]["replicas"][0]
    spare = next(
        cluster.node_id(n) for n in cluster.nodes if cluster.node_id(n) not in placed[0]["isr"]
    )
    batch = b"\n".join((b"%08d" % i).ljust(BODY_SIZE, b".") for i in range(300))
    for _ in range(BACKLOG // 300):  # partition 0: its leader leads no other
        status, body = post(cluster.by_id(leader0), f"/mpub?topic={TOPIC}&partition=0", batch)
        assert (status, body) == (200, b"OK")
    for node in cluster.nodes:  # every node leading a partition registered the topic
        post(node, f"/pub?topic={TOPIC}", b"one more")
    racks = {p["tcp_port"]: p["rack"] for p in get_json(cluster.lookupd, "/nodes")["producers"]}
    assert racks == {n.tcp_port: f"r-{name}" for n, name in zip(cluster.nodes, "abc", strict=True)}
    admin = cluster.start_admin(tmp_path)
    leaders = cluster.leaders()
    assert len(leaders) == 2  # three nodes, two partitions: one node leads none
    wait_for(lambda: shown(admin)[:2] == (leaders, leaders), what="nsqadmin shows the leaders")

    # a replica move, throttled: the leaders do not change, nor what nsqadmin shows
    start_move(cluster, replica0, spare, leader=False)
    samples = 0
    while cluster.moves():
        topic_nodes, holding, warning = shown(admin)
        assert (topic_nodes, holding) == (leaders, leaders), warning
        assert warning == ""
        samples += 1
        time.sleep(0.1)
    assert samples >= 5, "the copy took too little time to look at it"
    print(f"nsqadmin looked at {samples} times during the replica move")
    assert cluster.partitions()[0]["replicas"] == [spare]

    # a leader move to the node that led nothing (and holds the moved copy now): the old
    # leader leads nothing any more, and leaves nsqadmin's view once the lookup says so
    asked = time.monotonic()
    start_move(cluster, leader0, spare, leader=True)
    either = leaders | {cluster.by_id(spare).http_address}
    stays = {cluster.by_id(placed[1]["leader"]).http_address}  # partition 1 does not move
    while cluster.moves():  # meanwhile: the old leaders, the new ones, or both for a moment
        assert time.monotonic() - asked < 30, "the leader move did not end"
        topic_nodes, holding, _ = shown(admin)
        assert stays <= topic_nodes <= either
        assert stays <= holding <= either
        time.sleep(0.05)
    moved = time.monotonic()
    after = cluster.leaders()
    assert cluster.by_id(leader0).http_address not in after
    assert cluster.by_id(spare).http_address in after
    wait_for(lambda: shown(admin) == (after, after, ""), timeout=20, what="no stale node")
    print(
        f"leader move {moved - asked:.2f} s; nsqadmin shows the new leaders "
        f"{time.monotonic() - moved:.2f} s after it ended"
    )
    for _ in range(10):  # and it stays so
        assert shown(admin) == (after, after, "")
        time.sleep(0.2)

    # nsqadmin's Delete: lookupd's /topic/delete, then each producer's; pnsq's lookupd deletes
    # the topic on every node, whose own delete then answers as done (no warning shown)
    status, raw, _ = request(f"{admin.url}/api/topics/{TOPIC}", "DELETE", {}, None)
    assert (status, json.loads(raw)) == (200, {"message": ""})
    assert TOPIC not in get_json(cluster.lookupd, "/topics")["topics"]
    for node in cluster.nodes:
        wait_for(lambda node=node: roles(node, TOPIC) is None, what="deleted on the node")
