"""Topic metadata and partition placement: which nsqd leads (and which replicates) each
partition. Pure: no I/O, no clock, no Trio; lookupd's store persists what these functions decide.

Nodes are named ``broadcast_address:tcp_port``. :func:`place` spreads a new topic's partition
leaders over the live pnsq nodes, least-loaded first (load = partitions led), and gives each
partition ``replica - 1`` replicas on other nodes, those holding the fewest partitions of the
topic so far (3 partitions with 2 copies on 3 nodes: each node leads one and replicates one).
Racks (nsqd's ``--rack``, Kafka's ``broker.rack``) come first: a replica goes to a rack holding
no copy of the partition yet while such a node exists (:mod:`.racks`). A partition being moved
(:mod:`.moves`) carries its :class:`~.moves.Move` in ``moves``.
Several partitions of one topic may share a node (unlike youzan's default, which needs
``partition_num * replica`` nodes): a stock client's ``SUB`` on a node reads every partition
there. A topic created before any node registered is *pending* (no partitions placed) until
:func:`place_pending` finds nodes. A topic that a node created on its own (a stock client's
PUB/SUB auto-creation) is :func:`adopt`-ed: that node leads every partition it registered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from protocol.lookup import PartitionAssignment, TopicAssignment, topic_meta

from .moves import Move, from_documents, to_documents
from .racks import pick_spread

MAX_PARTITION_NUM = 255  # youzan nsqlookupd accepts 1..255
MAX_REPLICATOR = 5


class PlacementError(ValueError):
    """A topic cannot be placed (or re-created differently); ``str()`` is the HTTP message."""


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """youzan's ``TopicMetaInfo``, the parts pnsq keeps."""

    partition_num: int
    replica: int = 1
    extend_support: bool = False
    ordered: bool = False
    multi_part: bool = False
    disable_channel_auto_create: bool = False
    retention_days: int = 0
    sync_every: int = 0
    min_isr: int = 1  # pnsq: publishes refused while fewer copies are in sync
    unclean: bool = False  # pnsq: with no in-sync copy left, promote an out-of-sync one

    def lookup_meta(self) -> dict[str, object]:
        """The six keys of ``/lookup?metainfo=``."""
        return topic_meta(
            partition_num=self.partition_num,
            replica=self.replica,
            extend_support=self.extend_support,
            ordered=self.ordered,
            multi_part=self.multi_part,
            disable_channel_auto_create=self.disable_channel_auto_create,
        )


@dataclass(frozen=True, slots=True)
class TopicPlacement:
    """A topic's metadata and where its partitions are; ``partitions == ()`` while pending.
    ``adopted``: placed from a node's own registration rather than ``/topic/create``."""

    name: str
    meta: TopicMeta
    partitions: tuple[PartitionAssignment, ...] = field(default=())
    adopted: bool = False
    moves: tuple[Move, ...] = ()  # partitions being moved (at most one move each)
    #: nodes that held a copy lookupd took away (a move's source, a replaced replica) and hold
    #: none now: their assignments still list the topic, so they stop serving their copy
    released: tuple[str, ...] = ()
    #: per partition (its number, its nodes; sorted), the members lookupd added to its ISR
    #: that its leader has not confirmed since (``PartitionView.joined``: never promoted),
    #: saved with the ISR that holds them, so a lookupd started later promotes them no more
    #: than this one would (the live set is :class:`~.liveness.Liveness`'s)
    joined: tuple[tuple[int, tuple[str, ...]], ...] = ()
    #: this life of the topic: new at each placement of a name lookupd had not placed (a
    #: topic deleted and made again gets another), kept by every later change ("": placed
    #: by a lookupd before ids). A node's copy of the name with another id is of an earlier
    #: life, deleted while the node was away: the node deletes it before it follows
    topic_id: str = ""
    #: :meth:`encoded`'s bytes once made (a placement never changes: a change is a new one)
    _encoded: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def encoded(self) -> bytes:
        """The stored form: :func:`to_document` as compact JSON, keys sorted. Made once per
        placement, so a save after a decision encodes only the topics it changed."""
        if self._encoded is None:
            document = json.dumps(to_document(self), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_encoded", document.encode())
            assert self._encoded is not None
        return self._encoded

    def move(self, partition: int) -> Move | None:
        """The move of ``partition`` in progress, if any."""
        if not self.moves:  # (asked of every partition by each decision: most have none)
            return None
        return next((m for m in self.moves if m.partition == partition), None)

    def with_partition(self, number: int, part: PartitionAssignment) -> TopicPlacement:
        """This placement with partition ``number`` placed as ``part``; a node it no longer
        holds any copy on is ``released``, a node holding one again is not."""
        parts = list(self.partitions)
        old = parts[number]
        parts[number] = part
        updated = replace(self, partitions=tuple(parts))
        gone = {old.leader, *old.replicas} - {part.leader, *part.replicas}
        released = [n for n in (*self.released, *sorted(gone)) if not updated.holds(n)]
        return replace(updated, released=tuple(dict.fromkeys(released)))

    def with_move(self, partition: int, move: Move | None) -> TopicPlacement:
        """This placement with ``partition``'s move set (or ended, with None)."""
        kept = tuple(m for m in self.moves if m.partition != partition)
        moves = kept if move is None else tuple(sorted((*kept, move), key=_by_partition))
        return replace(self, moves=moves)

    @property
    def pending(self) -> bool:
        """Not placed yet (created before any node registered)."""
        return not self.partitions

    def leader(self, partition: int) -> str | None:
        """The node leading ``partition``, if placed."""
        if 0 <= partition < len(self.partitions):
            return self.partitions[partition].leader or None
        return None

    def holds(self, node: str) -> bool:
        """True if ``node`` leads or replicates any partition."""
        return any(node == p.leader or node in p.replicas for p in self.partitions)

    def assignment(self) -> TopicAssignment:
        """The wire form for ``/pnsq/assignments``: ``/lookup``'s six meta keys plus what an
        nsqd applies besides (``retention_days``, ``sync_every``)."""
        meta = self.meta
        return TopicAssignment(
            name=self.name,
            partition_num=meta.partition_num,
            replica=meta.replica,
            partitions=self.partitions,
            meta={
                **meta.lookup_meta(),
                "retention_days": meta.retention_days,
                "sync_every": meta.sync_every,
                "min_isr": meta.min_isr,
                **({"topic_id": self.topic_id} if self.topic_id else {}),
            },
        )


def _by_partition(move: Move) -> int:
    return move.partition


def leader_load(placements: Iterable[TopicPlacement]) -> dict[str, int]:
    """Partitions led per node."""
    load: dict[str, int] = {}
    for placement in placements:
        for part in placement.partitions:
            load[part.leader] = load.get(part.leader, 0) + 1
    return load


def copy_load(placements: Iterable[TopicPlacement]) -> dict[str, int]:
    """Copies (partitions led or replicated) per node."""
    load: dict[str, int] = {}
    for placement in placements:
        for part in placement.partitions:
            for node in (part.leader, *part.replicas):
                load[node] = load.get(node, 0) + 1
    return load


def place(
    name: str,
    meta: TopicMeta,
    nodes: Sequence[str],
    load: Mapping[str, int] | None = None,
    prefer: str | None = None,
    racks: Mapping[str, str] | None = None,
    copies: Mapping[str, int] | None = None,
    topic_id: str = "",
) -> TopicPlacement:
    """Place a new topic (``topic_id``: its life's id) on ``nodes`` (pending if there are
    none); a live ``prefer`` node
    leads the first partition (the node whose publish created the topic); replicas go to
    other ``racks`` first, then to the nodes holding the fewest of the topic's partitions,
    then the fewest ``copies`` over every topic (:func:`copy_load`: without it, the ties went
    by name, and topic after topic the same node took the odd replica, for balancing to move
    later). Raises :class:`PlacementError` if fewer nodes than ``meta.replica`` are live."""
    candidates = sorted(set(nodes))
    if not candidates:
        return TopicPlacement(name, meta, topic_id=topic_id)
    if len(candidates) < meta.replica:
        raise PlacementError(
            f"NOT_ENOUGH_NODES: replicator {meta.replica} needs {meta.replica} nsqd nodes, "
            f"{len(candidates)} registered"
        )
    leaders = {node: (load or {}).get(node, 0) for node in candidates}
    if prefer in leaders:
        leaders[prefer] = min(leaders.values()) - 1
    replicas = dict.fromkeys(candidates, 0)
    held = dict.fromkeys(candidates, 0)  # partitions of this topic on each node, either role
    total = {node: (copies or {}).get(node, 0) for node in candidates}  # every topic's
    parts = []
    for _ in range(meta.partition_num):
        leader = min(candidates, key=lambda n: (leaders[n], n))
        leaders[leader] += 1
        held[leader] += 1
        total[leader] += 1
        chosen = pick_spread(
            candidates,
            (leader,),
            racks or {},
            meta.replica - 1,
            lambda n: (held[n], total[n], replicas[n], n),
        )
        for node in chosen:
            replicas[node] += 1
            held[node] += 1
            total[node] += 1
        parts.append(PartitionAssignment(leader, chosen, 0, (leader, *chosen)))  # all empty
    return TopicPlacement(name, meta, tuple(parts), topic_id=topic_id)


def place_pending(
    placements: Iterable[TopicPlacement],
    nodes: Sequence[str],
    racks: Mapping[str, str] | None = None,
) -> list[TopicPlacement]:
    """Place every pending topic that ``nodes`` can take; returns the newly placed ones."""
    all_placements = list(placements)
    load, copies = leader_load(all_placements), copy_load(all_placements)
    placed = []
    for placement in all_placements:
        if not placement.pending or len(set(nodes)) < max(placement.meta.replica, 1):
            continue
        done = place(
            placement.name,
            placement.meta,
            nodes,
            load,
            racks=racks,
            copies=copies,
            topic_id=placement.topic_id,
        )
        for part in done.partitions:
            load[part.leader] = load.get(part.leader, 0) + 1
            for node in (part.leader, *part.replicas):
                copies[node] = copies.get(node, 0) + 1
        placed.append(replace(done, adopted=placement.adopted))
    return placed


def adopt(name: str, node: str, partitions: Iterable[int], topic_id: str = "") -> TopicPlacement:
    """The default placement of a topic a node created by itself: ``node`` leads each
    partition it registered (``partition_num`` = the highest registered partition + 1)."""
    count = max(partitions, default=0) + 1
    parts = tuple(PartitionAssignment(node) for _ in range(count))
    meta = TopicMeta(partition_num=count)
    return TopicPlacement(name, meta, parts, adopted=True, topic_id=topic_id)


def expand(
    placement: TopicPlacement,
    partition_num: int,
    nodes: Sequence[str],
    load: Mapping[str, int],
    racks: Mapping[str, str] | None = None,
    copies: Mapping[str, int] | None = None,
) -> TopicPlacement:
    """youzan's ``/topic/partition/expand``: add partitions up to ``partition_num``, placed as
    :func:`place` would (the existing ones stay where they are). Raises
    :class:`PlacementError` for a smaller count or a pending topic."""
    old = placement.meta.partition_num
    if partition_num < old:
        raise PlacementError("PARTITION_NUM_DECREASE_NOT_ALLOWED")
    if partition_num > MAX_PARTITION_NUM:
        raise PlacementError("INVALID_ARG_TOPIC_PARTITION")
    if placement.pending:
        raise PlacementError("TOPIC_NOT_PLACED")
    extra = place(
        placement.name,
        replace(placement.meta, partition_num=partition_num - old),
        nodes,
        load,
        racks=racks,
        copies=copies,
    )
    meta = replace(placement.meta, partition_num=partition_num)
    return replace(placement, meta=meta, partitions=placement.partitions + extra.partitions)


def check_recreate(existing: TopicPlacement, meta: TopicMeta) -> None:
    """``/topic/create`` of an existing topic: idempotent with the same partition count,
    replication and flags; raises :class:`PlacementError` otherwise."""
    old = existing.meta
    same = (
        old.partition_num == meta.partition_num
        and old.replica == meta.replica
        and old.ordered == meta.ordered
        and old.extend_support == meta.extend_support
        and old.multi_part == meta.multi_part
    )
    if not same and not existing.adopted:
        raise PlacementError("TOPIC_ALREADY_EXISTS")


def assignments_for(
    node: str, placements: Iterable[TopicPlacement], registered: Iterable[str] = ()
) -> list[TopicAssignment]:
    """The topics ``node`` must hold, for ``/pnsq/assignments``, plus the placed topics it
    ``registered`` without holding any of their partitions (a node that joined with data of
    a topic placed elsewhere): listed with their leaders elsewhere, so the node stops serving
    its copy and no partition ever has two live copies; likewise to a node a copy was taken
    from (``released``)."""
    claimed = set(registered)
    return [
        p.assignment()
        for p in sorted(placements, key=lambda p: p.name)
        if p.holds(node) or node in p.released or (p.name in claimed and not p.pending)
    ]


# ---------------------------------------------------------------- persistence form


def to_document(placement: TopicPlacement) -> dict[str, object]:
    """The JSON form kept in lookupd's metadata store."""
    meta = placement.meta
    joined = dict(placement.joined)
    return {
        "partition_num": meta.partition_num,
        "replica": meta.replica,
        "extend_support": meta.extend_support,
        "ordered": meta.ordered,
        "multi_part": meta.multi_part,
        "disable_channel_auto_create": meta.disable_channel_auto_create,
        "retention_days": meta.retention_days,
        "sync_every": meta.sync_every,
        "min_isr": meta.min_isr,
        "unclean": meta.unclean,
        "adopted": placement.adopted,
        "topic_id": placement.topic_id,
        "moves": to_documents(placement.moves),
        "released": list(placement.released),
        "partitions": [
            {
                "leader": p.leader,
                "replicas": list(p.replicas),
                "epoch": p.epoch,
                "isr": list(p.in_sync),
                **({"joined": list(joined[number])} if number in joined else {}),
            }
            for number, p in enumerate(placement.partitions)
        ],
    }


def from_document(name: str, document: Mapping[str, object]) -> TopicPlacement:
    """Read :func:`to_document`; raises ValueError (or TypeError) for a malformed entry."""

    def number(key: str, default: int) -> int:
        value = document.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"topic {name}: {key} is not an integer")
        return value

    meta = TopicMeta(
        partition_num=number("partition_num", 1),
        replica=number("replica", 1),
        extend_support=bool(document.get("extend_support", False)),
        ordered=bool(document.get("ordered", False)),
        multi_part=bool(document.get("multi_part", False)),
        disable_channel_auto_create=bool(document.get("disable_channel_auto_create", False)),
        retention_days=number("retention_days", 0),
        sync_every=number("sync_every", 0),
        min_isr=number("min_isr", 1),
        unclean=bool(document.get("unclean", False)),
    )
    raw = document.get("partitions", [])
    if not isinstance(raw, list):
        raise ValueError(f"topic {name}: partitions is not a list")
    parts = tuple(
        PartitionAssignment(
            str(p["leader"]),
            tuple(str(r) for r in p.get("replicas", [])),
            int(p.get("epoch", 0)),
            # stored before the in-sync set was kept: the leader alone (the replicas held
            # nothing then; they are added back once caught up)
            tuple(str(n) for n in p.get("isr", [])),
        )
        for p in raw
    )
    joined = tuple(
        (number, tuple(sorted(str(n) for n in p["joined"])))
        for number, p in enumerate(raw)
        if p.get("joined")  # (saved only while it has members)
    )
    moves = from_documents(name, document.get("moves"))
    adopted = bool(document.get("adopted", False))
    released = document.get("released", [])
    if not isinstance(released, list):
        raise ValueError(f"topic {name}: released is not a list")
    topic_id = document.get("topic_id", "")
    if not isinstance(topic_id, str):
        raise ValueError(f"topic {name}: topic_id is not a string")
    return TopicPlacement(
        name,
        meta,
        parts,
        adopted=adopted,
        moves=moves,
        released=tuple(map(str, released)),
        joined=joined,
        topic_id=topic_id,
    )
