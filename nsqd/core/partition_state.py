"""The state of one partition on this node: role, leader epoch, log end, high-watermark and the
in-sync set as lookupd last told it. Pure: no Trio, no I/O, no clock.

The *high-watermark* is the end of what every in-sync replica holds: consumers read below it
only, and a producer's publish is acknowledged once it is past the publish's records. On the
leader it is the least of its own log end and the log ends its in-sync followers acknowledged
(it never moves back while the node leads); a follower learns it from the leader and never
claims more than it holds itself. A standalone partition, or one whose in-sync set is the
leader alone, has its high-watermark at its log end.

The in-sync set (ISR) is lookupd's: the leader reports progress, lookupd decides (DESIGN.md §5).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from .cursor_frames import CursorFrames
from .errors import NotLeaderError, PartitionNotFoundError, StaleEpochError

__all__ = ["STANDALONE", "PartitionState", "Placement", "Revision", "Role", "require_held"]


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
    #: the in-sync set, leader first; () means the leader alone (standalone, or not yet told)
    isr: tuple[str, ...] = ()


#: a standalone node's placement of every partition it has
STANDALONE = Placement(Role.LEADER)


class Revision:
    """A count that moves whenever any of the states sharing it changes (see
    ``PartitionState.shared``)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class PartitionState:
    """Role, leader epoch, log end and high-watermark of one partition held on this node."""

    def __init__(self, placement: Placement = STANDALONE, log_end: int = 0) -> None:
        self._placement = placement
        self._followers = _followers(placement)
        self._leads = placement.role is Role.LEADER
        #: the end offset of the local log (what this node holds)
        self.log_end = log_end
        #: the end offset every in-sync replica holds: what consumers may read. A partition
        #: opened with in-sync followers does not know it (records past it may be cut when a
        #: newer leader exists): it starts at 0 and moves up as the followers acknowledge
        self.high_watermark = 0 if self._followers else log_end
        #: follower node -> the log end it acknowledged (leader side)
        self._acked: dict[str, int] = {}
        #: follower node -> when (the caller's clock) it last acknowledged all of the log
        self._caught_up_at: dict[str, float] = {}
        #: follower node -> the end of the last batch sent to it that reached the log end
        #: when it was sent (acknowledging it means the follower was caught up then)
        self._sent_to_end: dict[str, int] = {}
        #: channel -> follower -> the confirmed offset it holds of that channel (an ordered
        #: channel releases its next message only once every in-sync follower holds its FIN)
        self._cursor_acks: dict[str, dict[str, int]] = {}
        #: the Cursors frames sent to each follower and which it applied (an HTTP consume
        #: ack waits for a frame built after its FINs)
        self.cursor_frames = CursorFrames()
        #: moves whenever the placement, the log end, the high-watermark or a follower's
        #: acknowledgement changes: what a leader's progress report reads is the same while
        #: it stands still (:mod:`nsqd.replication.progress` keeps a settled one by it)
        self.revision = 0
        #: moves with ``revision``; shared by the partitions of one topic (``Topic.hold``),
        #: so that one look tells whether any of them changed
        self.shared = Revision()

    def _changed(self) -> None:
        self.revision += 1
        self.shared.value += 1

    # ------------------------------------------------------------------ role

    @property
    def placement(self) -> Placement:
        """lookupd's last word on this partition (set through :meth:`apply`)."""
        return self._placement

    @property
    def role(self) -> Role:
        return self.placement.role

    @property
    def epoch(self) -> int:
        return self.placement.epoch

    @property
    def leads(self) -> bool:
        """True if this node takes publishes and serves consumers for the partition."""
        return self._leads

    @property
    def leader(self) -> str:
        return self.placement.leader or "unknown"

    @property
    def followers(self) -> tuple[str, ...]:
        """The in-sync replicas a publish must reach before it is acknowledged."""
        return self._followers

    def require_leader(self, what: str) -> None:
        """Raise :class:`NotLeaderError` unless this node leads the partition."""
        if not self.leads:
            raise NotLeaderError(f"{what}: this node is not the leader (leader {self.leader})")

    def apply(self, placement: Placement) -> bool:
        """Take lookupd's newer word; returns whether the role changed. A placement from an
        older epoch than the one held is refused (:class:`StaleEpochError`): decisions only
        move forward. A new epoch forgets the followers' acknowledgements (they answer to
        the new leader); a smaller in-sync set can move the high-watermark on."""
        if placement.epoch < self.placement.epoch:
            raise StaleEpochError(
                f"epoch {placement.epoch} is older than the epoch {self.placement.epoch} held"
            )
        changed = placement.role is not self.placement.role
        self._changed()
        if placement.epoch != self.placement.epoch or changed:
            self._acked.clear()
            self._caught_up_at.clear()
            self._sent_to_end.clear()
            self._cursor_acks.clear()
            self.cursor_frames.clear()
        self._placement = placement
        self._followers = _followers(placement)
        self._leads = placement.role is Role.LEADER
        if self.leads:
            self._advance()
        else:
            self.high_watermark = min(self.high_watermark, self.log_end)
        return changed

    def drop(self) -> None:
        """This node no longer holds the partition (lookupd placed it elsewhere, perhaps
        without telling this node of a handover first): it leads nothing, so a publish waiting
        for the in-sync set is refused and the streams to the followers end."""
        self._leads = False
        self._changed()

    # ------------------------------------------------------------------ progress

    def appended(self, log_end: int) -> int:
        """The local log grew to ``log_end``; returns the high-watermark."""
        self.log_end = log_end
        self._changed()
        if self._leads:
            if self._followers:
                self._advance()
            elif log_end > self.high_watermark:  # alone in sync: everything it holds
                self.high_watermark = log_end
        return self.high_watermark

    def truncated(self, log_end: int) -> None:
        """The local log was cut back to ``log_end`` (a follower matching its new leader)."""
        self.log_end = log_end
        self._changed()
        self.high_watermark = min(self.high_watermark, log_end)

    def follower_acked(self, node: str, log_end: int, now: float = 0.0) -> bool:
        """Follower ``node`` holds everything before ``log_end`` (at ``now``); returns
        whether the high-watermark moved. Acknowledgements never move back."""
        self._changed()
        if log_end >= self.log_end or log_end >= self._sent_to_end.get(node, log_end + 1):
            self._caught_up_at[node] = now
        if log_end <= self._acked.get(node, -1):
            return False
        self._acked[node] = log_end
        before = self.high_watermark
        if self.leads:
            self._advance()
        return self.high_watermark > before

    def acked(self, node: str) -> int:
        """The log end ``node`` last acknowledged (0 if none)."""
        return self._acked.get(node, 0)

    def sent_to_end(self, node: str, end: int) -> None:
        """A batch ending at ``end`` — the whole log at that moment — went to ``node``: once
        it acknowledges ``end`` it counts as caught up, however far the log moved on since
        (a follower under steady load is never *exactly* at the log end)."""
        self._sent_to_end[node] = end

    def cursor_acked(self, node: str, channel: str, confirmed: int) -> None:
        """Follower ``node`` holds ``channel``'s state up to ``confirmed``."""
        acks = self._cursor_acks.setdefault(channel, {})
        acks[node] = max(acks.get(node, -1), confirmed)

    def cursor_replicated(self, channel: str, confirmed: int) -> bool:
        """Whether every in-sync follower holds ``channel`` up to ``confirmed``."""
        acks = self._cursor_acks.get(channel, {})
        return all(acks.get(node, -1) >= confirmed for node in self.followers)

    def has_acked(self, node: str) -> bool:
        """Whether ``node`` acknowledged anything under this epoch."""
        return node in self._acked

    def caught_up_at(self, node: str) -> float | None:
        """When ``node`` last acknowledged the whole log (None: not under this epoch)."""
        return self._caught_up_at.get(node)

    def leader_high_watermark(self, high_watermark: int) -> None:
        """A follower heard the leader's high-watermark (bounded by what it holds)."""
        self._changed()
        self.high_watermark = max(self.high_watermark, min(high_watermark, self.log_end))

    def _advance(self) -> None:
        reached = min((self._acked.get(n, 0) for n in self.followers), default=self.log_end)
        self.high_watermark = max(self.high_watermark, min(reached, self.log_end))


def _followers(placement: Placement) -> tuple[str, ...]:
    return tuple(node for node in placement.isr if node != placement.leader)


def require_held(states: Mapping[int, PartitionState], topic: str, partition: int) -> None:
    """Raise :class:`PartitionNotFoundError` if ``partition`` is not held here."""
    if partition not in states:
        raise PartitionNotFoundError(f"partition {partition} of topic {topic} is not on this node")
