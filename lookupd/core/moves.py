"""Partition moves (youzan's ``/topic/partition/move``): what one is, when one may start, and
how it is kept. Pure: no I/O, no clock, no Trio.

A move takes one copy of a partition off ``source`` and puts it on ``target``. It is a state
kept with the topic's placement (so a lookupd restart, or another lookupd taking over, resumes
it) and carried out by :func:`lookupd.core.decide.decide`, one persisted step at a time:

1. ``target`` joins the assigned replicas, outside the in-sync set (ISR); the leader streams
   the log to it (at ``--replica-move-rate``), then the channels' state and the topic's
   administrative state, and reports it caught up;
2. lookupd adds it to the ISR (the ordinary ISR upkeep);
3. if ``source`` leads, leadership is handed to ``target`` at ``epoch + 1``: ``target`` is in
   sync, so it holds every acknowledged message, and the new epoch fences ``source`` off;
4. ``source`` leaves the replicas (and the ISR): the move is over.

A move to a node that already holds a copy is a leadership transfer (``keep_source``): step 1
and 4 do nothing, ``source`` stays as a replica. A move that *grows* the partition
(``keep_source`` without ``leader``: a ``replicator`` raised, :mod:`.resize`) does steps 1 and 2
only. A move whose ``target`` goes down (or starts leaving, or is being drained) before it
leads is rolled back: ``target`` leaves the replicas (unless it held a copy before) and nothing
else changed. A ``source`` that dies meanwhile is failed over as usual and the move goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from protocol.lookup import PartitionAssignment

from .racks import rack_of


class MoveError(ValueError):
    """A move cannot start; ``str()`` is the HTTP message (youzan-style upper-case code)."""


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's move in progress."""

    partition: int
    source: str  # move_from: the node giving its copy up
    target: str  # move_to: the node taking it
    leader: bool  # move_leader: ``source`` led when the move was asked for
    keep_source: bool = False  # ``target`` already held a copy: a leadership transfer only

    @property
    def grows(self) -> bool:
        """A copy added (``replicator`` raised): ``source`` (the leader when it started)
        keeps its copy and its leadership; the move ends once ``target`` is in sync."""
        return self.keep_source and not self.leader

    def describe(self) -> str:
        """``source -> target`` as the log and the reasons name it."""
        if self.grows:
            return f"new copy on {self.target}"
        kind = "leader " if self.leader else ""
        return f"{kind}move {self.source} -> {self.target}"


def check_move(
    part: PartitionAssignment,
    move: Move,
    *,
    alive: Sequence[str],
    racks: Mapping[str, str],
    offline: bool = False,
    busy: bool = False,
) -> Move:
    """Whether ``move`` may start on ``part`` now; returns it (``keep_source`` set when the
    target already holds a copy). ``alive``: the nodes that may take a copy. Raises
    :class:`MoveError`."""
    holders = (part.leader, *part.replicas)
    if busy:
        raise MoveError("MOVE_IN_PROGRESS")
    if offline:
        raise MoveError("PARTITION_OFFLINE")
    if move.source == move.target:
        raise MoveError("MOVE_FROM_IS_MOVE_TO")
    if move.source not in holders:
        raise MoveError("MOVE_FROM_NOT_HOLDING")
    if move.target not in alive:
        raise MoveError("MOVE_TO_NOT_FOUND")
    if move.leader and part.leader != move.source:
        raise MoveError("MOVE_FROM_NOT_LEADER")
    if not move.leader and part.leader == move.source:
        raise MoveError("MOVE_FROM_IS_LEADER: use move_leader=true")
    if move.target in holders:
        if not move.leader:
            raise MoveError("MOVE_TO_HOLDS_COPY")
        return Move(move.partition, move.source, move.target, leader=True, keep_source=True)
    others = [n for n in holders if n != move.source]
    if _rack_taken(move.target, others, alive, holders, racks):
        raise MoveError("MOVE_TO_RACK_TAKEN: another copy is on that rack, and a rack is free")
    return Move(move.partition, move.source, move.target, move.leader)


def _rack_taken(
    target: str,
    others: Iterable[str],
    alive: Iterable[str],
    holders: Iterable[str],
    racks: Mapping[str, str],
) -> bool:
    """``target`` shares a rack with a copy staying, while a live node on a free rack exists."""
    used = {rack_of(n, racks) for n in others}
    if rack_of(target, racks) not in used:
        return False
    held = set(holders)
    return any(rack_of(n, racks) not in used for n in alive if n not in held)


def bytes_left(
    move: Move, part: PartitionAssignment, behind: Mapping[str, int] | None
) -> int | None:
    """The bytes of the log ``move.target`` still lacks: 0 once it leads ``part``, else what the
    leader last reported (``behind``: None without a current report); None when unknown (the
    target has not connected to the leader yet, or the leader counts no bytes)."""
    if part.leader == move.target:
        return 0
    return None if behind is None else behind.get(move.target)


# ---------------------------------------------------------------- persistence form


def to_documents(moves: Iterable[Move]) -> list[dict[str, object]]:
    """The JSON form kept with the topic's placement."""
    return [
        {
            "partition": m.partition,
            "move_from": m.source,
            "move_to": m.target,
            "move_leader": m.leader,
            "keep_source": m.keep_source,
        }
        for m in sorted(moves, key=lambda m: m.partition)
    ]


def from_documents(name: str, raw: object) -> tuple[Move, ...]:
    """Read :func:`to_documents`; raises ValueError for a malformed entry."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"topic {name}: moves is not a list")
    moves = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise ValueError(f"topic {name}: a move is not an object")
        partition = entry.get("partition")
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise ValueError(f"topic {name}: a move's partition is not an integer")
        moves.append(
            Move(
                partition,
                str(entry["move_from"]),
                str(entry["move_to"]),
                bool(entry.get("move_leader", False)),
                bool(entry.get("keep_source", False)),
            )
        )
    return tuple(moves)
