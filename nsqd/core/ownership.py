"""Partition ownership: what this node may do with each partition it holds, and how lookupd's
assignments change that. Pure: no Trio, no I/O, no clock.

A standalone nsqd (or one registered with a stock nsqlookupd) leads every partition it has, at
epoch 0. Registered with pnsq's lookupd, a node holds exactly the partitions lookupd placed on
it, each as *leader* (takes publishes, serves consumers) or *replica* (neither: it follows the
leader's log, :mod:`nsqd.replication`), under the leader epoch lookupd gave it. :func:`plan`
turns one assignments document into the steps the broker applies; :class:`PartitionState` (in
:mod:`.partition_state`) is the per partition state machine the broker asks before every
publish, subscription and FIN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from .partition_state import STANDALONE, PartitionState, Placement, Role, require_held

__all__ = [
    "STANDALONE",
    "LocalTopic",
    "PartitionState",
    "Placement",
    "Plan",
    "Role",
    "TopicPlan",
    "TopicSettings",
    "placements_for",
    "plan",
    "require_held",
]


# ---------------------------------------------------------------------------- assignments


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """lookupd's topic meta that an nsqd applies (youzan's ``TopicMetaInfo``)."""

    partition_num: int = 1
    ordered: bool = False  # orderedmulti: only SUB_ORDERED consumes
    ext: bool = False  # extend: JSON headers
    channel_auto_create: bool = True  # not disable_channel_auto_create
    retention_days: int = 0  # 0: nsqd's --retention
    sync_every: int = 0  # syncdisk; 0: nsqd's --sync-every
    min_isr: int = 1  # publishes refused while fewer copies are in sync
    topic_id: str = ""  # the topic's life on lookupd ("": unknown; see TopicPlacement)


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """One topic as lookupd wants it on this node."""

    name: str
    held: Mapping[int, Placement]  # partition number -> placement, only those on this node
    settings: TopicSettings = TopicSettings()

    @property
    def partition_num(self) -> int:
        return self.settings.partition_num


@dataclass(slots=True)
class Plan:
    """The steps that turn what this node holds into what lookupd assigned."""

    create: list[TopicPlan] = field(default_factory=list)  # topics this node lacks
    add: list[tuple[str, int, Placement]] = field(default_factory=list)  # partitions to open
    change: list[tuple[str, int, Placement]] = field(default_factory=list)  # role/epoch updates
    drop: list[tuple[str, int]] = field(default_factory=list)  # partitions no longer held
    settings: list[TopicPlan] = field(default_factory=list)  # meta changed (flags, expand)
    #: partitions left to open in a later step (``max_opens``): not in create or add yet
    deferred: int = 0

    def __bool__(self) -> bool:
        return bool(self.create or self.add or self.change or self.drop or self.settings)


@dataclass(frozen=True, slots=True)
class LocalTopic:
    """What the broker holds of a topic, as :func:`plan` needs it."""

    held: Mapping[int, Placement]
    settings: TopicSettings


def placements_for(
    node: str, partitions: Sequence[tuple[str, Sequence[str], int, Sequence[str]]]
) -> dict[int, Placement]:
    """``node``'s placements among a topic's ``(leader, replicas, epoch, isr)`` per
    partition."""
    held = {}
    for number, (leader, replicas, epoch, isr) in enumerate(partitions):
        if node == leader:
            role = Role.LEADER
        elif node in replicas:
            role = Role.REPLICA
        else:
            continue
        held[number] = Placement(role, epoch, leader, tuple(replicas), tuple(isr))
    return held


def plan(
    wanted: Sequence[TopicPlan], local: Mapping[str, LocalTopic], max_opens: int | None = None
) -> Plan:
    """The steps from ``local`` to ``wanted``. Topics lookupd does not list are left alone
    (a topic this node just created is adopted by lookupd, then listed); a listed topic's
    partitions that are no longer placed here are dropped from service, never deleted; a
    change of meta (flags, retention, partition count after an expand) is one settings step.

    ``max_opens`` bounds the partitions the steps open (each costs file creations and
    fsyncs): the others are counted in ``deferred`` and opened by a later plan of the same
    document (a topic is then created with its first partitions, the rest added after). Only
    openings wait: every change of role or epoch, and every drop, is in this plan."""
    out = Plan()
    budget = -1 if max_opens is None else max_opens

    def take(count: int) -> int:
        nonlocal budget
        if budget < 0:
            return count
        taken = min(count, budget)
        budget -= taken
        out.deferred += count - taken
        return taken

    for topic in wanted:
        have = local.get(topic.name)
        if have is None:
            if topic.held and (taken := take(len(topic.held))):
                first = dict(sorted(topic.held.items())[:taken])
                out.create.append(topic if taken == len(topic.held) else replace(topic, held=first))
            continue
        for number, placement in sorted(topic.held.items()):
            current = have.held.get(number)
            if current is None:
                if take(1):
                    out.add.append((topic.name, number, placement))
            elif current != placement:
                out.change.append((topic.name, number, placement))
        out.drop.extend((topic.name, n) for n in sorted(have.held) if n not in topic.held)
        if have.settings != topic.settings:
            out.settings.append(topic)
    return out
