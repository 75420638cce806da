"""Automatic balancing and the rolling-upgrade switch with real processes: lookupd and three
nsqd on racks holding a topic of 12 partitions of 2 copies, pnsq's client publishing over every
partition (with retries) and consuming them all along.

* A fourth node joins while balancing is switched off (``/cluster/balance?enable=false``): it
  gets nothing. Switched on, lookupd moves copies and leaderships to it until every node holds
  6 copies and leads 3; no acknowledged message is lost, every one is consumed, and the time
  to balance and the longest write gap are printed.
* Between ``/cluster/upgrade/begin`` and ``/done`` a node stopped (SIGTERM) hands its
  leaderships over and keeps its copies while it is down, even past
  ``--replica-replace-after``; back, it catches up, and ``/done`` lets balancing give it its
  leaderships back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration import cluster_load
from tests.integration.cluster_load import RackedCluster, report
from tests.integration.lookupd_helpers import get_json, post, wait_for

pytestmark = pytest.mark.integration

TOPIC = "spread"
PARTITIONS = 12


def holdings(cluster: RackedCluster) -> dict[str, tuple[int, int]]:
    """node id -> (leaderships, copies) as ``/cluster/stats`` reports them."""
    listed = get_json(cluster.lookupd, "/cluster/stats")["node_stat_list"]
    return {n["node_id"]: (n["leaders"], n["leaders"] + n["replicas"]) for n in listed}


def balance(cluster: RackedCluster) -> dict[str, Any]:
    return dict(get_json(cluster.lookupd, "/cluster/balance"))


def switch(cluster: RackedCluster, path: str) -> dict[str, Any]:
    status, body = post(cluster.lookupd, path)
    assert status == 200, body
    return dict(json.loads(body))


def settled_and_balanced(cluster: RackedCluster) -> bool:
    stats = get_json(cluster.lookupd, "/cluster/stats")
    return bool(stats["stable"] and stats["balanced"])


@contextmanager
def running(work: Path, *lookupd_flags: str) -> Iterator[RackedCluster]:
    cluster = RackedCluster(work, lookupd_flags=lookupd_flags)
    try:
        wait_for(lambda: len(get_json(cluster.lookupd, "/nodes")["producers"]) == 3, what="nodes")
        query = f"/topic/create?topic={TOPIC}&partition_num={PARTITIONS}&replicator=2"
        status, body = post(cluster.lookupd, query)
        assert status == 200, body
        wait_for(lambda: settled_and_balanced(cluster), timeout=30, what="placed and in sync")
        yield cluster
    finally:
        cluster.stop()


def test_a_fourth_node_gets_its_share_when_balancing_is_switched_on(tmp_path: Path) -> None:
    with running(tmp_path) as cluster:
        assert balance(cluster)["enabled"]
        assert switch(cluster, "/cluster/balance?enable=false")["enabled"] is False
        cluster.nodes.append(cluster.node("d"))  # stopped with the others
        fourth = cluster.node_id(cluster.nodes[3])
        wait_for(lambda: fourth in holdings(cluster), what="the fourth node registered")
        time.sleep(2.0)  # switched off: nothing comes to it
        assert holdings(cluster)[fourth] == (0, 0)
        state = balance(cluster)
        assert (state["enabled"], state["balanced"], state["moves"]) == (False, False, 0)

        def switch_on() -> float:
            asked = time.monotonic()
            assert switch(cluster, "/cluster/balance?enable=true")["enabled"] is True
            wait_for(lambda: settled_and_balanced(cluster), timeout=90, what="balanced")
            return time.monotonic() - asked

        took, load = cluster_load.under_load(cluster, switch_on, TOPIC)
        report("balance onto a fourth node", load, balanced=took)
        assert not load.lost
        assert set(holdings(cluster).values()) == {(3, 6)}
        # every partition still has its two copies, on two racks, both in sync
        for node in cluster.nodes:
            node_id = cluster.node_id(node)
            topics = get_json(cluster.lookupd, f"/pnsq/assignments?node={node_id}")["topics"]
            for part in topics.get(TOPIC, {}).get("partitions", {}).values():
                assert len({part["leader"], *part["replicas"]}) == 2
                assert sorted(part["isr"]) == sorted({part["leader"], *part["replicas"]})


def test_an_upgrade_keeps_a_stopped_nodes_copies_and_done_gives_its_leaderships_back(
    tmp_path: Path,
) -> None:
    with running(tmp_path, "--replica-replace-after=1s") as cluster:
        began = switch(cluster, "/cluster/upgrade/begin")
        assert began["upgrading"] is True
        assert get_json(cluster.lookupd, "/cluster/stats")["upgrading"] is True
        restarted = cluster.nodes[2]
        node_id = cluster.node_id(restarted)
        before = holdings(cluster)[node_id]
        assert before == (4, 8)

        def restart() -> None:
            restarted.stop()  # SIGTERM: leaderships handed over before it exits
            assert holdings(cluster)[node_id] == (0, 8)
            time.sleep(3.0)  # past --replica-replace-after: still not replaced
            assert holdings(cluster)[node_id] == (0, 8)
            restarted.start()
            wait_for(
                lambda: get_json(cluster.lookupd, "/cluster/stats")["stable"],
                timeout=60,
                what="the restarted node back in sync",
            )
            assert holdings(cluster)[node_id] == (0, 8)  # no balancing during the upgrade
            assert switch(cluster, "/cluster/upgrade/done")["upgrading"] is False
            wait_for(lambda: settled_and_balanced(cluster), timeout=60, what="balanced")

        _, load = cluster_load.under_load(cluster, restart, TOPIC)
        report("restart during an upgrade", load)
        assert not load.lost
        assert holdings(cluster)[node_id] == before
