"""Fault injection on a replicated cluster of real processes (see ``harness.py``): while
publishers with acknowledgements run, a leader is killed, paused, a replica killed, lookupd
restarted, both copies of a partition killed, a node lost for good. Afterwards every
acknowledged message must be stored; the figures go to ``$FAULT_REPORT``.

One round of each scenario runs by default; ``scripts/chaos --rounds N`` runs N.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault.harness import FaultCluster, GoPublisher, YouzanPublisher, rounds
from tests.fault.rounds import finish, start_publishers, writable_again
from tests.integration.lookupd_helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(600)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FaultCluster]:
    started = FaultCluster(tmp_path)
    try:
        started.create_topic()
        yield started
    finally:
        started.stop()


def test_kill_9_of_a_leader(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = start_publishers(cluster, f"k{round_}")
        victim = cluster.leader(0)
        # a stock producer beside a surviving node keeps publishing (forwarded to leaders)
        survivor = next(n for n in cluster.nodes if n is not victim)
        go = GoPublisher(survivor, f"gok{round_}", 400)
        youzan = YouzanPublisher(cluster, f"yzk{round_}", 400)
        time.sleep(1.0)
        victim.kill()
        writable = writable_again(publishers[0], time.monotonic())
        time.sleep(1.0)
        victim.start()
        cluster.wait_in_sync()
        finish("kill_leader", cluster, publishers, go, youzan, writable_s=writable)


def test_sigstop_of_a_leader_past_the_heartbeat_timeout(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = start_publishers(cluster, f"s{round_}")
        time.sleep(1.0)
        victim = cluster.leader(1)
        old = cluster.placement()[1]
        cluster.pause(victim)
        try:
            writable = writable_again(publishers[1], time.monotonic())
            assert cluster.placement()[1]["epoch"] > old["epoch"]
        finally:
            cluster.resume(victim)
        cluster.wait_in_sync()
        finish("sigstop_leader", cluster, publishers, writable_s=writable)


def test_kill_9_of_a_replica(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = start_publishers(cluster, f"r{round_}")
        time.sleep(1.0)
        victim = cluster.replica(0)
        victim.kill()
        writable = writable_again(publishers[0], time.monotonic())
        time.sleep(1.0)
        victim.start()
        cluster.wait_in_sync()
        finish("kill_replica", cluster, publishers, writable_s=writable)


def test_lookupd_restart_under_load(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = start_publishers(cluster, f"l{round_}")
        go = GoPublisher(cluster.nodes[0], f"gol{round_}", 400)
        time.sleep(1.0)
        before = cluster.placement()
        cluster.lookupd.stop()
        down = time.monotonic()
        time.sleep(2.0)
        # writes to healthy partitions go on without lookupd
        assert all(p.writable_after(down + 0.5) is not None for p in publishers)
        cluster.lookupd.start()
        time.sleep(3.0)
        after = cluster.placement()
        assert {p: v["epoch"] for p, v in after.items()} == {
            p: v["epoch"] for p, v in before.items()
        }, "a lookupd restart moved leaderships"
        finish("restart_lookupd", cluster, publishers, go)


def test_kill_both_copies_with_sync_every_1(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, nsqd_flags=("--sync-every=1",))
    try:
        cluster.create_topic()
        for round_ in range(rounds()):
            publishers = start_publishers(cluster, f"b{round_}")
            time.sleep(1.5)
            both = [cluster.leader(0), cluster.replica(0)]
            for node in both:
                node.kill()
            time.sleep(0.5)
            for node in both:
                node.start()
            cluster.wait_in_sync()
            finish("kill_both_copies", cluster, publishers)
    finally:
        cluster.stop()


def test_a_node_lost_for_good_is_replaced(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, lookupd_flags=("--replica-replace-after=3s",))
    try:
        cluster.create_topic()
        publishers = start_publishers(cluster, "g")
        time.sleep(1.0)
        victim = cluster.replica(0)
        victim_id = cluster.node_id(victim)
        victim.kill()
        lost = time.monotonic()
        wait_for(
            lambda: victim_id not in cluster.placement()[0]["replicas"],
            timeout=30,
            what="a new replica placed",
        )
        cluster.nodes.remove(victim)  # gone for good: the checker reads the others
        cluster.wait_in_sync(timeout=60)
        restored = time.monotonic() - lost
        for part in cluster.placement().values():
            assert victim_id not in (part["leader"], *part["replicas"])
            assert len(part["isr"]) == 2
        finish("node_lost", cluster, publishers, replication_restored_s=round(restored, 3))
    finally:
        cluster.stop()


def test_a_leader_cut_off_from_lookupd_and_its_replica(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, links=True)
    try:
        cluster.create_topic()
        for round_ in range(rounds()):
            publishers = start_publishers(cluster, f"c{round_}")
            time.sleep(1.0)
            victim = cluster.leader(0)
            old = cluster.placement()[0]
            cluster.isolate(victim)
            try:
                writable = writable_again(publishers[0], time.monotonic())
                new = cluster.placement()[0]
                assert new["epoch"] > old["epoch"]
                assert new["leader"] != old["leader"]
            finally:
                cluster.heal(victim)
            cluster.wait_in_sync()
            finish("cut_off_leader", cluster, publishers, writable_s=writable)
    finally:
        cluster.stop()
