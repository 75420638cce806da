"""Automatic balancing (youzan's, Kafka's Cruise Control's job): the moves that even out the
copies and the leaderships the nodes hold. Pure: no I/O, no clock, no Trio.

Load is counted, not measured: a node's *copies* are the partitions it leads or replicates, its
*leaderships* those it leads (every partition weighs the same; a hot topic is not told from a
quiet one). The cluster is balanced when, over the nodes that may hold copies (alive, not being
drained), the most and the least loaded differ by at most one, in copies and in leaderships:
so each is within one of the mean. Where racks (:mod:`.racks`) forbid that, balancing stops at
the best spread the racks allow.

:func:`plan_balance` starts moves only on a *settled* cluster: no move in progress, no partition
offline, every partition with the copies its topic asks for, all of them on alive nodes and in
the in-sync set (ISR), nothing on a node being drained. So it never runs while a partition is
offline or under-replicated, and what it moves is always fully replicated. Each call starts at
most one move per node (as source or target); the next call waits for them all to end (the
cluster is not settled while one runs). The moves, in this order:

1. *Copies.* From the node holding the most copies to the one holding the fewest, while they
   differ by two or more: a replica (not a leadership) of a partition the receiver holds no copy
   of, never onto a rack that already holds another copy of it unless the giver's rack did too
   (the spread across racks never gets worse). Only when the giver has no such replica does a
   leadership move with its copy (a leader move: the receiver catches up, then leads).
2. *Leaderships.* From the node leading the most partitions to one leading two or more fewer:
   leadership transfers (the copies stay where they are), each to an in-sync replica. When no
   partition of the first has an in-sync replica on the second, a chain of transfers through
   other nodes (A hands one to B, B one to C: B leads as many as before); the chain's nodes
   are the exception to one move per node, as a transfer copies nothing.

Each copy move and each chain lowers the sum of squared loads, so balancing ends; it never
undoes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .moves import Move
from .racks import rack_of
from .view import Counts, PartitionView


@dataclass(frozen=True, slots=True)
class Spread:
    """Copies and leaderships per node that may hold copies (zero counts included)."""

    copies: dict[str, int]
    leaders: dict[str, int]

    @classmethod
    def of(cls, counts: Counts, nodes: Iterable[str]) -> Spread:
        """``counts`` (of some partitions) for ``nodes`` only, zeros included."""
        ordered = sorted(nodes)
        copies, leaders = counts.copies, counts.leaders
        return cls({n: copies.get(n, 0) for n in ordered}, {n: leaders.get(n, 0) for n in ordered})

    @property
    def even(self) -> bool:
        """The most and the least loaded differ by at most one, in copies and leaderships."""
        return _gap(self.copies) <= 1 and _gap(self.leaders) <= 1


def _gap(counts: Mapping[str, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def spread(partitions: Iterable[PartitionView], nodes: Iterable[str]) -> Spread:
    """What each of ``nodes`` holds of ``partitions`` (copies on other nodes are not counted)."""
    return Spread.of(Counts.of(partitions), nodes)


def settled(partitions: Iterable[PartitionView], usable: Callable[[str], bool]) -> bool:
    """Nothing moving, offline, under-replicated or out of sync, and every copy on a node
    ``usable`` (alive, not being drained): the only state balancing starts moves in."""
    for part in partitions:
        holders = (part.leader, *part.replicas)
        if part.offline or part.move is not None or set(part.isr) != set(holders):
            return False
        if part.wanted is not None and len(holders) != part.wanted:
            return False
        if not all(usable(node) for node in holders):
            return False
    return True


def plan_balance(
    partitions: Sequence[PartitionView],
    nodes: Iterable[str],
    racks: Mapping[str, str],
    load: Spread | None = None,
) -> dict[tuple[str, int], Move]:
    """The balancing moves to start now, by partition (see the module doc); ``nodes``: those
    that may hold copies; ``load``: their :func:`spread` if the caller has it (it is changed).
    The caller checks :func:`settled` first."""
    load = load if load is not None else spread(partitions, nodes)
    if len(load.copies) < 2 or load.even:  # (every tick of a balanced cluster ends here)
        return {}
    busy: set[str] = set()
    moves: dict[tuple[str, int], Move] = {}
    while (found := _copy_move(partitions, load, racks, busy, moves)) is not None:
        key, move = found
        moves[key] = move
        busy |= {move.source, move.target}
        load.copies[move.source] -= 1
        load.copies[move.target] += 1
        if move.leader:
            load.leaders[move.source] -= 1
            load.leaders[move.target] += 1
    while chain := _leader_moves(partitions, load, busy, moves):
        for key, move in chain:
            moves[key] = move
            busy |= {move.source, move.target}
        load.leaders[chain[0][1].source] -= 1
        load.leaders[chain[-1][1].target] += 1
    return moves


def _by_load(counts: Mapping[str, int], busy: set[str], *, most: bool) -> list[str]:
    free = [n for n in counts if n not in busy]
    return sorted(free, key=lambda n: (-counts[n] if most else counts[n], n))


def _copy_move(
    partitions: Sequence[PartitionView],
    load: Spread,
    racks: Mapping[str, str],
    busy: set[str],
    taken: Mapping[tuple[str, int], Move],
) -> tuple[tuple[str, int], Move] | None:
    """Step 1: the next copy to move, or None."""
    counts = load.copies
    for source in _by_load(counts, busy, most=True):
        for target in _by_load(counts, busy | {source}, most=False):
            if counts[source] - counts[target] < 2:
                break
            candidates: list[tuple[bool, PartitionView]] = []
            for part in partitions:
                holders = (part.leader, *part.replicas)
                key = (part.topic, part.partition)
                if key in taken or source not in holders or target in holders:
                    continue
                others = {rack_of(n, racks) for n in holders if n != source}
                if rack_of(target, racks) in others and rack_of(source, racks) not in others:
                    continue  # the copies would share a rack they do not share now
                candidates.append((part.leader == source, part))
            if not candidates:
                continue
            leads, part = min(candidates, key=lambda c: c[0])  # a replica before a leadership
            if leads and load.leaders[source] <= load.leaders[target]:
                continue  # moving it would unbalance the leaderships
            move = Move(part.partition, source, target, leader=leads)
            return (part.topic, part.partition), move
    return None


def _leader_moves(
    partitions: Sequence[PartitionView],
    load: Spread,
    busy: set[str],
    taken: Mapping[tuple[str, int], Move],
) -> list[tuple[tuple[str, int], Move]]:
    """Step 2: the next leaderships to hand over, or none: the shortest chain of transfers
    from the node leading the most to one leading two or fewer less (each hop hands a
    partition to one of its in-sync replicas, so every node on the way leads as many as before
    but the two ends)."""
    counts = load.leaders
    edges: dict[str, list[tuple[str, PartitionView]]] = {}
    for part in partitions:
        if (part.topic, part.partition) in taken or part.leader in busy:
            continue
        for node in part.isr:
            if node != part.leader and node in counts and node not in busy:
                edges.setdefault(part.leader, []).append((node, part))
    for source in _by_load(counts, busy, most=True):
        # breadth first: the shortest chain, then the least loaded end, then node ids
        paths: dict[str, list[tuple[str, PartitionView]]] = {source: []}
        frontier = [source]
        while frontier:
            ends = [n for n in frontier if counts[source] - counts[n] >= 2]
            if ends:
                end = min(ends, key=lambda n: (counts[n], n))
                return [
                    (
                        (part.topic, part.partition),
                        Move(part.partition, part.leader, node, leader=True, keep_source=True),
                    )
                    for node, part in paths[end]
                ]
            following = []
            for node in frontier:
                for nxt, part in sorted(
                    edges.get(node, ()), key=lambda e: (e[0], e[1].topic, e[1].partition)
                ):
                    if nxt not in paths:
                        paths[nxt] = [*paths[node], (nxt, part)]
                        following.append(nxt)
            frontier = following
    return []
