"""Partition moves (lookupd.core.moves), carried out step by step by decide() on a virtual
clock, with the leader's reports played by the test; and a move kept across a lookupd
restart (lookupd.state)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lookupd.core.decide import Change, NodeView, PartitionView, Settings, View, apply, decide
from lookupd.core.moves import Move, MoveError, check_move, from_documents, to_documents
from lookupd.core.placement import TopicMeta, TopicPlacement, from_document, to_document
from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.state.supervisor import Supervisor, view_of
from protocol.lookup import PartitionAssignment

NOW = 1000.0


def alive(*, leaving: bool = False) -> NodeView:
    return NodeView(connected=True, last_heartbeat=NOW - 0.5, leaving=leaving)


def dead() -> NodeView:
    return NodeView(connected=False, last_heartbeat=NOW - 1.0, down_since=NOW - 1.0)


def start(move: Move, leader: str = "a", replicas: tuple[str, ...] = ("b",)) -> PartitionView:
    return PartitionView("t", 0, leader, replicas, (leader, *replicas), 3, move=move)


def step(view: View) -> tuple[Change | None, View]:
    """One decision applied; checks that it is a fixed point."""
    changes = decide(view, NOW)
    after = apply(view, changes)
    assert decide(after, NOW) == []
    assert len(changes) <= 1
    return (changes[0] if changes else None), after


def report_caught_up(view: View, *nodes: str) -> View:
    part = view.partitions[0]
    return replace(view, partitions=(replace(part, caught_up=frozenset(nodes)),))


def report_confirmed(view: View, *nodes: str) -> View:
    """The leader applies an in-sync set with ``nodes`` and they hold every acknowledged
    message."""
    part = view.partitions[0]
    return replace(view, partitions=(replace(part, confirmed=frozenset(nodes)),))


def nodes(**overrides: NodeView) -> dict[str, NodeView]:
    return {"a": alive(), "b": alive(), "c": alive(), **overrides}


def test_a_replica_move_adds_the_target_then_drops_the_source() -> None:
    view = View(nodes(), (start(Move(0, "b", "c", leader=False)),))
    change, view = step(view)
    assert change is not None
    assert (change.leader, change.replicas, change.isr, change.epoch) == (
        "a",
        ("b", "c"),
        ("a", "b"),  # c catches up outside the in-sync set
        3,
    )
    assert change.move == Move(0, "b", "c", leader=False)
    assert "c added, catching up" in change.reason
    assert step(view)[0] is None  # nothing until the leader reports c caught up
    change, view = step(report_caught_up(view, "c"))
    assert change is not None
    assert (change.leader, change.replicas, change.isr, change.epoch) == (
        "a",
        ("c",),
        ("a", "c"),
        3,
    )
    assert change.move is None
    assert "isr expand: c in" in change.reason
    assert "b removed" in change.reason


def test_a_leader_move_hands_over_at_a_new_epoch_then_drops_the_source() -> None:
    view = View(nodes(), (start(Move(0, "a", "c", leader=True)),))
    _, view = step(view)
    change, view = step(report_caught_up(view, "c"))
    assert change is not None  # c joins the ISR; a leads until it reports c confirmed
    assert (change.leader, change.isr, change.epoch) == ("a", ("a", "b", "c"), 3)
    assert change.move is not None
    change, view = step(report_confirmed(view, "b"))
    assert change is None  # b is, c not yet: a may have acknowledged what c lacks
    change, view = step(report_confirmed(view, "b", "c"))
    assert change is not None
    assert (change.leader, change.replicas, change.isr, change.epoch) == (
        "c",
        ("b",),
        ("c", "b"),
        4,
    )
    assert change.move is None
    assert "leadership handed over" in change.reason


def test_a_move_to_an_in_sync_replica_is_a_leadership_transfer() -> None:
    move = check_move(
        PartitionAssignment("a", ("b",), 3, ("a", "b")),
        Move(0, "a", "b", leader=True),
        alive=["a", "b"],
        racks={},
    )
    assert move.keep_source
    view = View(nodes(), (start(move),))
    assert decide(view, NOW) == []  # until the leader reports b confirmed
    change, _ = step(report_confirmed(view, "b"))
    assert change is not None
    # the old leader stays, outside the ISR until it has caught up under the new epoch
    assert (change.leader, change.replicas, change.isr, change.epoch) == ("b", ("a",), ("b",), 4)
    assert change.move is None


def test_a_target_that_dies_before_it_leads_is_rolled_back() -> None:
    view = View(nodes(), (start(Move(0, "a", "c", leader=True)),))
    _, view = step(view)
    view = replace(view, nodes=nodes(c=dead()))
    change, view = step(view)
    assert change is not None
    assert (change.leader, change.replicas, change.isr, change.epoch) == (
        "a",
        ("b",),
        ("a", "b"),
        3,
    )
    assert change.move is None
    assert "rolled back" in change.reason


def test_a_leaving_target_is_rolled_back_too() -> None:
    view = View(nodes(c=alive(leaving=True)), (start(Move(0, "b", "c", leader=False)),))
    change, _ = step(view)
    assert change is not None
    assert change.move is None
    assert change.replicas == ("b",)


def test_a_source_leader_that_dies_mid_move_fails_over_and_the_move_finishes() -> None:
    view = View(nodes(), (start(Move(0, "a", "c", leader=True)),))
    _, view = step(view)
    view = replace(view, nodes=nodes(a=dead()))
    change, view = step(view)  # b (in sync) is promoted; c keeps catching up, from b now
    assert change is not None
    assert (change.leader, change.epoch, change.move) == ("b", 4, Move(0, "a", "c", leader=True))
    assert set(change.replicas) == {"a", "c"}
    change, view = step(report_caught_up(view, "c"))
    assert change is not None
    assert (change.leader, change.replicas, change.isr, change.move) == (
        "b",
        ("c",),
        ("b", "c"),
        None,
    )


def test_a_move_waits_while_the_partition_is_offline() -> None:
    part = replace(start(Move(0, "b", "c", leader=False)), offline=True)
    view = View(nodes(a=dead(), b=dead()), (part,))
    assert decide(view, NOW) == []


def test_a_dead_move_source_is_not_re_replicated_behind_the_moves_back() -> None:
    old = NodeView(connected=False, last_heartbeat=NOW - 500, down_since=NOW - 500)
    view = View(
        {**nodes(b=old), "d": alive()},
        (start(Move(0, "b", "c", leader=False)),),
        Settings(replace_after=60.0),
    )
    change, view = step(view)
    assert change is not None
    assert set(change.replicas) == {"b", "c"}
    change, _ = step(report_caught_up(view, "c"))
    assert change is not None
    assert change.replicas == ("c",)
    assert change.move is None


@pytest.mark.parametrize(
    ("move", "error"),
    [
        (Move(0, "a", "a", leader=True), "MOVE_FROM_IS_MOVE_TO"),
        (Move(0, "x", "c", leader=False), "MOVE_FROM_NOT_HOLDING"),
        (Move(0, "b", "zz", leader=False), "MOVE_TO_NOT_FOUND"),
        (Move(0, "b", "c", leader=True), "MOVE_FROM_NOT_LEADER"),
        (Move(0, "a", "c", leader=False), "MOVE_FROM_IS_LEADER"),
        (Move(0, "a", "b", leader=False), "MOVE_FROM_IS_LEADER"),
        (Move(0, "b", "a", leader=False), "MOVE_TO_HOLDS_COPY"),
    ],
)
def test_moves_that_cannot_start(move: Move, error: str) -> None:
    part = PartitionAssignment("a", ("b",), 3, ("a", "b"))
    with pytest.raises(MoveError, match=error):
        check_move(part, move, alive=["a", "b", "c"], racks={})


def test_a_busy_or_offline_partition_takes_no_move() -> None:
    part = PartitionAssignment("a", ("b",), 3, ("a", "b"))
    move = Move(0, "b", "c", leader=False)
    with pytest.raises(MoveError, match="MOVE_IN_PROGRESS"):
        check_move(part, move, alive=["c"], racks={}, busy=True)
    with pytest.raises(MoveError, match="PARTITION_OFFLINE"):
        check_move(part, move, alive=["c"], racks={}, offline=True)


def test_a_move_onto_a_taken_rack_is_refused_while_a_rack_is_free() -> None:
    part = PartitionAssignment("a", ("b",), 3, ("a", "b"))
    racks = {"a": "r1", "b": "r2", "c": "r1", "d": "r3"}
    with pytest.raises(MoveError, match="MOVE_TO_RACK_TAKEN"):
        check_move(part, Move(0, "b", "c", leader=False), alive=list(racks), racks=racks)
    moved = check_move(part, Move(0, "b", "d", leader=False), alive=list(racks), racks=racks)
    assert moved == Move(0, "b", "d", leader=False)
    # with no free rack left, sharing one is allowed
    full = {"a": "r1", "b": "r2", "c": "r1"}
    assert check_move(part, Move(0, "b", "c", leader=False), alive=list(full), racks=full)


def test_moves_are_kept_with_the_placement() -> None:
    move = Move(1, "a", "c", leader=True, keep_source=False)
    parts = (PartitionAssignment("a", ("b",), 2, ("a", "b")),) * 2
    placement = TopicPlacement("t", TopicMeta(2, 2), parts).with_move(1, move)
    assert placement.move(1) == move
    assert placement.move(0) is None
    document = json.loads(json.dumps(to_document(placement)))
    assert document["moves"] == to_documents([move])
    assert from_document("t", document) == placement
    assert placement.with_move(1, None).moves == ()
    assert from_documents("t", None) == ()
    with pytest.raises(ValueError, match="moves is not a list"):
        from_documents("t", {"partition": 1})


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


async def test_a_move_is_saved_at_each_step_and_resumed_after_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    store = MetadataStore(tmp_path)
    part = PartitionAssignment("a:1", ("b:1",), 3, ("a:1", "b:1"))
    move = Move(0, "a:1", "c:1", leader=True)
    store.save([TopicPlacement("t", TopicMeta(1, 2), (part,)).with_move(0, move)])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    for node in ("a:1", "b:1", "c:1"):
        cluster.liveness.connected(node, clock.now)
    (change,) = await Supervisor(cluster, Settings()).step()
    assert change.replicas == ("b:1", "c:1")
    assert change.move == move
    on_disk = MetadataStore(tmp_path).load().placements["t"]
    assert on_disk.partitions[0].replicas == ("b:1", "c:1")
    assert on_disk.move(0) == move
    # lookupd restarts: the move is read back, and its target is given the start grace
    again = Cluster(MetadataStore(tmp_path), Timeouts(), clock=clock)
    again.load()
    assert view_of(again, Settings(), clock.now).partitions[0].move == move
    assert again.liveness.is_alive("c:1", clock.now)
    for node in ("a:1", "b:1", "c:1"):
        again.liveness.connected(node, clock.now)
    report = {"topic": "t", "partition": 0, "epoch": 3, "caught_up": ["c:1"]}
    again.report_progress("a:1", [report])
    (change,) = await Supervisor(again, Settings()).step()
    assert (change.leader, change.isr, change.move) == ("a:1", ("a:1", "b:1", "c:1"), move)
    again.report_progress("a:1", [{**report, "confirmed": ["b:1", "c:1"]}])
    (change,) = await Supervisor(again, Settings()).step()
    assert (change.leader, change.epoch, change.replicas, change.move) == ("c:1", 4, ("b:1",), None)
    assert MetadataStore(tmp_path).load().placements["t"].moves == ()
