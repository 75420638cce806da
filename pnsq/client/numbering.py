"""Idempotent publishing, the producer's side: its name and the numbers of its messages to
each partition. Pure: no I/O.

A producer that names itself in IDENTIFY (``pnsq_producer``) numbers its messages to each
partition 0, 1, 2, ... and sends each publish with the number of its first message; the
partition's leader stores a number once, and answers a retry of stored numbers ``DUPLICATE``.
A publish takes its numbers (a :class:`Ticket`) when it is first sent and keeps them, with its
partition, for every retry: a publish retried after a lost reply, a reconnect or a failover is
stored once.

Numbers the leader has not seen arrive in order on one connection, but retries after a failover
may not: the leader refuses a number past the next one it expects (``E_PUB_SEQUENCE_GAP``), or
past 0 from a producer it does not know (``E_PUB_SEQUENCE_UNKNOWN``). While an earlier publish
of the partition is still in flight that is only a matter of order: the publishes in flight are
sent again oldest first, each as soon as the one before has gone (:meth:`Numbering.may_send`;
waiting for each acknowledgement instead would cost a round trip per message from then on).
When none is, the numbers in between belong to publishes that failed for good, or the leader
forgot the producer (idle past nsqd's ``--producer-state-ttl``): the partition's numbering is
*rebased* so that the oldest publish in flight takes the number the leader expects
(:meth:`Numbering.rebase`). No publish in flight has been stored then (the leader would know
it), so nothing is stored twice and nothing is taken for a duplicate — provided the refusal is
not older than an acknowledgement: a refusal sent before an earlier publish was stored may
arrive (on another connection) after that publish's acknowledgement, and would rebase onto the
number just stored. So a refusal rebases only when no publish of the partition was
acknowledged since the refused one was sent (:meth:`Numbering.acknowledged`); otherwise it is
simply sent again.

A publish given up after its tries is not known to be unstored: a try may still sit in the
buffers of a connection the client left, and be stored later. Its number is never given to
another publish (that one would then be answered ``DUPLICATE`` and never stored): when the
leader refuses a later publish for the given-up one's number, that publish is sent again first
(:meth:`Numbering.given_up`) — a publish that raised may so be stored after all, once. Its
acknowledgement then counts as any other: a refusal of another publish sent before it is stale
(without that, a second publish refused for the same number renumbered itself onto it, just
stored, and was answered ``DUPLICATE``: lost, seen in the pipelined kill -9 fault rounds).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from protocol.commands import Command

from .errors import NsqError

#: the reply to a numbered publish some of whose messages were stored by an earlier try
#: (``DUPLICATE <how many>``, left out this time)
DUPLICATE: Final = b"DUPLICATE"
#: refusals of a numbered publish that only ask for its turn (see the module doc)
_OUT_OF_TURN: Final = frozenset({"E_PUB_SEQUENCE_GAP", "E_PUB_SEQUENCE_UNKNOWN"})
#: the number the leader expects, in a refusal's text
_EXPECTED: Final = re.compile(r"expected sequence (\d+)")

#: a publish's command for its partition and number (None: unnumbered)
Make = Callable[[int | None, int | None], Command]


@dataclass(frozen=True, slots=True)
class Ticket:
    """One publish's numbers: ``count`` from ``index`` in its partition's own count."""

    topic: str
    partition: int
    index: int
    count: int


@dataclass(slots=True)
class _Partition:
    base: int = 0  # the index the leader numbers 0
    next: int = 0  # the index the next publish takes
    pending: set[int] = field(default_factory=set)  # indexes of publishes in flight
    acked: int = 0  # publishes acknowledged so far
    #: after a refusal out of turn: the index that must be sent next (the publishes in flight
    #: are sent again in order, one after another, each without waiting for the one before
    #: to be acknowledged); None: publishes go as they come
    resend: int | None = None
    #: publishes given up, until a later one is acknowledged: by index, the ticket and what
    #: sends it again
    given_up: dict[int, tuple[Ticket, Make]] = field(default_factory=dict)


class Numbering:
    """The numbers ``name`` gives its messages, per (topic, partition)."""

    def __init__(self, name: str | None = None) -> None:
        #: the producer's name (a fresh unique one unless given: a writer that must be known
        #: again after a restart, such as a Spark task, names itself)
        self.name = name or f"pnsq-{uuid.uuid4().hex}"
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._collided: set[tuple[str, int]] = set()  # see :meth:`stored_before_sent`

    def take(self, topic: str, partition: int, count: int) -> Ticket:
        """Numbers for a publish of ``count`` messages, in flight until :meth:`done`."""
        part = self._parts.setdefault((topic, partition), _Partition())
        ticket = Ticket(topic, partition, part.next, count)
        part.next += count
        part.pending.add(ticket.index)
        return ticket

    def stored_before_sent(self, ticket: Ticket) -> bool:
        """``ticket``'s first send was answered ``DUPLICATE``: numbers this producer had not
        sent before are stored already — by another producer using the same name (whose
        messages then stand for this one's, which are not stored), or by an earlier run of
        this writer (which is right only if it publishes the same messages in the same order).
        True the first time for the partition, so that the producer says so once."""
        key = (ticket.topic, ticket.partition)
        if key in self._collided:
            return False
        self._collided.add(key)
        return True

    def number(self, ticket: Ticket) -> int:
        """The number ``ticket``'s publish carries now (its first message's)."""
        return ticket.index - self._parts[(ticket.topic, ticket.partition)].base

    def done(self, ticket: Ticket, *, acknowledged: bool, resend: Make | None = None) -> None:
        """The publish is acknowledged, or given up (``resend``: what sends it again, should
        the leader ask for its number: its command maker): no longer in flight."""
        part = self._parts[(ticket.topic, ticket.partition)]
        part.pending.discard(ticket.index)
        if acknowledged:
            part.acked += 1
            # the leader took this one's numbers: it holds every one before them
            for index in [i for i in part.given_up if i < ticket.index]:
                del part.given_up[index]
        elif resend is not None:
            part.given_up[ticket.index] = (ticket, resend)
        if part.resend == ticket.index:
            self._advance(part, ticket.index)

    def given_up(self, ticket: Ticket, expected: int) -> tuple[Ticket, Make] | None:
        """The publish given up before ``ticket`` whose first number is ``expected`` (the
        leader refused ``ticket``'s numbers for it), with what sends it again; None if
        none."""
        part = self._parts[(ticket.topic, ticket.partition)]
        found = part.given_up.get(part.base + expected)
        if found is None or found[0].index >= ticket.index:
            return None
        return found

    def filled(self, hole: Ticket) -> None:
        """The given-up publish ``hole`` was sent again and acknowledged: an acknowledgement
        like any other (a refusal sent before it is stale: :meth:`rebase`)."""
        part = self._parts[(hole.topic, hole.partition)]
        part.given_up.pop(hole.index, None)
        part.acked += 1

    def may_send(self, ticket: Ticket) -> bool:
        """Whether ``ticket``'s publish may be sent now: always, unless the partition's
        publishes in flight are being sent again in order and an earlier one has not gone
        yet."""
        resend = self._parts[(ticket.topic, ticket.partition)].resend
        return resend is None or ticket.index <= resend

    def sending(self, ticket: Ticket) -> None:
        """``ticket``'s publish is being sent (queued on its connection, in order)."""
        part = self._parts[(ticket.topic, ticket.partition)]
        if part.resend == ticket.index:
            self._advance(part, ticket.index)

    def out_of_turn(self, ticket: Ticket) -> None:
        """The leader refused ``ticket``'s numbers as out of turn: every publish of the
        partition in flight is sent again, in order, from the oldest."""
        part = self._parts[(ticket.topic, ticket.partition)]
        part.resend = min(part.pending)

    @staticmethod
    def _advance(part: _Partition, index: int) -> None:
        later = [i for i in part.pending if i > index]
        part.resend = min(later) if later else None

    def acknowledged(self, ticket: Ticket) -> int:
        """Publishes of ``ticket``'s partition acknowledged so far (noted when a try is sent,
        compared when its refusal comes back)."""
        return self._parts[(ticket.topic, ticket.partition)].acked

    def waits(self, ticket: Ticket) -> bool:
        """Whether an earlier publish of the partition is still in flight (a refusal of
        ``ticket``'s numbers as out of turn then only means: try again after it, in order)."""
        part = self._parts[(ticket.topic, ticket.partition)]
        return any(index < ticket.index for index in part.pending)

    def rebase(self, ticket: Ticket, expected: int, acknowledged: int) -> bool:
        """The leader refused ``ticket``'s try, sent when :meth:`acknowledged` was
        ``acknowledged``, expecting number ``expected``: if ``ticket`` is the oldest publish in
        flight and none was acknowledged since, it carries ``expected`` from now on (the later
        ones follow). Returns whether it does."""
        part = self._parts[(ticket.topic, ticket.partition)]
        if self.waits(ticket) or part.acked != acknowledged:
            return False
        part.base = ticket.index - expected
        part.given_up = {i: g for i, g in part.given_up.items() if i > ticket.index}
        return True


def refusal(error: BaseException) -> int | None:
    """The number the leader expects next, when ``error`` refused a numbered publish out of
    turn (``E_PUB_SEQUENCE_GAP``: the one it names; ``E_PUB_SEQUENCE_UNKNOWN``: 0); None for
    any other error."""
    if not isinstance(error, NsqError) or error.code not in _OUT_OF_TURN:
        return None
    found = _EXPECTED.search(error.description)
    return int(found.group(1)) if found else 0


def already_stored(reply: bytes, count: int) -> int:
    """How many of a numbered publish's ``count`` messages its acknowledgement ``reply``
    says an earlier try stored (0 for ``OK``)."""
    if not reply.startswith(DUPLICATE):
        return 0
    _, _, number = reply.partition(b" ")
    return int(number) if number.isdigit() else count


def stored_before_text(name: str, ticket: Ticket, number: int) -> str:
    """What a producer logs when :meth:`Numbering.stored_before_sent` says so."""
    return (
        f"{ticket.topic}/{ticket.partition}: the first try of numbers {number}.. of producer "
        f"{name!r} was answered DUPLICATE: they were stored before it sent them, by another "
        "producer using this name (then these messages are not stored: give each producer "
        "its own name) or by an earlier run of this writer (right only if it publishes the "
        "same messages in the same order)"
    )


def is_acknowledgement(reply: bytes) -> bool:
    """``OK``, or ``DUPLICATE [<n>]``."""
    return reply == b"OK" or reply.startswith(DUPLICATE)
