"""HTTP consume's leases: a batch of one partition's messages, held by whoever has its token.

``POST /consume`` takes up to ``max`` messages of one partition of a channel and puts them in
flight with a :class:`Lease` as their owner, as a TCP session owns what it was sent. A batch's
messages are its own: no other lease (nor TCP consumer) is given them while it is open.

A partition may have several open leases at once (each its own messages, as a TCP consumer has
several messages in flight), so the acks of several batches share one sync pass. An
*exclusive* lease is its partition's only open lease: while it is open no other ``/consume``
request of that channel gets messages of that partition, and it is given only when the
partition has no other open lease. The broker asks for one on ordered channels (one run at a
time, in order) and on partitions with in-sync followers (an ack there waits for the followers
to hold the channel's confirmed offset, which must pass the batch). TCP consumers of the
channel are not affected: an HTTP batch is in flight like any delivery.

A lease ends by ack (its messages are FINed), nack (requeued) or time: at its deadline the
channel's timer requeues its messages like any in-flight timeout, and the channel tells the
owner (:meth:`Lease.message_timed_out`), which ends the lease.

Pure: no I/O and no clock; the caller passes ``now_ns`` and makes the tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from enum import Enum
from typing import Final

from .errors import BrokerError

#: tokens of ended leases remembered, to answer TOKEN_EXPIRED rather than TOKEN_INVALID
REMEMBERED_ENDED: Final = 4096


class LeaseState(Enum):
    """Where a lease is in its life."""

    OPEN = "open"
    ACKED = "acked"
    NACKED = "nacked"
    EXPIRED = "expired"


class Lease:
    """One batch: its partition, its messages' offsets, its deadline. The owner of those
    messages in the channel's cursor while it is open."""

    __slots__ = (
        "channel",
        "deadline_ns",
        "exclusive",
        "offsets",
        "partition",
        "state",
        "token",
        "topic",
    )

    def __init__(
        self,
        token: str,
        topic: str,
        channel: str,
        partition: int,
        deadline_ns: int,
        *,
        exclusive: bool = False,
    ) -> None:
        self.token = token
        self.topic = topic
        self.channel = channel
        self.partition = partition
        self.deadline_ns = deadline_ns
        #: the partition's only open lease (see the module docstring)
        self.exclusive = exclusive
        self.offsets: tuple[int, ...] = ()
        self.state = LeaseState.OPEN

    def is_open(self, now_ns: int) -> bool:
        """True until acked, nacked or expired (its deadline passed counts as expired even
        before the channel's timer requeued the messages)."""
        return self.state is LeaseState.OPEN and now_ns < self.deadline_ns

    def message_timed_out(self) -> None:
        """One of its messages left flight without an ack (lease time out, channel emptied or
        moved by setoffset): the batch belongs to whoever gets it next."""
        if self.state is LeaseState.OPEN:
            self.state = LeaseState.EXPIRED


class UnknownTokenError(BrokerError):
    """``TOKEN_INVALID``: no lease was ever given with this token (or too long ago)."""


class LeaseEndedError(BrokerError):
    """``TOKEN_EXPIRED``: the lease timed out, or was acked or nacked already."""


class LeaseTable:
    """The open leases by token, and the open leases of each (topic, channel, partition)."""

    def __init__(self) -> None:
        self._open: dict[str, Lease] = {}
        #: per partition of a channel, its open leases by token (an exclusive one alone)
        self._held: dict[tuple[str, str, int], dict[str, Lease]] = {}
        self._ended: OrderedDict[str, LeaseState] = OrderedDict()

    def locked(
        self, topic: str, channel: str, partition: int, now_ns: int, *, exclusive: bool = False
    ) -> bool:
        """Whether that partition of the channel can be given no new lease now: an open
        exclusive lease holds it, or (for an ``exclusive`` one) any open lease does."""
        held = self._held.get((topic, channel, partition))
        if not held:
            return False
        for lease in [lease for lease in held.values() if not lease.is_open(now_ns)]:
            self._end(lease)
        return any(exclusive or lease.exclusive for lease in held.values())

    def open_count(self, topic: str, channel: str, partition: int) -> int:
        """How many leases of that partition of the channel are registered as open (some
        may have passed their deadline: :meth:`locked` and :meth:`sweep` end those)."""
        return len(self._held.get((topic, channel, partition), ()))

    def add(self, lease: Lease) -> None:
        """Register an open lease (with its offsets); an exclusive one locks its partition.
        The caller checked :meth:`locked` for it."""
        self._open[lease.token] = lease
        self._held.setdefault((lease.topic, lease.channel, lease.partition), {})[lease.token] = (
            lease
        )

    def claim(self, token: str, now_ns: int) -> Lease:
        """The open lease of ``token``, ended here (the caller acks or nacks its messages).
        Raises :class:`LeaseEndedError` or :class:`UnknownTokenError`."""
        lease = self._open.get(token)
        if lease is None:
            if token in self._ended:
                raise LeaseEndedError(token)
            raise UnknownTokenError(token)
        if not lease.is_open(now_ns):
            self._end(lease)
            raise LeaseEndedError(token)
        self._end(lease)
        return lease

    def sweep(self, now_ns: int) -> None:
        """Forget the open leases that ended by time (bounded memory without acks)."""
        for lease in [lease for lease in self._open.values() if not lease.is_open(now_ns)]:
            self._end(lease)

    def __len__(self) -> int:
        return len(self._open)

    def _end(self, lease: Lease) -> None:
        self._open.pop(lease.token, None)
        key = (lease.topic, lease.channel, lease.partition)
        held = self._held.get(key)
        if held is not None and held.get(lease.token) is lease:
            del held[lease.token]
            if not held:
                del self._held[key]
        self._ended[lease.token] = lease.state
        while len(self._ended) > REMEMBERED_ENDED:
            self._ended.popitem(last=False)
