"""lookupd's failover, in-sync-set and re-replication decisions: ``decide(view, now)``.

lookupd owns, per partition, the leader, the assigned replicas, the in-sync set (ISR, the
leader first) and the leader epoch (DESIGN.md §5). :func:`decide` reads a snapshot of the nodes'
liveness and of every partition, and returns one :class:`Change` (the partition's full new
state) per partition that must change; the shell persists the changes, then pushes them, and
:func:`apply` folds them into the next snapshot. Pure: no Trio, no I/O, time is ``now``.

Liveness. A node is *up* while its registration connection is open and its last heartbeat is
at most ``heartbeat_timeout`` old; *dead* otherwise (a node missing from ``nodes`` is dead since
forever). An up node that announced a clean shutdown is *leaving*: it keeps serving (and stays in
the ISRs it is in) but must hand its leaderships over. *Alive* means up and not leaving; only an
alive node is promoted, joins an ISR or receives a new replica.

Each partition goes through four steps, in this order:

1. ISR upkeep, while the leader is up and the partition is not offline: a non-leader member
   that is dead or reported ``lagging`` leaves the ISR; an alive assigned replica reported
   ``caught_up`` (and not ``lagging``) joins it. The epoch stays.
2. Leadership. A dead or leaving leader hands over to the first alive ISR member, in
   ``replicas`` order, at ``epoch + 1``; the new ISR is the old one minus the old leader and the
   dead. The old leader takes the new leader's place in ``replicas`` (back, it rejoins as an
   out-of-sync replica). With no alive ISR member: a leaving (still up) leader keeps leading
   until it exits; otherwise an ``unclean`` partition promotes its first alive assigned replica
   (ISR = just it), and any other partition is marked ``offline`` once (leader, ISR and epoch
   kept, recording who holds the data). An offline partition comes back, at ``epoch + 1``,
   under its old leader if alive, else its first alive ISR member (else, if ``unclean``, its
   first alive replica).
3. Re-replication, unless offline: a replica down for ``replace_after`` (``down_since`` old
   enough, or unknown node) is replaced, in place, by the alive node holding no copy of the
   partition on a rack holding no copy of it (while there is one; ``View.racks``), with the
   fewest leader+replica assignments over the whole view (ties: node id).
   The newcomer is outside the ISR until the leader reports it caught up. The source and the
   target of a move in progress are left to the move.
4. Moves (:mod:`.moves`), unless offline: a move whose target is not alive (and does not lead)
   is rolled back (the target leaves ``replicas``); a target not holding a copy yet joins
   ``replicas``, outside the ISR; once it is in the ISR, a source that leads hands leadership
   over to it at ``epoch + 1`` (as a leaving leader does) as soon as the leader reports it
   ``confirmed`` (in the ISR the leader applies, holding every acknowledged message: a
   replica just added to the ISR may still miss what the leader acknowledged before it knew),
   and the source leaves ``replicas`` and the ISR (unless the move is a leadership transfer,
   ``keep_source``). The move then ends.

``caught_up``/``lagging`` are the current leader's reports: :func:`apply` clears them when the
epoch changes and drops the nodes that left or joined ``replicas``, which makes
``decide(apply(view, decide(view, now)), now) == []``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from protocol.lookup import PartitionAssignment

from .moves import Move
from .racks import pick_spread


class DecisionError(ValueError):
    """A change does not fit the view it is applied to."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """What lookupd knows of one nsqd's liveness."""

    connected: bool  # its registration TCP connection is up
    last_heartbeat: float  # time of its last PING / registration traffic
    down_since: float | None = None  # when it was last seen going down; None while up
    leaving: bool = False  # announced a clean shutdown: hand its leaderships over


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as lookupd stores it, with its leader's last ISR reports."""

    topic: str
    partition: int
    leader: str
    replicas: tuple[str, ...]  # assigned replicas, the leader excluded
    isr: tuple[str, ...]  # in-sync set, the leader first
    epoch: int
    caught_up: frozenset[str] = frozenset()  # replicas the leader reports fully caught up
    lagging: frozenset[str] = frozenset()  # replicas the leader reports lagging past the bound
    #: replicas the leader reports in the in-sync set it applies and holding every
    #: acknowledged message (only to such a replica can leadership be handed without loss)
    confirmed: frozenset[str] = frozenset()
    unclean: bool = False  # the topic allows promoting an out-of-sync replica
    offline: bool = False
    move: Move | None = None  # a move of this partition in progress

    @property
    def replication_factor(self) -> int:
        """Copies the partition keeps: the leader and its replicas."""
        return 1 + len(self.replicas)


@dataclass(frozen=True, slots=True)
class Settings:
    """Timeouts (seconds) of the decisions."""

    heartbeat_timeout: float = 2.0  # no heartbeat for longer: the node is dead
    replace_after: float = 60.0  # a replica down this long is placed elsewhere


@dataclass(frozen=True, slots=True)
class View:
    """The snapshot :func:`decide` reads."""

    nodes: Mapping[str, NodeView]
    partitions: Sequence[PartitionView]
    settings: Settings = field(default_factory=Settings)
    racks: Mapping[str, str] = field(default_factory=dict)  # node -> its ``--rack``


@dataclass(frozen=True, slots=True)
class Change:
    """The full new state of one partition, and why (applying it twice is harmless)."""

    topic: str
    partition: int
    leader: str
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    epoch: int
    offline: bool
    reason: str
    move: Move | None = None  # the partition's move in progress after the change (None: none)

    def assignment(self) -> PartitionAssignment:
        """The placement form (leader, replicas, epoch) nodes receive."""
        return PartitionAssignment(self.leader, self.replicas, self.epoch)


@dataclass(frozen=True, slots=True)
class _Health:
    """Liveness of the nodes at ``now``."""

    nodes: Mapping[str, NodeView]
    settings: Settings
    now: float

    def up(self, node: str) -> bool:
        view = self.nodes.get(node)
        return (
            view is not None
            and view.connected
            and self.now - view.last_heartbeat <= self.settings.heartbeat_timeout
        )

    def alive(self, node: str) -> bool:
        return self.up(node) and not self.nodes[node].leaving

    def replaceable(self, node: str) -> bool:
        view = self.nodes.get(node)
        if view is None:
            return True
        return (
            not self.up(node)
            and view.down_since is not None
            and self.now - view.down_since >= self.settings.replace_after
        )


@dataclass(frozen=True, slots=True)
class _State:
    """A partition's decided fields while :func:`decide` works on it."""

    leader: str
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    epoch: int
    offline: bool
    move: Move | None = None
    reasons: tuple[str, ...] = ()

    def key(self) -> tuple[str, tuple[str, ...], frozenset[str], int, bool, Move | None]:
        return (
            self.leader,
            self.replicas,
            frozenset(self.isr),
            self.epoch,
            self.offline,
            self.move,
        )

    def note(self, reason: str) -> tuple[str, ...]:
        return (*self.reasons, reason)


def _isr(leader: str, members: Iterable[str], replicas: Sequence[str]) -> tuple[str, ...]:
    """The ISR in its canonical order: the leader, then the members in ``replicas`` order."""
    keep = set(members)
    return (leader, *(r for r in replicas if r in keep and r != leader))


def _upkeep(state: _State, part: PartitionView, health: _Health) -> _State:
    """Step 1: shrink and expand the ISR of a partition whose leader is up."""
    if state.offline or not health.up(state.leader):
        return state
    old = set(state.isr) - {state.leader}
    kept = {m for m in old if health.up(m) and m not in part.lagging}
    joined = {
        r
        for r in state.replicas
        if r not in old and health.alive(r) and r in part.caught_up and r not in part.lagging
    }
    isr = _isr(state.leader, kept | joined, state.replicas)
    if set(isr) == set(state.isr):
        return state
    reasons = state.reasons
    left = sorted(set(state.isr) - set(isr))
    if left:
        reasons = (*reasons, f"isr shrink: {', '.join(left)} out")
    if joined:
        reasons = (*reasons, f"isr expand: {', '.join(sorted(joined))} in")
    return replace(state, isr=isr, reasons=reasons)


def _promote(state: _State, leader: str, isr: Iterable[str], reason: str) -> _State:
    """``leader`` leads at ``epoch + 1``; the old leader takes its place among the replicas."""
    replicas = state.replicas
    if leader != state.leader:
        replicas = tuple(state.leader if r == leader else r for r in replicas)
    return _State(
        leader,
        replicas,
        _isr(leader, isr, replicas),
        state.epoch + 1,
        offline=False,
        move=state.move,
        reasons=state.note(reason),
    )


def _leadership(state: _State, part: PartitionView, health: _Health) -> _State:
    """Step 2: fail over from a dead or leaving leader, or bring an offline partition back."""
    in_sync = [r for r in state.replicas if r in state.isr]
    if state.offline:
        candidates = [state.leader, *in_sync]
        if part.unclean:
            candidates += state.replicas
        chosen = next((n for n in candidates if health.alive(n)), None)
        if chosen is None:
            return state
        clean = chosen in state.isr
        kept = (m for m in state.isr if m != state.leader and health.up(m)) if clean else ()
        kind = "offline partition back" if clean else "offline partition back, unclean"
        return _promote(state, chosen, kept, f"{kind}: {chosen} leads")
    if health.alive(state.leader):
        return state
    leaving = health.up(state.leader)
    why = f"leader {state.leader} {'leaving' if leaving else 'down'}"
    successor = next((r for r in in_sync if health.alive(r)), None)
    if successor is not None:
        kept = (m for m in state.isr if m != state.leader and health.up(m))
        return _promote(state, successor, kept, f"{why}: {successor} promoted")
    if leaving:
        return state  # no in-sync successor: it leads until it exits
    if part.unclean:
        spare = next((r for r in state.replicas if health.alive(r)), None)
        if spare is not None:
            return _promote(state, spare, (), f"{why}: {spare} promoted unclean")
    return replace(state, offline=True, reasons=state.note(f"{why}: no in-sync replica, offline"))


def _rereplicate(
    state: _State, health: _Health, load: dict[str, int], racks: Mapping[str, str]
) -> _State:
    """Step 3: replace replicas down for ``replace_after``; updates ``load``."""
    if state.offline:
        return state
    replicas = list(state.replicas)
    reasons = state.reasons
    spares = sorted(n for n in health.nodes if health.alive(n))
    moving = () if state.move is None else (state.move.source, state.move.target)
    for index, node in enumerate(replicas):
        if not health.replaceable(node) or node in moving:
            continue
        others = [state.leader, *(r for r in replicas if r != node)]
        found = pick_spread(spares, others, racks, 1, lambda n: (load.get(n, 0), n))
        if not found:
            continue
        target = found[0]
        replicas[index] = target
        load[target] = load.get(target, 0) + 1
        load[node] = load.get(node, 0) - 1
        reasons = (*reasons, f"re-replicate: {node} replaced by {target}")
    if reasons == state.reasons:
        return state
    new = tuple(replicas)
    return replace(state, replicas=new, isr=_isr(state.leader, state.isr, new), reasons=reasons)


def _moving(state: _State, part: PartitionView, health: _Health) -> _State:
    """Step 4: one step of the partition's move, if it has one."""
    move = state.move
    if move is None or state.offline:
        return state
    what = move.describe()
    holders = (state.leader, *state.replicas)
    if move.source not in holders:  # e.g. an operator's other change: nothing left to move
        return replace(state, move=None, reasons=state.note(f"{what}: source gone, ended"))
    if state.leader != move.target and not health.alive(move.target):
        replicas = state.replicas
        if not move.keep_source:
            replicas = tuple(r for r in replicas if r != move.target)
        isr = _isr(state.leader, state.isr, replicas)
        why = f"{what}: rolled back, {move.target} not alive"
        return replace(state, replicas=replicas, isr=isr, move=None, reasons=state.note(why))
    if move.target not in holders:
        replicas = (*state.replicas, move.target)
        why = f"{what}: {move.target} added, catching up"
        return replace(state, replicas=replicas, reasons=state.note(why))
    if move.target not in state.isr:
        return state  # catching up: the leader reports it, step 1 adds it to the ISR
    if state.leader == move.source:
        reported = part.leader == move.source and state.epoch == part.epoch
        if not reported or move.target not in part.confirmed:
            return state  # until the leader waits for it and it holds every acknowledgement
        kept = (m for m in state.isr if m != state.leader and health.up(m))
        state = _promote(state, move.target, kept, f"{what}: leadership handed over")
    if move.keep_source:
        return replace(state, move=None, reasons=state.note(f"{what}: done"))
    replicas = tuple(r for r in state.replicas if r != move.source)
    isr = _isr(state.leader, state.isr, replicas)
    why = f"{what}: done, {move.source} removed"
    return replace(state, replicas=replicas, isr=isr, move=None, reasons=state.note(why))


def assignment_load(partitions: Iterable[PartitionView]) -> dict[str, int]:
    """Leader and replica assignments per node."""
    load: dict[str, int] = {}
    for part in partitions:
        for node in (part.leader, *part.replicas):
            load[node] = load.get(node, 0) + 1
    return load


def decide(view: View, now: float) -> list[Change]:
    """The changes the partitions of ``view`` need at ``now``, in ``view.partitions`` order;
    ``[]`` when nothing must change."""
    health = _Health(view.nodes, view.settings, now)
    load = assignment_load(view.partitions)
    changes = []
    for part in view.partitions:
        start = _State(part.leader, part.replicas, part.isr, part.epoch, part.offline, part.move)
        state = _upkeep(start, part, health)
        state = _leadership(state, part, health)
        state = _rereplicate(state, health, load, view.racks)
        state = _moving(state, part, health)
        if state.key() != start.key():
            changes.append(
                Change(
                    topic=part.topic,
                    partition=part.partition,
                    leader=state.leader,
                    replicas=state.replicas,
                    isr=state.isr,
                    epoch=state.epoch,
                    offline=state.offline,
                    reason="; ".join(state.reasons),
                    move=state.move,
                )
            )
    return changes


def apply(view: View, changes: Iterable[Change]) -> View:
    """``view`` with ``changes`` applied. A new epoch voids the old leader's reports, and a node
    that left or joined ``replicas`` has none. Raises :class:`DecisionError` for a change to a
    partition the view does not have."""
    by_key = {(c.topic, c.partition): c for c in changes}
    known = {(p.topic, p.partition) for p in view.partitions}
    missing = sorted(set(by_key) - known)
    if missing:
        raise DecisionError(f"no such partition: {missing[0][0]}/{missing[0][1]}")
    partitions = []
    for part in view.partitions:
        change = by_key.get((part.topic, part.partition))
        if change is None:
            partitions.append(part)
            continue
        stay = set(change.replicas) & set(part.replicas)
        if change.epoch != part.epoch:
            stay = set()
        partitions.append(
            replace(
                part,
                leader=change.leader,
                replicas=change.replicas,
                isr=change.isr,
                epoch=change.epoch,
                offline=change.offline,
                move=change.move,
                caught_up=part.caught_up & stay,
                lagging=part.lagging & stay,
                confirmed=part.confirmed & stay,
            )
        )
    return replace(view, partitions=tuple(partitions))
