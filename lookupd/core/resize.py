"""A partition's number of copies and the nodes it may keep them on: the topic's ``replicator``
(youzan's ``/topic/meta/update?replicator=N``) and the nodes being drained (youzan's
``/cluster/node/remove``). Pure: no I/O, no clock, no Trio.

:func:`plan` says what one partition without a move in progress should do next, one step at a
time; :func:`lookupd.core.decide.decide` carries it out with the moves of :mod:`.moves`, so a
lookupd restart resumes it like any move:

1. More copies than ``replicator``: a replica is dropped at once (never the leader, never
   below one copy; while the leader is being drained, only a drained one), the one on a node
   being drained first, then one outside the in-sync set
   (ISR), one that is down, one sharing its rack with another copy, the most loaded.
2. A copy on a node being drained: a move from it. A leader first hands its leadership to an
   alive in-sync replica (a leadership transfer) and is then moved as a replica; with no such
   replica its copy moves with the leadership to a new node. One move per drained node at a
   time (``busy``).
3. Fewer copies than ``replicator``: a move that *grows* the partition (:attr:`Move.grows`):
   the new copy joins the replicas, catches up and joins the ISR; nothing leaves.

New copies go to a live node holding none, not being drained, on a rack holding no copy yet
while there is one, then the least loaded (leader and replica assignments; ties: node id).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from .moves import Move
from .racks import pick_spread, rack_of


@dataclass(frozen=True, slots=True)
class Step:
    """What one partition does next: start ``move``, or drop the replica ``drop`` now."""

    reason: str
    move: Move | None = None
    drop: str | None = None


def plan(
    partition: int,
    leader: str,
    replicas: Sequence[str],
    isr: Collection[str],
    *,
    wanted: int | None,
    removing: Collection[str],
    busy: Collection[str],
    alive: Callable[[str], bool],
    spares: Sequence[str],
    load: Mapping[str, int],
    racks: Mapping[str, str],
) -> Step | None:
    """The next step of ``partition`` (led by ``leader``, no move in progress), or None.
    ``wanted``: the copies its topic asks for (None: as many as it has); ``busy``: drained
    nodes already giving a copy away; ``spares``: the nodes that may take a copy."""
    holders = (leader, *replicas)
    # while the leader is drained, only drained copies are dropped: a copy kept may be the
    # one it hands its leadership (or its copy) to
    droppable = [r for r in replicas if r in removing or leader not in removing]
    if wanted is not None and len(holders) > max(wanted, 1) and droppable:
        return _shrink(droppable, isr, holders, wanted, removing, alive, load, racks)
    for node in holders:
        if node not in removing or node in busy:
            continue
        if node == leader:
            heir = next((r for r in replicas if r in isr and alive(r) and r not in removing), None)
            if heir is not None:
                move = Move(partition, leader, heir, leader=True, keep_source=True)
                return Step(f"drain {leader}: leadership to {heir}", move)
        others = [n for n in holders if n != node]
        target = _pick(spares, holders, others, load, racks)
        if target is not None:
            move = Move(partition, node, target, leader=node == leader)
            return Step(f"drain {node}: its copy to {target}", move)
    if wanted is not None and len(holders) < wanted:
        target = _pick(spares, holders, holders, load, racks)
        if target is not None:
            move = Move(partition, leader, target, leader=False, keep_source=True)
            return Step(f"replicator {wanted}: new copy on {target}", move)
    return None


def _shrink(
    replicas: Sequence[str],
    isr: Collection[str],
    holders: Sequence[str],
    wanted: int,
    removing: Collection[str],
    alive: Callable[[str], bool],
    load: Mapping[str, int],
    racks: Mapping[str, str],
) -> Step:
    """Step 1: the replica to drop."""

    def shares_rack(node: str) -> bool:
        return any(rack_of(n, racks) == rack_of(node, racks) for n in holders if n != node)

    drop = min(
        replicas,
        key=lambda r: (
            r not in removing,
            r in isr,
            alive(r),
            not shares_rack(r),
            -load.get(r, 0),
            r,
        ),
    )
    return Step(f"replicator {wanted}: {drop} dropped", drop=drop)


def _pick(
    spares: Sequence[str],
    holders: Sequence[str],
    staying: Sequence[str],
    load: Mapping[str, int],
    racks: Mapping[str, str],
) -> str | None:
    """A node for a new copy: none of ``holders``, on a rack none of ``staying`` is on while
    there is one, then the least loaded."""
    free = [n for n in spares if n not in holders]
    found = pick_spread(free, staying, racks, 1, lambda n: (load.get(n, 0), n))
    return found[0] if found else None
