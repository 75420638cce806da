"""What lookupd's decisions (:mod:`lookupd.core.decide`) read and return: the snapshot of the
nodes' liveness and of every partition (:class:`View`), one partition's new state
(:class:`Change`), and :func:`apply`, which folds changes into the next snapshot. Pure: no
I/O, no clock, no Trio."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from protocol.lookup import PartitionAssignment

from .moves import Move


class DecisionError(ValueError):
    """A change does not fit the view it is applied to."""


@dataclass(frozen=True, slots=True)
class NodeView:
    """What lookupd knows of one nsqd's liveness."""

    connected: bool  # its registration TCP connection is up
    last_heartbeat: float  # time of its last PING / registration traffic
    down_since: float | None = None  # when it was last seen going down; None while up
    leaving: bool = False  # announced a clean shutdown: hand its leaderships over
    #: when it last came up after being down (connected, or heard from again after a silence
    #: past the heartbeat timeout); balancing waits ``Settings.balance_grace`` after it
    up_since: float = float("-inf")


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
    #: ISR members lookupd added under this epoch and the leader has not confirmed since: the
    #: leader acknowledged without them until it applied that ISR, so they may lack messages
    #: (lookupd's memory, not persisted: empty after it restarts)
    joined: frozenset[str] = frozenset()
    unclean: bool = False  # the topic allows promoting an out-of-sync replica
    offline: bool = False
    move: Move | None = None  # a move of this partition in progress
    #: copies the topic's ``replicator`` asks for (None: keep what is there)
    wanted: int | None = None

    @property
    def replication_factor(self) -> int:
        """Copies the partition keeps: the leader and its replicas."""
        return 1 + len(self.replicas)


@dataclass(frozen=True, slots=True)
class Settings:
    """Timeouts (seconds) of the decisions."""

    heartbeat_timeout: float = 2.0  # no heartbeat for longer: the node is dead
    replace_after: float = 60.0  # a replica down this long is placed elsewhere
    #: ``--auto-balance``: lookupd balances by itself unless ``/cluster/balance`` said otherwise
    auto_balance: bool = True
    #: balancing starts no move while a node holding a copy came up less than this long ago,
    #: and gives nothing to such a node: one just back (a link healed, a pause ended) may go
    #: again, and handing it leaderships at once would fail them over twice
    balance_grace: float = 5.0


@dataclass(frozen=True, slots=True)
class View:
    """The snapshot :func:`~lookupd.core.decide.decide` reads."""

    nodes: Mapping[str, NodeView]
    partitions: Sequence[PartitionView]
    settings: Settings = field(default_factory=Settings)
    racks: Mapping[str, str] = field(default_factory=dict)  # node -> its ``--rack``
    #: nodes being drained (``/cluster/node/remove``): their copies move elsewhere
    removing: frozenset[str] = frozenset()
    #: start balancing moves on a settled cluster (:mod:`lookupd.core.balance`)
    balance: bool = False
    #: a rolling upgrade is in progress (``/cluster/upgrade/begin``): a down node's replicas
    #: are not replaced (it is restarting), nothing is balanced
    upgrading: bool = False
    #: the positions in ``partitions`` a decision looks at (None: every one); the caller
    #: vouches that every other partition is quiet (:mod:`lookupd.core.quiet`): nothing
    #: about it can change, so a decision costs time in the partitions it may touch only
    candidates: Sequence[int] | None = None
    #: copies and leaderships per node over every partition (None: counted from them)
    counts: Counts | None = None


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
    #: replicas dropped and added again within the change (a decision's later pass gave a
    #: copy back to a node an earlier one removed): reports from before it do not speak for them
    renewed: frozenset[str] = frozenset()

    def assignment(self) -> PartitionAssignment:
        """The placement form (leader, replicas, epoch) nodes receive."""
        return PartitionAssignment(self.leader, self.replicas, self.epoch)


def assignment_load(partitions: Iterable[PartitionView]) -> dict[str, int]:
    """Leader and replica assignments per node (:attr:`Counts.copies`)."""
    return dict(Counts.of(partitions).copies)


@dataclass(frozen=True, slots=True)
class Counts:
    """Copies (leader and replica assignments) and leaderships per node of some partitions;
    a node holding none may be missing."""

    copies: Mapping[str, int]
    leaders: Mapping[str, int]

    @classmethod
    def of(cls, partitions: Iterable[PartitionView]) -> Counts:
        copies: Counter[str] = Counter()
        leaders: Counter[str] = Counter()
        for part in partitions:
            leaders[part.leader] += 1
            copies.update((part.leader, *part.replicas))
        return cls(copies, leaders)

    @classmethod
    def total(cls, parts: Iterable[Counts]) -> Counts:
        copies: Counter[str] = Counter()
        leaders: Counter[str] = Counter()
        for counts in parts:
            copies.update(counts.copies)
            leaders.update(counts.leaders)
        return cls(copies, leaders)

    def moved(self, moves: Iterable[tuple[PartitionView, PartitionView]]) -> Counts:
        """These counts once each ``before`` of ``moves`` became its ``after``."""
        copies, leaders = Counter(self.copies), Counter(self.leaders)
        for before, after in moves:
            copies.subtract((before.leader, *before.replicas))
            copies.update((after.leader, *after.replicas))
            leaders[before.leader] -= 1
            leaders[after.leader] += 1
        return Counts(+copies, +leaders)


def isr_moved(
    joined: frozenset[str],
    confirmed: frozenset[str],
    before: Sequence[str],
    after: Sequence[str],
    new_epoch: bool,
) -> tuple[frozenset[str], frozenset[str]]:
    """A partition's ``joined`` and ``confirmed`` (:class:`PartitionView`) once its ISR went
    from ``before`` to ``after`` (leader first), under a new epoch if ``new_epoch``. A report
    confirms only members of the ISR it was made under: one that joined or left since waits
    for the leader's next word, and one that joined is ``joined`` until then; a new epoch voids
    the old leader's reports, and the kept members carry what they were."""
    joined = joined - confirmed
    if new_epoch:
        return joined & frozenset(after[1:]), frozenset()
    stay = frozenset(after) & frozenset(before)
    joined = (joined | (frozenset(after) - frozenset(before))) & frozenset(after[1:])
    return joined, confirmed & stay


def apply(view: View, changes: Iterable[Change]) -> View:
    """``view`` with ``changes`` applied. A new epoch voids the old leader's reports, a node
    that left or joined ``replicas`` (or both: ``Change.renewed``) has none, and one that left
    or joined the ISR is confirmed by none (one that joined is ``joined``). Raises
    :class:`DecisionError` for a change to a partition the view does not have."""
    by_key = {(c.topic, c.partition): c for c in changes}
    at = {(p.topic, p.partition): i for i, p in enumerate(view.partitions)}
    missing = sorted(set(by_key) - set(at))
    if missing:
        raise DecisionError(f"no such partition: {missing[0][0]}/{missing[0][1]}")
    return apply_at(view, {at[key]: change for key, change in by_key.items()})


def apply_at(view: View, changes: Mapping[int, Change]) -> View:
    """:func:`apply` of changes given by their partitions' positions in ``view.partitions``
    (what :func:`~lookupd.core.decide.decide` knows): time in the changes, not the view. A
    changed partition joins ``candidates``: it may no longer be quiet."""
    partitions = list(view.partitions)
    moves = []
    for position, change in changes.items():
        part = partitions[position]
        new_epoch = change.epoch != part.epoch
        stay = set() if new_epoch else (set(change.replicas) & set(part.replicas)) - change.renewed
        joined, confirmed = isr_moved(part.joined, part.confirmed, part.isr, change.isr, new_epoch)
        partitions[position] = replace(
            part,
            leader=change.leader,
            replicas=change.replicas,
            isr=change.isr,
            epoch=change.epoch,
            offline=change.offline,
            move=change.move,
            caught_up=part.caught_up & stay,
            lagging=part.lagging & stay,
            confirmed=confirmed & stay,
            joined=joined,
        )
        moves.append((part, partitions[position]))
    candidates = view.candidates
    if candidates is not None:
        candidates = sorted({*candidates, *changes})
    counts = None if view.counts is None else view.counts.moved(moves)
    return replace(view, partitions=tuple(partitions), candidates=candidates, counts=counts)
