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

from tests.fault.harness import (
    PARTITIONS,
    FaultCluster,
    GoPublisher,
    PnsqPublisher,
    YouzanPublisher,
    check,
    high_watermarks,
    in_order,
    report,
    rounds,
)
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


def _publishers(cluster: FaultCluster, tag: str) -> list[PnsqPublisher]:
    """One publisher per partition; the partitions' high-watermarks are noted first (the
    checker reads from there: what earlier rounds stored was checked by them)."""
    cluster.round_start = high_watermarks(cluster)
    return [PnsqPublisher(cluster, p, f"{tag}p{p}").start() for p in range(PARTITIONS)]


def _finish(
    scenario: str,
    cluster: FaultCluster,
    publishers: list[PnsqPublisher],
    go: GoPublisher | None = None,
    youzan: YouzanPublisher | None = None,
    **figures: object,
) -> None:
    for publisher in publishers:
        publisher.stop()
    acked = {body for publisher in publishers for body, _, _ in publisher.acked}
    if go is not None:
        acked |= go.finish()
    if youzan is not None:
        acked |= youzan.finish()
    outcome = check(cluster, acked, cluster.round_start)
    for publisher in publishers:
        assert in_order(outcome.stored[publisher.partition], publisher.name)
    report(
        scenario,
        acked=len(acked),
        lost=len(outcome.lost),
        duplicates=outcome.duplicates,
        refused=sum(len(p.refused) for p in publishers),
        **figures,
    )
    assert not outcome.lost, sorted(outcome.lost)[:10]
    assert all(len(p.acked) > 0 for p in publishers)


def _writable(publisher: PnsqPublisher, since: float, timeout: float = 30) -> float:
    """Seconds from ``since`` until ``publisher`` had a publish acknowledged again."""
    wait_for(lambda: publisher.writable_after(since) is not None, timeout=timeout)
    return round(publisher.writable_after(since) or -1.0, 3)


def test_kill_9_of_a_leader(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = _publishers(cluster, f"k{round_}")
        victim = cluster.leader(0)
        # a stock producer beside a surviving node keeps publishing (forwarded to leaders)
        survivor = next(n for n in cluster.nodes if n is not victim)
        go = GoPublisher(survivor, f"gok{round_}", 400)
        youzan = YouzanPublisher(cluster, f"yzk{round_}", 400)
        time.sleep(1.0)
        victim.kill()
        writable = _writable(publishers[0], time.monotonic())
        time.sleep(1.0)
        victim.start()
        cluster.wait_in_sync()
        _finish("kill_leader", cluster, publishers, go, youzan, writable_s=writable)


def test_sigstop_of_a_leader_past_the_heartbeat_timeout(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = _publishers(cluster, f"s{round_}")
        time.sleep(1.0)
        victim = cluster.leader(1)
        old = cluster.placement()[1]
        cluster.pause(victim)
        try:
            writable = _writable(publishers[1], time.monotonic())
            assert cluster.placement()[1]["epoch"] > old["epoch"]
        finally:
            cluster.resume(victim)
        cluster.wait_in_sync()
        _finish("sigstop_leader", cluster, publishers, writable_s=writable)


def test_kill_9_of_a_replica(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = _publishers(cluster, f"r{round_}")
        time.sleep(1.0)
        victim = cluster.replica(0)
        victim.kill()
        writable = _writable(publishers[0], time.monotonic())
        time.sleep(1.0)
        victim.start()
        cluster.wait_in_sync()
        _finish("kill_replica", cluster, publishers, writable_s=writable)


def test_lookupd_restart_under_load(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        publishers = _publishers(cluster, f"l{round_}")
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
        _finish("restart_lookupd", cluster, publishers, go)


def test_kill_both_copies_with_sync_every_1(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, nsqd_flags=("--sync-every=1",))
    try:
        cluster.create_topic()
        for round_ in range(rounds()):
            publishers = _publishers(cluster, f"b{round_}")
            time.sleep(1.5)
            both = [cluster.leader(0), cluster.replica(0)]
            for node in both:
                node.kill()
            time.sleep(0.5)
            for node in both:
                node.start()
            cluster.wait_in_sync()
            _finish("kill_both_copies", cluster, publishers)
    finally:
        cluster.stop()


def test_a_node_lost_for_good_is_replaced(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, lookupd_flags=("--replica-replace-after=3s",))
    try:
        cluster.create_topic()
        publishers = _publishers(cluster, "g")
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
        _finish("node_lost", cluster, publishers, replication_restored_s=round(restored, 3))
    finally:
        cluster.stop()


def test_a_leader_cut_off_from_lookupd_and_its_replica(tmp_path: Path) -> None:
    cluster = FaultCluster(tmp_path, links=True)
    try:
        cluster.create_topic()
        for round_ in range(rounds()):
            publishers = _publishers(cluster, f"c{round_}")
            time.sleep(1.0)
            victim = cluster.leader(0)
            old = cluster.placement()[0]
            cluster.isolate(victim)
            try:
                writable = _writable(publishers[0], time.monotonic())
                new = cluster.placement()[0]
                assert new["epoch"] > old["epoch"]
                assert new["leader"] != old["leader"]
            finally:
                cluster.heal(victim)
            cluster.wait_in_sync()
            _finish("cut_off_leader", cluster, publishers, writable_s=writable)
    finally:
        cluster.stop()
