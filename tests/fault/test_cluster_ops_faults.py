"""Cluster operations under continuous load, with real processes: lookupd and three nsqd on
racks of their own (a fourth started later), topic ``ops`` with 12 partitions and ``ord``
(ordered) with 4, two copies of each; stock go-nsq producers and pnsq's client publishing, the
real pynsq ``Reader`` and pnsq's ordered consumer consuming through lookupd (see
``ops_load.py``). Each scenario runs an operation, or breaks one in the middle:

* drain a node; move one replica and one leader; ``replicator`` 2 -> 3 -> 2; a fourth node added
  (auto-balance spreads the partitions); a rolling restart (SIGTERM, restart) of every node;
* kill -9 of the source or of the target in the middle of a move; lookupd restarted in the
  middle of a move; with lookupd HA, the leader lookupd killed in the middle of a move.

Each round then checks (``ops_round.py``): no acknowledged message lost, every one delivered to
its consumer, the ordered topic in order, redeliveries bounded, and no partition left without
a leader in lookupd's ``/lookup`` (a client finds the partitions there: one missing there cannot
be written to by a partition-aware client, nor read by a stock consumer); the figures (the
longest write gap of a partition, the operation's time) go to ``$FAULT_REPORT``.

One round of each scenario runs with ``-m fault``; ``scripts/chaos --rounds N`` runs N. All but
one are marked slow (``tests/integration/test_cluster_ops.py``, ``test_partition_move.py`` and
``test_balance.py`` run each operation in the default suite); the lookupd leader change in the
middle of a move, which no integration test covers, stays in it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import Daemon
from tests.fault.ha_cluster import HAFaultCluster
from tests.fault.harness import FaultCluster, rounds
from tests.fault.ops_load import (
    OPS,
    OPS_PARTITIONS,
    ORD,
    ORD_PARTITIONS,
    control,
    create_topics,
    live,
)
from tests.fault.ops_round import ops_round
from tests.integration.lookupd_helpers import get_json, lookup, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(900)]

MOVE_RATE = 256 * 1024  # bytes/s a catching-up copy is fed: a backlog makes a move last
BACKLOG = 600  # messages of 1 KiB: ~2.3 s of catching up at MOVE_RATE
KILL_OFFLINE = 10.0  # s a partition may be missing from /lookup after a kill -9
#: s for a fourth node to get its share, and for the leaderships to come back after a rolling
#: restart (docs/cluster.md, "Balancing")
BALANCE_BOUND = 60.0
SETTLE = 2.0  # s of load before and after an operation


def _cluster(tmp_path: Path, ha: bool = False) -> FaultCluster:
    flags = (f"--replica-move-rate={MOVE_RATE}",)
    if ha:
        return HAFaultCluster(tmp_path, nsqd_flags=flags, racks=True)
    return FaultCluster(tmp_path, nsqd_flags=flags, racks=True)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FaultCluster]:
    started = _cluster(tmp_path)
    try:
        create_topics(started)
        yield started
    finally:
        started.stop()


# ---------------------------------------------------------------------------------- operations


def stats(cluster: FaultCluster) -> dict[str, Any]:
    status, doc = control(cluster, "GET", "/cluster/stats")
    assert status == 200, doc
    return dict(doc)


def stable(cluster: FaultCluster) -> bool:
    """``/cluster/stats`` says stable (no move, nothing offline, every copy in sync)."""
    return bool(stats(cluster)["stable"])


def moves(cluster: FaultCluster) -> list[dict[str, Any]]:
    status, doc = control(cluster, "GET", "/topic/partition/moves")
    assert status == 200, doc
    return list(doc["moves"])


def start_move(
    cluster: FaultCluster, topic: str, partition: int, source: str, target: str, leader: bool
) -> None:
    query = (
        f"/topic/partition/move?topic={topic}&partition={partition}&move_from={source}"
        f"&move_to={target}&move_leader={'true' if leader else 'false'}"
    )
    status, doc = control(cluster, "POST", query)
    assert status == 200, doc
    assert (doc["move_from"], doc["move_to"]) == (source, target)


def spare(cluster: FaultCluster, topic: str, partition: int) -> str:
    """A live node holding no copy of the partition."""
    part = cluster.placement(topic)[partition]
    held = {part["leader"], *part["replicas"]}
    return next(cluster.node_id(n) for n in cluster.nodes if cluster.node_id(n) not in held)


def catching_up(cluster: FaultCluster, target: str) -> None:
    """Wait until ``target`` is an assigned replica outside the in-sync set."""
    wait_for(
        lambda: any(target in m["replicas"] and target not in m["isr"] for m in moves(cluster)),
        what="the target catching up",
    )


def moved(cluster: FaultCluster, timeout: float = 90.0) -> None:
    wait_for(lambda: not moves(cluster), timeout=timeout, what="the move to end")


def unsettled(cluster: FaultCluster, copies: int | None = None) -> dict[str, Any]:
    """What keeps the cluster from being settled: ``/cluster/stats`` not stable, or not
    balanced while balancing is on and no upgrade runs (then with the moves in progress), or
    partitions without ``copies`` copies (any number, if None) all in sync; empty if none."""
    found: dict[str, Any] = {}
    for topic in (OPS, ORD):
        for number, part in cluster.placement(topic).items():
            held = 1 + len(part["replicas"])
            if len(part["isr"]) != held or held != (copies or held):
                found[f"{topic}/{number}"] = part
    doc = stats(cluster)
    balancing_left = doc["balance_enabled"] and not doc["upgrading"] and not doc["balanced"]
    if not doc["stable"] or balancing_left:
        found["stats"] = doc
        found["moves"] = moves(cluster)
    return found


def settle(cluster: FaultCluster, copies: int | None = None, timeout: float = 120.0) -> None:
    """Wait until :func:`unsettled` finds nothing (else fail, with what it found)."""
    deadline = time.monotonic() + timeout
    while found := unsettled(cluster, copies):
        assert time.monotonic() < deadline, f"not settled: {found}"
        time.sleep(0.2)


def remove(cluster: FaultCluster, node_id: str, extra: str = "") -> dict[str, Any]:
    status, doc = control(cluster, "POST", f"/cluster/node/remove?remove_node={node_id}{extra}")
    assert status == 200, doc
    return dict(doc)


def drain(cluster: FaultCluster, node_id: str, timeout: float = 120.0) -> float:
    asked = time.monotonic()
    remove(cluster, node_id)
    wait_for(lambda: remove(cluster, node_id)["drained"], timeout=timeout, what="drained")
    return time.monotonic() - asked


def kill(cluster: FaultCluster, node: Daemon) -> None:
    """kill -9; no new load is sent its way until :func:`restart`."""
    cluster.unreachable.add(id(node))
    node.kill()


def restart(cluster: FaultCluster, node: Daemon) -> None:
    node.start()
    cluster.unreachable.discard(id(node))


def registered(cluster: FaultCluster) -> None:
    """Every live node registered with lookupd again, each with every partition it leads."""
    count = len(live(cluster))
    wait_for(lambda: len(get_json(cluster.lookupd, "/nodes")["producers"]) == count)
    for topic, partitions in ((OPS, OPS_PARTITIONS), (ORD, ORD_PARTITIONS)):
        wait_for(lambda t=topic, n=partitions: len(lookup(cluster.lookupd, t)["partitions"]) == n)


def balanced(cluster: FaultCluster) -> bool:
    """Stable, lookupd says balanced, and every node not being removed leads within one
    partition of the mean and holds (leads or replicates) within one copy of it."""
    doc = stats(cluster)
    nodes = [n for n in doc["node_stat_list"] if not n["removing"]]
    leads = [n["leaders"] for n in nodes]
    holds = [n["leaders"] + n["replicas"] for n in nodes]
    even = all(abs(x - statistics.mean(counts)) <= 1 for counts in (leads, holds) for x in counts)
    return bool(doc["stable"] and doc["balanced"] and even)


def balancing(cluster: FaultCluster, on: bool) -> None:
    """Switch lookupd's balancing (a scenario that checks the placement an operation left
    switches it off: a balancing move could follow at once)."""
    status, doc = control(cluster, "POST", f"/cluster/balance?enable={'true' if on else 'false'}")
    assert status == 200, doc
    assert doc["enabled"] is on, doc


def upgrade(cluster: FaultCluster, step: str) -> None:
    """``/cluster/upgrade/begin`` or ``/done``."""
    status, doc = control(cluster, "POST", f"/cluster/upgrade/{step}")
    assert status == 200, doc
    assert doc["upgrading"] is (step == "begin"), doc


# ---------------------------------------------------------------------------------- scenarios


@pytest.mark.slow
def test_drain_a_node(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        with ops_round(cluster, f"d{round_}") as load:
            time.sleep(SETTLE)
            victim = cluster.node_id(cluster.nodes[round_ % len(cluster.nodes)])
            took = drain(cluster, victim)
            listed = {n["node_id"]: n for n in stats(cluster)["node_stat_list"]}[victim]
            assert (listed["leaders"], listed["replicas"]) == (0, 0)
            time.sleep(SETTLE)
            load.finish("ops_drain", took)
        remove(cluster, victim, "&restore=true")  # an empty node again, for the next round
        settle(cluster)


@pytest.mark.slow
def test_move_a_replica_and_a_leader(cluster: FaultCluster) -> None:
    balancing(cluster, False)
    for round_ in range(rounds()):
        with ops_round(cluster, f"m{round_}") as load:
            replica_part, leader_part = round_ % OPS_PARTITIONS, round_ % ORD_PARTITIONS
            load.backlog(OPS, replica_part, BACKLOG // 2)
            before = cluster.placement(OPS)[replica_part]
            target = spare(cluster, OPS, replica_part)
            asked = time.monotonic()
            start_move(cluster, OPS, replica_part, before["replicas"][0], target, leader=False)
            moved(cluster)
            replica_s = time.monotonic() - asked
            after = cluster.placement(OPS)[replica_part]
            assert (after["leader"], after["replicas"], after["epoch"]) == (
                before["leader"],
                [target],
                before["epoch"],
            )
            first = cluster.placement(ORD)[leader_part]
            target = spare(cluster, ORD, leader_part)
            asked = time.monotonic()
            start_move(cluster, ORD, leader_part, first["leader"], target, leader=True)
            moved(cluster)
            leader_s = time.monotonic() - asked
            last = cluster.placement(ORD)[leader_part]
            assert (last["leader"], last["replicas"], last["epoch"]) == (
                target,
                first["replicas"],
                first["epoch"] + 1,
            )
            time.sleep(SETTLE)
            load.finish(
                "ops_move",
                replica_s + leader_s,
                replica_s=round(replica_s, 3),
                leader_s=round(leader_s, 3),
            )


@pytest.mark.slow
def test_replicator_2_to_3_to_2(cluster: FaultCluster) -> None:
    def replicator(copies: int) -> float:
        asked = time.monotonic()
        for topic in (OPS, ORD):
            status, doc = control(
                cluster, "POST", f"/topic/meta/update?topic={topic}&replicator={copies}"
            )
            assert status == 200, doc
        settle(cluster, copies)
        return time.monotonic() - asked

    for round_ in range(rounds()):
        with ops_round(cluster, f"r{round_}") as load:
            time.sleep(SETTLE)
            leaders = {
                t: {p: v["leader"] for p, v in cluster.placement(t).items()} for t in (OPS, ORD)
            }
            up, down = replicator(3), replicator(2)
            # copies were added and dropped: never a leader, no leadership moved
            assert leaders == {
                t: {p: v["leader"] for p, v in cluster.placement(t).items()} for t in (OPS, ORD)
            }
            time.sleep(SETTLE)
            load.finish("ops_replicator", up + down, up_s=round(up, 3), down_s=round(down, 3))


def _move_broken_by(cluster: FaultCluster, round_: int, scenario: str, what: str) -> None:
    """Round ``round_``: a move of an ``ord`` partition after a backlog, broken in the middle by
    ``what``: ``source`` (kill -9 of the leader moved away), ``target`` (kill -9 of the node
    it moves to), ``lookupd`` (kill -9 and restart of lookupd), ``leader-lookupd`` (HA: kill -9
    of the leader lookupd, which is then restarted)."""
    partition = round_ % ORD_PARTITIONS
    with ops_round(cluster, f"{what[0]}{round_}") as load:
        load.backlog(ORD, partition, BACKLOG)
        first = cluster.placement(ORD)[partition]
        target = spare(cluster, ORD, partition)
        leader = what == "source"
        source = first["leader"] if leader else first["replicas"][0]
        asked = time.monotonic()
        start_move(cluster, ORD, partition, source, target, leader=leader)
        catching_up(cluster, target)
        # still in the middle of it as the fault comes: the target not in sync yet (joining the
        # ISR is lookupd's step: a move that ends [target] was carried on after the fault)
        (pending,) = moves(cluster)
        assert target in pending["replicas"], pending
        assert target not in pending["isr"], pending
        offline_bound = 0.0
        victim: Daemon | None = None
        if what in ("source", "target"):
            victim = cluster.by_id(source if what == "source" else target)
            kill(cluster, victim)
            offline_bound = KILL_OFFLINE
        elif what == "lookupd":
            load.watch.paused.set()
            cluster.lookupd.kill()
            cluster.lookupd.start()
            registered(cluster)
            load.watch.paused.clear()
        else:
            assert isinstance(cluster, HAFaultCluster)
            old = cluster.lookupd_leader()
            load.watch.paused.set()
            old.kill()
            cluster.lookupd_leader()  # the other one leads
            old.start()
            cluster.wait_registered()
            registered(cluster)
            load.watch.paused.clear()
        moved(cluster)
        took = time.monotonic() - asked
        last = cluster.placement(ORD)[partition]
        if what == "source":  # failed over to the in-sync replica; the move finished without it
            assert (last["leader"], last["replicas"]) == (first["replicas"][0], [target])
        elif what == "target":  # rolled back
            assert (last["leader"], last["replicas"], last["epoch"]) == (
                first["leader"],
                first["replicas"],
                first["epoch"],
            )
        else:  # carried on by the restarted (or the new leader) lookupd
            assert (last["leader"], last["replicas"], last["epoch"]) == (
                first["leader"],
                [target],
                first["epoch"],
            )
        time.sleep(SETTLE)
        if victim is not None:
            restart(cluster, victim)
        load.finish(scenario, took, offline_bound=offline_bound)
    settle(cluster)


@pytest.mark.slow
def test_kill_9_of_the_source_leader_mid_move(cluster: FaultCluster) -> None:
    balancing(cluster, False)
    for round_ in range(rounds()):
        _move_broken_by(cluster, round_, "ops_kill_source", "source")


@pytest.mark.slow
def test_kill_9_of_the_target_mid_move(cluster: FaultCluster) -> None:
    balancing(cluster, False)
    for round_ in range(rounds()):
        _move_broken_by(cluster, round_, "ops_kill_target", "target")


@pytest.mark.slow
def test_lookupd_restart_mid_move(cluster: FaultCluster) -> None:
    balancing(cluster, False)
    for round_ in range(rounds()):
        _move_broken_by(cluster, round_, "ops_lookupd_restart", "lookupd")


def test_lookupd_leader_change_mid_move(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, ha=True)
    try:
        create_topics(cluster)
        balancing(cluster, False)
        for round_ in range(rounds()):
            _move_broken_by(cluster, round_, "ops_ha_leader_change", "leader-lookupd")
    finally:
        cluster.stop()


@pytest.mark.slow
def test_a_fourth_node_gets_its_share(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        with ops_round(cluster, f"a{round_}") as load:
            time.sleep(SETTLE)
            added = time.monotonic()
            node = cluster.add_node()
            wait_for(lambda: balanced(cluster), timeout=BALANCE_BOUND, what="a balanced cluster")
            took = time.monotonic() - added
            listed = {n["node_id"]: n for n in stats(cluster)["node_stat_list"]}
            assert listed[cluster.node_id(node)]["leaders"] > 0
            time.sleep(SETTLE)
            load.finish("ops_add_node", took)
        # back to three nodes for the next round: drain the new one and stop it
        drain(cluster, cluster.node_id(node))
        node.stop()
        cluster.nodes.remove(node)
        settle(cluster)


@pytest.mark.slow
def test_rolling_restart_of_every_node(cluster: FaultCluster) -> None:
    for round_ in range(rounds()):
        with ops_round(cluster, f"rr{round_}") as load:
            time.sleep(SETTLE)
            began = time.monotonic()
            upgrade(cluster, "begin")  # no replacement, no balancing while nodes restart
            for node in cluster.nodes:
                cluster.unreachable.add(id(node))
                assert node.stop() == 0  # SIGTERM: its leaderships handed over first
                restart(cluster, node)
                settle(cluster)  # back in every ISR before the next one goes
            restarted = time.monotonic() - began
            upgrade(cluster, "done")
            wait_for(lambda: balanced(cluster), timeout=BALANCE_BOUND, what="leaderships back")
            took = time.monotonic() - began
            time.sleep(SETTLE)
            load.finish("ops_rolling_restart", took, restarts_s=round(restarted, 3))
