"""Replication-factor changes and drains (lookupd.core.resize), carried out by decide() through
moves on a virtual clock, with the leader's reports played by the test; the drain mark kept
across a lookupd restart, and the stats the cluster endpoints report (lookupd.core.stats)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lookupd.core.decide import Change, NodeView, PartitionView, Settings, View, apply, decide
from lookupd.core.moves import Move
from lookupd.core.placement import PlacementError, TopicMeta, TopicPlacement, adopt
from lookupd.core.stats import NodeCopies, copies, is_stable
from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.state.supervisor import view_of
from protocol.lookup import PartitionAssignment

NOW = 1000.0


def alive() -> NodeView:
    return NodeView(connected=True, last_heartbeat=NOW - 0.5)


def dead() -> NodeView:
    return NodeView(connected=False, last_heartbeat=NOW - 1.0, down_since=NOW - 1.0)


def nodes(*names: str, **overrides: NodeView) -> dict[str, NodeView]:
    return {**{n: alive() for n in names}, **overrides}


def part(
    leader: str = "a",
    replicas: tuple[str, ...] = ("b",),
    isr: tuple[str, ...] | None = None,
    *,
    wanted: int | None = None,
    partition: int = 0,
) -> PartitionView:
    in_sync = (leader, *replicas) if isr is None else isr
    return PartitionView("t", partition, leader, replicas, in_sync, 3, wanted=wanted)


def step(view: View) -> tuple[list[Change], View]:
    """One decision applied; checks that it is a fixed point."""
    changes = decide(view, NOW)
    after = apply(view, changes)
    assert decide(after, NOW) == []
    return changes, after


def report(view: View, index: int = 0, **sets: frozenset[str]) -> View:
    parts = list(view.partitions)
    parts[index] = replace(parts[index], **sets)  # type: ignore[arg-type]
    return replace(view, partitions=tuple(parts))


def test_replicator_up_adds_a_copy_on_a_free_rack_through_a_move() -> None:
    racks = {"a": "r1", "b": "r2", "c": "r1", "d": "r3"}
    view = View(nodes("a", "b", "c", "d"), (part(wanted=3),), racks=racks)
    (change,), view = step(view)
    assert change.move == Move(0, "a", "d", leader=False, keep_source=True)
    assert change.move.grows
    assert (change.replicas, change.isr) == (("b", "d"), ("a", "b"))  # outside the ISR
    assert "replicator 3: new copy on d" in change.reason
    assert step(view)[0] == []  # catching up
    (change,), view = step(report(view, caught_up=frozenset({"d"})))
    # in sync: the move is over; nothing left, the leader and the epoch stay
    assert (change.leader, change.isr, change.epoch, change.move) == ("a", ("a", "b", "d"), 3, None)


def test_replicator_up_waits_for_a_node_to_take_the_copy() -> None:
    assert decide(View(nodes("a", "b"), (part(wanted=3),)), NOW) == []


def test_a_grow_move_whose_target_dies_is_rolled_back_and_retried_elsewhere() -> None:
    view = View(nodes("a", "b", "c", "d"), (part(wanted=3),))
    (change,), view = step(view)
    assert change.replicas == ("b", "c")
    view = replace(view, nodes=nodes("a", "b", "d", c=dead()))
    (change,), view = step(view)
    assert change.replicas == ("b", "d")
    assert change.move == Move(0, "a", "d", leader=False, keep_source=True)
    assert "rolled back" in change.reason


def test_replicator_down_drops_a_replica_out_of_sync_first_never_the_leader() -> None:
    view = View(nodes("a", "b", "c"), (part("a", ("b", "c"), ("a", "c"), wanted=2),))
    (change,), _ = step(view)
    assert (change.leader, change.replicas, change.isr, change.epoch) == (
        "a",
        ("c",),
        ("a", "c"),
        3,
    )
    assert "replicator 2: b dropped" in change.reason
    racks = {"a": "r1", "b": "r2", "c": "r1"}  # all in sync: the one sharing a's rack goes
    view = View(nodes("a", "b", "c"), (part("a", ("b", "c"), wanted=2),), racks=racks)
    assert step(view)[0][0].replicas == ("b",)
    (change,), _ = step(View(nodes("a", "b", "c"), (part("a", ("b", "c"), wanted=1),)))
    assert (change.leader, change.replicas, change.isr) == ("a", (), ("a",))


def test_draining_a_leader_hands_leadership_to_an_in_sync_replica_then_moves_its_copy() -> None:
    view = View(nodes("a", "b", "c"), (part(wanted=2),), removing=frozenset({"a"}))
    (change,), view = step(view)
    assert change.move == Move(0, "a", "b", leader=True, keep_source=True)
    assert (change.leader, change.epoch) == ("a", 3)  # until b holds every acknowledgement
    (change,), view = step(report(view, confirmed=frozenset({"b"})))
    # handed over at epoch + 1, and in the same decision a's copy (a replica now) starts moving
    assert (change.leader, change.epoch) == ("b", 4)
    assert change.move == Move(0, "a", "c", leader=False)
    assert change.replicas == ("a", "c")
    (change,), view = step(report(view, caught_up=frozenset({"c"})))
    assert (change.leader, change.replicas, change.isr, change.move) == (
        "b",
        ("c",),
        ("b", "c"),
        None,
    )
    assert step(view)[0] == []  # drained


def test_draining_the_only_copy_moves_it_with_its_leadership() -> None:
    view = View(nodes("a", "b"), (part("a", (), wanted=1),), removing=frozenset({"a"}))
    (change,), view = step(view)
    assert change.move == Move(0, "a", "b", leader=True)
    (change,), view = step(report(view, caught_up=frozenset({"b"})))
    (change,), view = step(report(view, confirmed=frozenset({"b"})))
    assert (change.leader, change.replicas, change.epoch, change.move) == ("b", (), 4, None)


def test_a_drained_node_gives_one_copy_away_at_a_time() -> None:
    parts = (part("a", ("d",), partition=0), part("b", ("d",), partition=1))
    view = View(nodes("a", "b", "c", "d"), parts, removing=frozenset({"d"}))
    (change,), view = step(view)
    assert (change.partition, change.move) == (0, Move(0, "d", "c", leader=False))
    assert view.partitions[1].move is None
    (first, second), view = step(report(view, 0, caught_up=frozenset({"c"})))
    assert (first.partition, first.replicas, first.move) == (0, ("c",), None)
    # the next one, to the least loaded node holding no copy of it (a and c hold one each)
    assert (second.partition, second.move) == (1, Move(1, "d", "a", leader=False))


def test_a_drained_node_with_nowhere_to_go_keeps_its_copy_and_takes_no_new_one() -> None:
    view = View(nodes("a", "b", "c"), (part("a", ("b", "c"), wanted=3),), removing=frozenset("c"))
    assert decide(view, NOW) == []
    # a replacement for a dead replica avoids it too
    down = NodeView(connected=False, last_heartbeat=0.0, down_since=0.0)
    view = View(nodes("a", "c", b=down), (part(isr=("a",), wanted=2),), removing=frozenset("c"))
    assert decide(view, NOW) == []
    view = replace(view, removing=frozenset())
    assert decide(view, NOW)[0].replicas == ("c",)  # (without the drain: c replaces b)


def test_a_move_to_a_node_being_drained_is_rolled_back() -> None:
    moving = replace(part(), move=Move(0, "b", "c", leader=False))
    view = View(nodes("a", "b", "c", "d"), (moving,), removing=frozenset("c"))
    (change,), _ = step(view)
    assert "rolled back" in change.reason
    assert change.move is None or change.move.target != "c"


def test_stats_count_copies_and_stability() -> None:
    meta = TopicMeta(2, 2)
    parts = (
        PartitionAssignment("a", ("b",), 1, ("a", "b")),
        PartitionAssignment("b", ("c",), 1, ("b", "c")),
    )
    placement = TopicPlacement("t", meta, parts)
    assert copies([placement]) == {
        "a": NodeCopies(1, 0),
        "b": NodeCopies(1, 1),
        "c": NodeCopies(0, 1),
    }
    assert is_stable([placement], set(), set())
    assert not is_stable([placement], {("t", 1)}, set())
    assert not is_stable([placement], set(), {"c"})
    assert is_stable([placement], set(), {"d"})
    grown = replace(placement, meta=TopicMeta(2, 3))
    assert not is_stable([grown], set(), set())
    moving = placement.with_move(0, Move(0, "a", "d", leader=False, keep_source=True))
    assert copies([moving])["d"] == NodeCopies(0, 0, 1)
    assert not copies([moving])["d"].empty
    assert not is_stable([moving], set(), set())


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


async def test_a_drain_and_a_replicator_change_are_saved_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    clock = Clock()
    store = MetadataStore(tmp_path)
    placed = PartitionAssignment("a:1", ("b:1",), 3, ("a:1", "b:1"))
    store.save([TopicPlacement("t", TopicMeta(1, 2), (placed,))])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    await cluster.remove_node("b:1")
    await cluster.update_meta("t", replica=1)
    again = Cluster(MetadataStore(tmp_path), Timeouts(), clock=clock)
    again.load()
    assert again.removing == {"b:1": NOW}
    assert again.placements["t"].meta.replica == 1
    view = view_of(again, Settings(), NOW)
    assert view.removing == frozenset({"b:1"})
    assert view.partitions[0].wanted == 1
    await again.remove_node("b:1", restore=True)
    assert MetadataStore(tmp_path).load().removing == {}


async def test_more_copies_than_live_nodes_are_refused_and_an_unknown_node_is_not_drained(
    tmp_path: Path,
) -> None:
    store = MetadataStore(tmp_path)
    placed = PartitionAssignment("a:1", ("b:1",), 3, ("a:1", "b:1"))
    store.save([TopicPlacement("t", TopicMeta(1, 2), (placed,))])
    cluster = Cluster(store, Timeouts(), clock=Clock())
    cluster.load()  # no node registered: none can take a third copy
    with pytest.raises(PlacementError, match="NOT_ENOUGH_NODES"):
        await cluster.update_meta("t", replica=3)
    await cluster.update_meta("t", replica=2)  # as it is: fine
    with pytest.raises(PlacementError, match="REMOVE_NODE_NOT_FOUND"):
        await cluster.remove_node("z:1")
    await cluster.remove_node("a:1")  # placed, though not connected now
    assert MetadataStore(tmp_path).load().removing == {"a:1": NOW}


def test_a_topic_adopted_from_a_node_follows_its_replicator_too(tmp_path: Path) -> None:
    cluster = Cluster(MetadataStore(None), Timeouts(), clock=Clock())
    adopted = adopt("t", "a:1", [0, 1])
    cluster.placements["t"] = replace(adopted, meta=replace(adopted.meta, replica=2))
    assert [p.wanted for p in view_of(cluster, Settings(), NOW).partitions] == [2, 2]
