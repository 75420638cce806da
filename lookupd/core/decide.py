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

Each partition goes through six steps, in this order:

1. ISR upkeep, while the leader is up and the partition is not offline: a non-leader member
   that is dead or reported ``lagging`` leaves the ISR; an alive assigned replica reported
   ``caught_up`` (and not ``lagging``) joins it. The epoch stays.
2. Leadership. A dead or leaving leader hands over to the first alive ISR member, in
   ``replicas`` order, that holds every acknowledged message, at ``epoch + 1``; the new ISR is
   the old one minus the old leader and the dead. Such a member is one the leader reports
   ``confirmed`` (in the ISR it applies, holding everything up to its high-watermark), or, for
   a dead leader, one in the ISR the leader applied: not one lookupd added since
   (``PartitionView.joined``), which the leader did not wait for before it applied that ISR
   and which may lack what it acknowledged meanwhile. A leaving leader hands over only to a
   member it confirmed (it keeps leading until it reports one). The old leader takes the new
   leader's place in ``replicas`` (back, it rejoins as an out-of-sync replica). With no such
   member alive: a leaving (still up) leader keeps leading until it exits; otherwise an
   ``unclean`` partition promotes its first alive assigned replica (ISR = just it), and any
   other partition is marked ``offline`` once (leader, ISR and epoch kept, recording who holds
   the data). An offline partition comes back, at ``epoch + 1``, under its old leader if
   alive, else its first alive ISR member holding every acknowledged message (else, if
   ``unclean``, its first alive replica).
3. Re-replication, unless offline: a replica down for ``replace_after`` (``down_since`` old
   enough, or unknown node) is replaced, in place, by the alive node holding no copy of the
   partition on a rack holding no copy of it (while there is one; ``View.racks``), with the
   fewest leader+replica assignments over the whole view (ties: node id).
   The newcomer is outside the ISR until the leader reports it caught up. The source and the
   target of a move in progress are left to the move.
4. Copies (:mod:`.resize`), for a partition with no move and an up leader, unless offline:
   a replica beyond the topic's ``replicator`` (``wanted``) is dropped; a copy on a node being
   drained (``View.removing``: it takes no new copy) or one missing below ``replicator``
   starts a move (one move per drained node at a time).
5. Moves (:mod:`.moves`), unless offline: a move whose target is not alive or is being drained
   (and does not lead) is rolled back (a target the move added leaves ``replicas``); a target
   not holding a copy yet joins ``replicas``, outside the ISR; once it is in the ISR, a source
   that leads hands leadership over to it at ``epoch + 1`` (as a leaving leader does) as soon
   as the leader reports it ``confirmed`` (in the ISR the leader applies, holding every
   acknowledged message: a replica just added to the ISR may still miss what the leader
   acknowledged before it knew), and the source leaves ``replicas`` and the ISR (unless the
   move is a leadership transfer, ``keep_source``, or grows the partition). The move ends.
6. Balance (:mod:`.balance`), when ``View.balance`` is on and no upgrade is in progress: on a
   settled cluster (no move, nothing offline, under-replicated or out of sync, every copy on a
   node up for ``balance_grace`` at least), moves that even out the copies and leaderships
   the nodes up that long hold start, one per node, and step 5 takes their first step at once.
   So a node that comes back after a failover from it (``NodeView.up_since``) gets its
   leaderships back only once it has stayed up for the grace.

During a rolling upgrade (``View.upgrading``) a down node's replicas are not replaced (step 3):
the node is restarting.

``caught_up``/``lagging`` are the current leader's reports: :func:`apply` clears them when the
epoch changes and drops the nodes that left or joined ``replicas``. :func:`decide` looks again
at the view its changes make until nothing more changes (a step may allow another, such as a
drained node's next move once its last one ended), which makes ``decide(apply(view,
decide(view, now)), now) == []``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .balance import Spread, plan_balance, settled
from .health import Health, liveness_key
from .moves import Move
from .racks import pick_spread
from .resize import plan
from .view import (
    Change,
    Counts,
    DecisionError,
    NodeView,
    PartitionView,
    Settings,
    View,
    apply,
    apply_at,
    assignment_load,
)

__all__ = [
    "Change",
    "DecisionError",
    "NodeView",
    "PartitionView",
    "Settings",
    "View",
    "apply",
    "assignment_load",
    "decide",
    "liveness_key",
]


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


def _upkeep(state: _State, part: PartitionView, health: Health) -> _State:
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


def _leadership(state: _State, part: PartitionView, health: Health) -> _State:
    """Step 2: fail over from a dead or leaving leader, or bring an offline partition back."""
    if not state.offline and health.alive(state.leader):
        return state  # (most partitions of every decision: nothing worked out for them)
    in_sync = [r for r in state.replicas if r in state.isr]
    # who holds every acknowledged message: a member the leader confirmed, or one in the ISR
    # the leader applied (not one lookupd added since: the leader may have acknowledged
    # messages without it before it knew; nor one step 1 adds now)
    confirmed = part.confirmed.intersection(part.isr)
    safe = [r for r in in_sync if r in confirmed or (r in part.isr and r not in part.joined)]
    if state.offline:
        candidates = [state.leader, *safe]
        if part.unclean:
            candidates += state.replicas
        chosen = next((n for n in candidates if health.alive(n)), None)
        if chosen is None:
            return state
        clean = chosen == state.leader or chosen in safe
        kept = (m for m in state.isr if m != state.leader and health.up(m)) if clean else ()
        kind = "offline partition back" if clean else "offline partition back, unclean"
        return _promote(state, chosen, kept, f"{kind}: {chosen} leads")
    leaving = health.up(state.leader)
    why = f"leader {state.leader} {'leaving' if leaving else 'down'}"
    # a leaving leader waits for its own word on the successor (it reports within a second)
    successors = [r for r in in_sync if r in confirmed] if leaving else safe
    successor = next((r for r in successors if health.alive(r)), None)
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
    state: _State, health: Health, load: dict[str, int], racks: Mapping[str, str]
) -> _State:
    """Step 3: replace replicas down for ``replace_after``; updates ``load``."""
    if state.offline:
        return state
    replicas = list(state.replicas)
    reasons = state.reasons
    spares = sorted(n for n in health.nodes if health.spare(n))
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


def _moving(state: _State, part: PartitionView, health: Health) -> _State:
    """Step 4: one step of the partition's move, if it has one."""
    move = state.move
    if move is None or state.offline:
        return state
    what = move.describe()
    holders = (state.leader, *state.replicas)
    if move.source not in holders:  # e.g. an operator's other change: nothing left to move
        return replace(state, move=None, reasons=state.note(f"{what}: source gone, ended"))
    if state.leader != move.target and not health.spare(move.target):
        replicas = state.replicas
        if not move.keep_source or move.grows:
            replicas = tuple(r for r in replicas if r != move.target)
        isr = _isr(state.leader, state.isr, replicas)
        why = f"{what}: rolled back, {move.target} not alive or being drained"
        return replace(state, replicas=replicas, isr=isr, move=None, reasons=state.note(why))
    if move.target not in holders:
        replicas = (*state.replicas, move.target)
        why = f"{what}: {move.target} added, catching up"
        return replace(state, replicas=replicas, reasons=state.note(why))
    if move.target not in state.isr:
        return state  # catching up: the leader reports it, step 1 adds it to the ISR
    if state.leader == move.source and not move.grows:
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


def _plan(
    state: _State,
    part: PartitionView,
    health: Health,
    load: dict[str, int],
    racks: Mapping[str, str],
    busy: set[str],
) -> _State:
    """Step 4: the next step of a partition without a move towards its ``replicator`` or away
    from the nodes being drained (:mod:`.resize`); updates ``load`` and ``busy``."""
    if state.offline or state.move is not None or not health.up(state.leader):
        return state
    step = plan(
        part.partition,
        state.leader,
        state.replicas,
        state.isr,
        wanted=part.wanted,
        removing=health.removing,
        busy=busy,
        alive=health.alive,
        spares=sorted(n for n in health.nodes if health.spare(n)),
        load=load,
        racks=racks,
    )
    if step is None:
        return state
    if step.drop is not None:
        replicas = tuple(r for r in state.replicas if r != step.drop)
        load[step.drop] = load.get(step.drop, 0) - 1
        isr = _isr(state.leader, state.isr, replicas)
        return replace(state, replicas=replicas, isr=isr, reasons=state.note(step.reason))
    move = step.move
    assert move is not None
    if move.source in health.removing:
        busy.add(move.source)
    if move.grows or not move.keep_source:
        load[move.target] = load.get(move.target, 0) + 1
    return replace(state, move=move, reasons=state.note(step.reason))


def _balancing(
    view: View, health: Health, looked: Sequence[PartitionView], counts: Counts
) -> dict[tuple[str, int], Move]:
    """Step 6's moves (:mod:`.balance`): only when balancing is on and the cluster settled,
    every copy on a node up for ``balance_grace`` at least (a node just back, after a
    failover from it, is not handed its leaderships at once); nodes up for less take
    nothing yet. ``looked``: the partitions the decision looks at (the others are quiet:
    settled, once every node holding a copy is steady); ``counts``: every partition's."""
    if not view.balance or view.upgrading:
        return {}
    holding = (node for node, copies in counts.copies.items() if copies)
    if not settled(looked, health.steady) or not all(health.steady(n) for n in holding):
        return {}
    nodes = [n for n in view.nodes if health.steady(n)]
    return plan_balance(view.partitions, nodes, view.racks, Spread.of(counts, nodes))


def _pass(view: View, now: float) -> dict[int, Change]:
    """One look at the partitions that may change (every one, or ``view.candidates``): steps
    1 to 6 (see the module doc); the changes by position in ``view.partitions``."""
    health = Health(view.nodes, view.settings, now, view.removing, view.upgrading)
    every = view.partitions
    positions: Sequence[int] = range(len(every)) if view.candidates is None else view.candidates
    looked = [every[i] for i in positions]
    counts = view.counts if view.counts is not None else Counts.of(every)
    load = dict(counts.copies)
    busy = {p.move.source for p in looked if p.move and p.move.source in view.removing}
    balancing = _balancing(view, health, looked, counts)
    if balancing:  # (balancing picks from every partition: rare, a settled cluster's moves)
        positions = range(len(every))
    changes = {}
    for position in positions:
        part = every[position]
        start = _State(part.leader, part.replicas, part.isr, part.epoch, part.offline, part.move)
        state = _upkeep(start, part, health)
        state = _leadership(state, part, health)
        state = _rereplicate(state, health, load, view.racks)
        state = _plan(state, part, health, load, view.racks, busy)
        balance = balancing.get((part.topic, part.partition))
        if balance is not None and state.key() == start.key():
            why = f"balance: {balance.describe()}"
            state = replace(state, move=balance, reasons=state.note(why))
        state = _moving(state, part, health)
        if state.key() != start.key():
            changes[position] = Change(
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
    return changes


#: looks :func:`decide` takes at most: a step one look takes (a move ended, a drained
#: node's leadership handed over) may let the next look start another
MAX_PASSES = 4


def decide(view: View, now: float) -> list[Change]:
    """The changes the partitions of ``view`` need at ``now``, in ``view.partitions`` order;
    ``[]`` when nothing must change. It looks again at the changed view until nothing more
    changes (at most :data:`MAX_PASSES` times), so ``decide(apply(view, decide(view, now)),
    now) == []``. With ``view.candidates`` it looks at those only (the others are quiet,
    :mod:`.quiet`), with the same result."""
    merged: dict[int, Change] = {}
    dropped: dict[int, set[str]] = {}  # replicas a pass removed, per partition
    current = view
    for _ in range(MAX_PASSES):
        changes = _pass(current, now)
        if not changes:
            break
        for position, change in changes.items():
            part = current.partitions[position]
            gone = dropped.setdefault(position, set())
            gone.update(set(part.replicas) - set(change.replicas))
            before = merged.get(position)
            if before is not None:
                change = replace(change, reason=f"{before.reason}; {change.reason}")
            renewed = gone.intersection(change.replicas)
            merged[position] = replace(change, renewed=frozenset(renewed)) if renewed else change
        current = apply_at(current, changes)
    return [merged[position] for position in sorted(merged)]
