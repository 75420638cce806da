"""Partition ownership: what this node may do with each partition it holds, and how lookupd's
assignments change that. Pure: no Trio, no I/O, no clock.

A standalone nsqd (or one registered with a stock nsqlookupd) leads every partition it has, at
epoch 0. Registered with pnsq's lookupd, a node holds exactly the partitions lookupd placed on
it, each as *leader* (takes publishes, serves consumers) or *replica* (neither, until the next
issue's replication feeds it), under the leader epoch lookupd gave it. :func:`plan` turns one
assignments document into the steps the broker applies; :class:`PartitionState` is the per
partition state machine the broker asks before every publish, subscription and FIN.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .errors import NotLeaderError, PartitionNotFoundError, StaleEpochError


class Role(enum.Enum):
    """What this node is for one partition."""

    LEADER = "leader"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class Placement:
    """lookupd's word on one partition, as far as this node is concerned."""

    role: Role
    epoch: int = 0
    leader: str = ""  # the leading node's id (``host:tcp_port``); "" when standalone
    replicas: tuple[str, ...] = ()


#: a standalone node's placement of every partition it has
STANDALONE = Placement(Role.LEADER)


class PartitionState:
    """Role and leader epoch of one partition held on this node."""

    def __init__(self, placement: Placement = STANDALONE) -> None:
        self.placement = placement

    @property
    def role(self) -> Role:
        return self.placement.role

    @property
    def epoch(self) -> int:
        return self.placement.epoch

    @property
    def leads(self) -> bool:
        """True if this node takes publishes and serves consumers for the partition."""
        return self.placement.role is Role.LEADER

    def require_leader(self, what: str) -> None:
        """Raise :class:`NotLeaderError` unless this node leads the partition."""
        if not self.leads:
            raise NotLeaderError(f"{what}: this node is not the leader (leader {self.leader})")

    @property
    def leader(self) -> str:
        return self.placement.leader or "unknown"

    def apply(self, placement: Placement) -> bool:
        """Take lookupd's newer word; returns whether the role changed. A placement from an
        older epoch than the one held is refused (:class:`StaleEpochError`): decisions only
        move forward."""
        if placement.epoch < self.placement.epoch:
            raise StaleEpochError(
                f"epoch {placement.epoch} is older than the epoch {self.placement.epoch} held"
            )
        changed = placement.role is not self.placement.role
        self.placement = placement
        return changed


def require_held(states: Mapping[int, PartitionState], topic: str, partition: int) -> None:
    """Raise :class:`PartitionNotFoundError` if ``partition`` is not held here."""
    if partition not in states:
        raise PartitionNotFoundError(f"partition {partition} of topic {topic} is not on this node")


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

    def __bool__(self) -> bool:
        return bool(self.create or self.add or self.change or self.drop or self.settings)


@dataclass(frozen=True, slots=True)
class LocalTopic:
    """What the broker holds of a topic, as :func:`plan` needs it."""

    held: Mapping[int, Placement]
    settings: TopicSettings


def placements_for(
    node: str, partitions: Sequence[tuple[str, Sequence[str], int]]
) -> dict[int, Placement]:
    """``node``'s placements among a topic's ``(leader, replicas, epoch)`` per partition."""
    held = {}
    for number, (leader, replicas, epoch) in enumerate(partitions):
        if node == leader:
            held[number] = Placement(Role.LEADER, epoch, leader, tuple(replicas))
        elif node in replicas:
            held[number] = Placement(Role.REPLICA, epoch, leader, tuple(replicas))
    return held


def plan(wanted: Sequence[TopicPlan], local: Mapping[str, LocalTopic]) -> Plan:
    """The steps from ``local`` to ``wanted``. Topics lookupd does not list are left alone
    (a topic this node just created is adopted by lookupd, then listed); a listed topic's
    partitions that are no longer placed here are dropped from service, never deleted; a
    change of meta (flags, retention, partition count after an expand) is one settings step."""
    out = Plan()
    for topic in wanted:
        have = local.get(topic.name)
        if have is None:
            if topic.held:
                out.create.append(topic)
            continue
        for number, placement in sorted(topic.held.items()):
            current = have.held.get(number)
            if current is None:
                out.add.append((topic.name, number, placement))
            elif current != placement:
                out.change.append((topic.name, number, placement))
        out.drop.extend((topic.name, n) for n in sorted(have.held) if n not in topic.held)
        if have.settings != topic.settings:
            out.settings.append(topic)
    return out
