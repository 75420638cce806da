"""``/topic/meta/update?replicator=N`` and ``/cluster/node/remove`` with real processes under
continuous load: lookupd and three nsqd (each its own rack), a topic with three partitions,
pnsq's client publishing round-robin over them (with retries) and consuming them all along.

The default rounds raise a topic's replication from 2 to 3 copies and lower it back to 2, and
drain one node then kill -9 it: no acknowledged message is lost, every one is consumed (the
redeliveries are counted), no partition goes offline or stays under-replicated, and the longest
write gap is printed. The fault round restarts lookupd (kill -9) in the middle of a drain slowed
by a backlog and ``--replica-move-rate``: the restarted lookupd carries it on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.daemons import Daemon
from tests.integration import cluster_load
from tests.integration.cluster_load import Load, RackedCluster, report
from tests.integration.lookupd_helpers import get_json, post, roles, wait_for

pytestmark = pytest.mark.integration

TOPIC = "ops"
PARTITIONS = 3
T = TypeVar("T")


class Cluster(RackedCluster):
    """:class:`RackedCluster` holding :data:`TOPIC`."""

    def partitions(self) -> dict[int, dict[str, Any]]:
        """Every partition of the topic as lookupd saved it (what the nodes are told)."""
        for node in self.nodes:
            topics = get_json(self.lookupd, f"/pnsq/assignments?node={self.node_id(node)}")[
                "topics"
            ]
            if TOPIC in topics:
                return {int(p): dict(v) for p, v in topics[TOPIC]["partitions"].items()}
        raise AssertionError(f"{TOPIC} is not placed")

    def stats(self) -> dict[str, Any]:
        return dict(get_json(self.lookupd, "/cluster/stats"))

    def settled(self, copies: int) -> bool:
        """Every partition has ``copies`` copies, all in sync, and the cluster is stable."""
        parts = self.partitions()
        return self.stats()["stable"] and all(
            1 + len(p["replicas"]) == copies and len(p["isr"]) == copies for p in parts.values()
        )


@contextmanager
def running(work: Path, *nsqd_flags: str) -> Iterator[Cluster]:
    """The cluster, with the topic placed and both copies of every partition in sync."""
    started = Cluster(work, *nsqd_flags)
    try:
        wait_for(lambda: len(get_json(started.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        query = f"/topic/create?topic={TOPIC}&partition_num={PARTITIONS}&replicator=2"
        status, body = post(started.lookupd, query)
        assert status == 200, body
        wait_for(lambda: started.settled(2), what="both copies of every partition in sync")
        yield started
    finally:
        started.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running(tmp_path) as started:
        yield started


def under_load(cluster: Cluster, action: Callable[[], T], *, backlog: int = 0) -> tuple[T, Load]:
    """:func:`~tests.integration.cluster_load.under_load` over every partition of
    :data:`TOPIC`."""
    return cluster_load.under_load(cluster, action, TOPIC, backlog=backlog)


def replicator(cluster: Cluster, copies: int) -> float:
    """``/topic/meta/update?replicator=``, and wait for every partition to have them."""
    asked = time.monotonic()
    status, body = post(cluster.lookupd, f"/topic/meta/update?topic={TOPIC}&replicator={copies}")
    assert status == 200, body
    meta = get_json(cluster.lookupd, f"/lookup?topic={TOPIC}&metainfo=true")["meta"]
    assert meta["replica"] == copies  # saved at once, reached partition by partition
    wait_for(lambda: cluster.settled(copies), timeout=60, what=f"{copies} copies in sync")
    return time.monotonic() - asked


def remove(cluster: Cluster, node_id: str) -> dict[str, Any]:
    status, body = post(cluster.lookupd, f"/cluster/node/remove?remove_node={node_id}")
    assert status == 200, body
    return dict(json.loads(body))


def drain(cluster: Cluster, node: Daemon) -> float:
    """``/cluster/node/remove`` asked until it answers drained."""
    asked = time.monotonic()
    node_id = cluster.node_id(node)
    first = remove(cluster, node_id)
    assert (first["state"], first["drained"]) == ("pending", False)
    wait_for(lambda: remove(cluster, node_id)["drained"], timeout=60, what="drained")
    return time.monotonic() - asked


def assert_drained(cluster: Cluster, node: Daemon) -> None:
    node_id = cluster.node_id(node)
    listed = {n["node_id"]: n for n in cluster.stats()["node_stat_list"]}[node_id]
    assert (listed["leaders"], listed["replicas"], listed["removing"]) == (0, 0, True)
    for number, part in cluster.partitions().items():
        assert node_id not in (part["leader"], *part["replicas"]), number
    wait_for(lambda: roles(node, TOPIC) in (None, {}), what="its copies released")


def test_replicator_2_to_3_to_2_under_load(cluster: Cluster) -> None:
    before = cluster.partitions()

    def change() -> dict[str, float]:
        return {"to 3": replicator(cluster, 3), "to 2": replicator(cluster, 2)}

    timings, load = under_load(cluster, change, backlog=300)  # the new copies catch up on it
    report("replicator 2 -> 3 -> 2", load, **timings)
    after = cluster.partitions()
    for number, part in after.items():
        # a copy was added and one dropped: never the leader, no leadership change
        assert (part["leader"], part["epoch"]) == (
            before[number]["leader"],
            before[number]["epoch"],
        )
    assert get_json(cluster.lookupd, f"/lookup?topic={TOPIC}&metainfo=true")["meta"]["replica"] == 2
    assert not load.lost
    assert load.redelivered < len(load.acked) // 2
    assert load.longest_gap < 5.0


def test_drain_a_node_then_kill_9_it_under_load(cluster: Cluster) -> None:
    victim = cluster.nodes[1]

    def action() -> dict[str, float]:
        took = drain(cluster, victim)
        assert_drained(cluster, victim)
        victim.kill()
        time.sleep(1.0)
        return {"drain": took}

    timings, load = under_load(cluster, action)
    report("drain, then kill -9", load, **timings)
    assert not load.lost
    assert load.redelivered < len(load.acked) // 2
    assert load.longest_gap < 5.0
    # nothing under-replicated: every partition kept both copies, on the two nodes left
    assert cluster.settled(2)
    for part in cluster.partitions().values():
        assert cluster.node_id(victim) not in (part["leader"], *part["replicas"])
    # new placements avoid the drained node (it is gone now, but marked all the same)
    assert [n["removing"] for n in cluster.stats()["node_stat_list"]].count(True) == 1


@pytest.mark.fault
def test_a_drain_survives_a_lookupd_restart(tmp_path: Path) -> None:
    # a backlog fed to each new copy at 128 KiB/s: the drain takes seconds
    with running(tmp_path, f"--replica-move-rate={128 * 1024}") as cluster:
        victim = cluster.nodes[0]
        restarted_at = 0

        def action() -> None:
            nonlocal restarted_at
            remove(cluster, cluster.node_id(victim))
            wait_for(
                lambda: any(
                    m["move_to"] not in m["isr"]
                    for m in get_json(cluster.lookupd, "/topic/partition/moves")["moves"]
                ),
                what="a copy catching up",
            )
            cluster.lookupd.kill()
            restarted_at = len(cluster.lookupd.log_text())
            cluster.lookupd.start()
            assert not remove(cluster, cluster.node_id(victim))["drained"]
            wait_for(lambda: remove(cluster, cluster.node_id(victim))["drained"], timeout=90)

        _, load = under_load(cluster, action, backlog=600)
        report("drain across a lookupd restart", load)
        assert_drained(cluster, victim)
        assert cluster.settled(2)
        assert not load.lost
        # the restarted lookupd carried the drain on from what it had saved
        assert "drain 127.0.0.1" in cluster.lookupd.log_text()[restarted_at:]
