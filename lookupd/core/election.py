"""Leader election on an etcd lease, the decisions only (pure: no I/O, no clock; the shell in
:mod:`lookupd.ha.leadership` passes monotonic times in).

A lookupd holds one lease (TTL :data:`TTL`), kept alive every :data:`KEEPALIVE_INTERVAL`. The
leader key is created in a transaction only if absent, attached to that lease; etcd deletes it
when the lease expires, and a follower that sees no leader key campaigns.

The leader's own rule (:meth:`Lease.valid`): etcd expires the lease at the earliest ``TTL``
after it *received* the last keepalive it answered, which is after lookupd *sent* it. So a leader
that measures from the send time of its last successful keepalive and stops leading
:data:`SAFETY_MARGIN` before ``sent + TTL`` has stopped before any other lookupd can have
created the leader key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

TTL = 3  # seconds: the lease's time to live (a takeover after a leader's kill -9 takes ≤ ~4 s)
KEEPALIVE_INTERVAL = 0.8  # seconds between keepalives
SAFETY_MARGIN = 1.0  # seconds before the lease could expire that a leader steps down
CAMPAIGN_INTERVAL = 0.25  # seconds between a follower's looks at the leader key


class Role(Enum):
    """What a lookupd is in the election."""

    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass
class Lease:
    """A lease as its holder knows it: its id (0: none) and the send time of the last
    keepalive (or grant) etcd answered with a live TTL."""

    ttl: float = TTL
    margin: float = SAFETY_MARGIN
    id: int = 0
    confirmed_sent_at: float | None = None

    def granted(self, lease_id: int, ttl: int, sent_at: float) -> None:
        """A grant sent at ``sent_at`` returned ``lease_id`` with ``ttl``."""
        self.id, self.ttl = lease_id, float(ttl)
        self.confirmed_sent_at = sent_at

    def kept_alive(self, ttl: int, sent_at: float) -> bool:
        """A keepalive sent at ``sent_at`` was answered with ``ttl``; False (and the lease
        forgotten) when etcd no longer has it."""
        if ttl <= 0:
            self.lost()
            return False
        if self.confirmed_sent_at is None or sent_at > self.confirmed_sent_at:
            self.confirmed_sent_at = sent_at
        return True

    def lost(self) -> None:
        """The lease is gone (expired, revoked, or etcd said it does not know it)."""
        self.id, self.confirmed_sent_at = 0, None

    def valid(self, now: float) -> bool:
        """The lease surely still exists in etcd at ``now`` (with the safety margin)."""
        if not self.id or self.confirmed_sent_at is None:
            return False
        return now < self.confirmed_sent_at + self.ttl - self.margin


def decide_role(
    lease: Lease, now: float, leader_key: tuple[str, int] | None, my_id: str
) -> tuple[Role, bool]:
    """The role to take now, and whether to try to create the leader key.

    ``leader_key``: the leader key's ``(lookupd id, lease id)``, None when absent (or unknown).
    A lookupd leads only while its lease is valid and the key names it on that lease; with a
    valid lease and no leader key, it campaigns.
    """
    if not lease.valid(now):
        return Role.FOLLOWER, False
    if leader_key is None:
        return Role.FOLLOWER, True
    holder, holder_lease = leader_key
    if holder == my_id and holder_lease == lease.id:
        return Role.LEADER, False
    return Role.FOLLOWER, False
