"""Automatic balancing (lookupd/core/balance.py) through decide(): a node joining, racks, and
when balancing must not start (not settled, switched off, an upgrade)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from lookupd.core.balance import plan_balance, settled, spread
from lookupd.core.decide import NodeView, PartitionView, Settings, View, apply, decide
from lookupd.core.moves import Move
from lookupd.core.placement import TopicMeta, TopicPlacement
from lookupd.core.switches import Switches
from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.state.supervisor import view_of
from protocol.lookup import PartitionAssignment

UP = NodeView(connected=True, last_heartbeat=0.0)


def cluster(nodes: int, partitions: int, copies: int = 2) -> list[PartitionView]:
    """``partitions`` partitions of topic t, ``copies`` copies each, spread round-robin."""
    names = [f"n{i}" for i in range(nodes)]
    parts = []
    for number in range(partitions):
        holders = [names[(number + k) % nodes] for k in range(copies)]
        parts.append(
            PartitionView(
                "t", number, holders[0], tuple(holders[1:]), tuple(holders), 1, wanted=copies
            )
        )
    return parts


def progress(view: View) -> View:
    """The leaders' reports: every replica out of the ISR catches up (a move's target, an old
    leader after a transfer), a move's target in the ISR is confirmed."""
    parts = []
    for part in view.partitions:
        behind = {n for n in part.replicas if n not in part.isr}
        part = replace(part, caught_up=part.caught_up | behind)
        move = part.move
        if move is not None and move.target in part.isr:
            part = replace(part, confirmed=part.confirmed | {move.target})
        parts.append(part)
    return replace(view, partitions=tuple(parts))


def run(view: View, rounds: int = 200) -> tuple[View, list[list[Move]]]:
    """decide → apply → the leaders report, until nothing changes; the moves each decision
    started."""
    started: list[list[Move]] = []
    for _ in range(rounds):
        changes = decide(view, 0.0)
        if not changes:
            return view, started
        before = {(p.topic, p.partition): p.move for p in view.partitions}
        fresh = [
            c.move for c in changes if c.move is not None and before[(c.topic, c.partition)] is None
        ]
        if fresh:
            started.append(fresh)
        view = apply(view, changes)
        assert decide(view, 0.0) == []  # one decision takes every step it can
        view = progress(view)
    raise AssertionError("balancing did not end")


def counts(view: View) -> tuple[Counter[str], Counter[str]]:
    copies: Counter[str] = Counter()
    leaders: Counter[str] = Counter(p.leader for p in view.partitions)
    for part in view.partitions:
        copies.update((part.leader, *part.replicas))
    return copies, leaders


def test_a_fourth_node_gets_its_share_of_copies_and_leaderships() -> None:
    nodes = {f"n{i}": UP for i in range(4)}
    start = View(nodes, tuple(cluster(3, 12)), balance=True)  # n3 just joined: holds nothing
    end, started = run(start)
    copies, leaders = counts(end)
    assert copies == {"n0": 6, "n1": 6, "n2": 6, "n3": 6}
    assert leaders == {"n0": 3, "n1": 3, "n2": 3, "n3": 3}
    for moves in started:  # one move per node at a time
        involved = [n for m in moves for n in (m.source, m.target)]
        assert len(involved) == len(set(involved))
    for part in end.partitions:  # every partition still has its two copies, in sync
        assert len({part.leader, *part.replicas}) == 2
        assert set(part.isr) == {part.leader, *part.replicas}
        assert part.move is None
    assert spread(end.partitions, nodes).even
    # 6 copies and 3 leaderships came to n3, each by its own move: no move was wasted
    assert sum(len(m) for m in started) == 9


def test_a_balanced_cluster_starts_nothing() -> None:
    view = View({f"n{i}": UP for i in range(3)}, tuple(cluster(3, 12)), balance=True)
    assert decide(view, 0.0) == []


def test_switched_off_or_upgrading_starts_nothing() -> None:
    nodes = {f"n{i}": UP for i in range(4)}
    parts = tuple(cluster(3, 12))
    assert decide(View(nodes, parts), 0.0) == []
    assert decide(View(nodes, parts, balance=True, upgrading=True), 0.0) == []
    assert decide(View(nodes, parts, balance=True), 0.0) != []


def test_nothing_starts_while_a_partition_is_under_replicated_offline_or_moving() -> None:
    nodes = {f"n{i}": UP for i in range(4)}
    parts = cluster(3, 12)
    lagging = replace(parts[0], isr=(parts[0].leader,))  # a replica out of sync
    assert not settled([lagging, *parts[1:]], lambda n: n in nodes)
    view = View(nodes, (lagging, *parts[1:]), balance=True)
    assert all("balance" not in c.reason for c in decide(view, 0.0))
    offline = replace(parts[1], offline=True)
    assert not settled([offline, *parts[2:]], lambda n: n in nodes)
    short = replace(parts[2], wanted=3)  # its topic asks for a third copy
    assert not settled([short], lambda n: n in nodes)
    moving = replace(parts[3], move=Move(3, parts[3].replicas[0], "n3", leader=False))
    view = View(nodes, (moving, *parts[4:]), balance=True)
    assert all("balance" not in c.reason for c in decide(view, 0.0))


def test_a_down_node_stops_balancing_and_is_never_a_target() -> None:
    nodes = {f"n{i}": UP for i in range(4)}
    nodes["n1"] = NodeView(connected=False, last_heartbeat=0.0, down_since=0.0)
    view = View(nodes, tuple(cluster(3, 12)), balance=True)
    changes = decide(view, 10.0)
    assert all("balance" not in c.reason for c in changes)


def test_a_drained_node_is_neither_a_source_of_balance_nor_a_target() -> None:
    nodes = {f"n{i}": UP for i in range(4)}
    view = View(nodes, tuple(cluster(3, 12)), balance=True, removing=frozenset({"n3"}))
    assert decide(view, 0.0) == []  # n3 holds nothing and takes nothing: the rest is even


def test_balance_never_puts_two_copies_on_one_rack_that_were_apart() -> None:
    nodes = {f"n{i}": UP for i in range(4)}
    # n3 joins on n0's rack: a partition held by n0 cannot get its other copy on n3
    racks = {"n0": "a", "n1": "b", "n2": "c", "n3": "a"}
    view = View(nodes, tuple(cluster(3, 12)), racks=racks, balance=True)
    end, _ = run(view)
    for part in end.partitions:
        held = [racks[n] for n in (part.leader, *part.replicas)]
        assert len(set(held)) == len(held)
    copies, leaders = counts(end)
    assert max(copies.values()) - min(copies.values()) <= 1
    assert max(leaders.values()) - min(leaders.values()) <= 1


def test_leaderships_alone_are_evened_by_transfers() -> None:
    nodes = {f"n{i}": UP for i in range(3)}
    # three copies of each on three nodes (the copies are even), and n0 leads all six
    parts = [PartitionView("t", i, "n0", ("n1", "n2"), ("n0", "n1", "n2"), 1) for i in range(6)]
    view = View(nodes, tuple(parts), balance=True)
    moves = plan_balance(view.partitions, nodes, {})
    assert moves
    assert all(m.keep_source and m.leader for m in moves.values())
    end, _ = run(view)
    _, leaders = counts(end)
    assert max(leaders.values()) - min(leaders.values()) <= 1


def test_an_upgrade_keeps_a_down_nodes_replicas_where_they_are() -> None:
    nodes = {f"n{i}": NodeView(connected=True, last_heartbeat=100.0) for i in range(4)}
    nodes["n1"] = NodeView(connected=False, last_heartbeat=0.0, down_since=0.0)
    settings = Settings(replace_after=5.0)
    parts = tuple(cluster(3, 12))
    replaced = decide(View(nodes, parts, settings), 100.0)
    assert any("re-replicate" in c.reason for c in replaced)
    upgrading = decide(View(nodes, parts, settings, upgrading=True), 100.0)
    assert all("re-replicate" not in c.reason for c in upgrading)
    after = apply(View(nodes, parts, settings, upgrading=True), upgrading)
    held = [p.partition for p in parts if "n1" in (p.leader, *p.replicas)]
    assert held == [p.partition for p in after.partitions if "n1" in (p.leader, *p.replicas)]


async def test_the_switches_are_saved_and_survive_a_restart(tmp_path: Path) -> None:
    def clock() -> float:
        return 1000.0

    store = MetadataStore(tmp_path)
    placed = PartitionAssignment("a:1", ("b:1",), 3, ("a:1", "b:1"))
    store.save([TopicPlacement("t", TopicMeta(1, 2), (placed,))])
    cluster = Cluster(store, Timeouts(), clock=clock)
    cluster.load()
    assert view_of(cluster, Settings(), 1000.0).balance  # --auto-balance's default
    assert not view_of(cluster, Settings(auto_balance=False), 1000.0).balance
    await cluster.set_switches(balance=False)
    await cluster.set_switches(upgrading=True)
    again = Cluster(MetadataStore(tmp_path), Timeouts(), clock=clock)
    again.load()
    assert again.switches == Switches(balance=False, upgrading_since=1000.0)
    view = view_of(again, Settings(), 1000.0)
    assert not view.balance
    assert view.upgrading
    await again.set_switches(balance=True, upgrading=False)
    saved = MetadataStore(tmp_path).load()
    assert saved.switches == Switches(balance=True)
    assert saved.placements == store.load().placements
    assert Switches(balance=True, upgrading_since=5.0).balancing(True) is False  # never then


def test_a_switch_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="balance"):
        Switches.from_values({"balance": "maybe"})
    assert Switches.from_values({"newer": "x"}) == Switches()


def test_a_node_up_for_less_than_the_grace_is_neither_balanced_to_nor_lets_balancing_start() -> (
    None
):
    """n1 came up at 100 (back after a failover from it, or new): at 104.9 balancing hands it
    no leadership, and a node that just joined gets no copy; from 105 on, both do."""
    settings = Settings(balance_grace=5.0)
    parts = [PartitionView("t", i, "n0", ("n1", "n2"), ("n0", "n1", "n2"), 1) for i in range(6)]

    def at(now: float, up_since: dict[str, float]) -> View:
        nodes = {
            n: NodeView(True, now, up_since=up_since.get(n, float("-inf")))
            for n in ("n0", "n1", "n2")
        }
        return View(nodes, tuple(parts), settings, balance=True)

    back = {"n1": 100.0}
    assert decide(at(104.9, back), 104.9) == []
    moves = [c.move for c in decide(at(105.0, back), 105.0) if c.move is not None]
    assert any(m.target == "n1" for m in moves)

    def joined(now: float) -> View:  # n3 came up at 0 and holds nothing yet
        nodes = {f"n{i}": NodeView(True, now, up_since=0.0 if i == 3 else -1e9) for i in range(4)}
        return View(nodes, tuple(cluster(3, 12)), settings, balance=True)

    assert decide(joined(4.0), 4.0) == []
    assert any(c.move and c.move.target == "n3" for c in decide(joined(5.0), 5.0))
