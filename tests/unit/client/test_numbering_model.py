"""pnsq/client/numbering.py against a model leader, driven the way the producers drive it: tries
reach the leader in any order or late (after their publish was given up), answers are lost,
publishes are retried or given up, the leader's refusals are answered by sending a given-up
publish again or by renumbering. Whatever happens, a message acknowledged to the caller is
stored, and no message is stored twice."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pnsq.client.numbering import Numbering, Ticket
from protocol.commands import Command, Pub


def make(partition: int | None, number: int | None) -> Command:
    return Pub("t", b"", partition, number)


@dataclass
class Leader:
    """A partition leader's producer state for one producer: numbers from 0, each once."""

    stored: list[int] = field(default_factory=list)  # message by number

    def take(self, number: int, message: int) -> tuple[str, int]:
        if number == len(self.stored):
            self.stored.append(message)
            return "ok", 0
        if number < len(self.stored):
            return "duplicate", 0
        return "gap", len(self.stored)


@dataclass
class Try:
    """One command on the wire: a publish's own try, or a given-up one sent again for it."""

    ticket: Ticket
    number: int
    message: int
    acked_at_send: int
    hole: Ticket | None = None  # the given-up publish this try sends again


class NumberingAgainstALeader(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.numbering = Numbering("model")
        self.leader = Leader()
        self.messages: dict[int, int] = {}  # ticket index -> message
        self.current: dict[int, Try] = {}  # ticket index -> the try it waits for
        self.wire: list[Try] = []
        self.answers: list[tuple[Try, tuple[str, int]]] = []
        self.acked: set[int] = set()
        self.next_message = 0

    def _send(self, ticket: Ticket, hole: Ticket | None = None) -> None:
        target = hole or ticket
        sent = Try(
            ticket,
            self.numbering.number(target),
            self.messages[target.index],
            self.numbering.acknowledged(ticket),
            hole,
        )
        if hole is None:
            self.numbering.sending(ticket)
        self.current[ticket.index] = sent
        self.wire.append(sent)

    @rule()
    def publish(self) -> None:
        ticket = self.numbering.take("t", 0, 1)
        self.messages[ticket.index] = self.next_message
        self.next_message += 1
        self._send(ticket)

    @precondition(lambda self: self.wire)
    @rule(data=st.data(), answered=st.booleans())
    def a_try_reaches_the_leader(self, data: st.DataObject, answered: bool) -> None:
        """A try on the wire reaches the leader; its answer reaches the client at once, or
        waits (is late, or never read)."""
        sent = self.wire.pop(data.draw(st.integers(0, len(self.wire) - 1)))
        self.answers.append((sent, self.leader.take(sent.number, sent.message)))
        if answered:
            self._answer(len(self.answers) - 1)

    @precondition(lambda self: self.current)
    @rule(data=st.data(), give_up=st.booleans())
    def a_reply_is_overdue(self, data: st.DataObject, give_up: bool) -> None:
        """The client stops waiting for a try (it may still reach the leader, late)."""
        index = data.draw(st.sampled_from(sorted(self.current)))
        sent = self.current.pop(index)
        if give_up:
            self.numbering.done(sent.ticket, acknowledged=False, resend=make)
        else:
            self._send(sent.ticket, sent.hole)

    @precondition(lambda self: self.answers)
    @rule(data=st.data())
    def an_answer_reaches_the_client(self, data: st.DataObject) -> None:
        self._answer(data.draw(st.integers(0, len(self.answers) - 1)))

    def _answer(self, index: int) -> None:
        """The producer's handling of an answer (producer.py's and blocking.py's loops)."""
        sent, (verdict, expected) = self.answers.pop(index)
        ticket = sent.ticket
        if self.current.get(ticket.index) is not sent:
            return  # a connection the client left: nobody reads it
        del self.current[ticket.index]
        if verdict != "gap":
            if sent.hole is not None:  # the given-up one is stored: now its own try
                self.numbering.filled(sent.hole)
                self._send(ticket)
                return
            message = self.messages[ticket.index]
            assert message in self.leader.stored, "acknowledged, not stored"
            self.acked.add(message)
            self.numbering.done(ticket, acknowledged=True)
            return
        found = self.numbering.given_up(ticket, expected)
        if found is not None:
            self._send(ticket, found[0])
            return
        self.numbering.rebase(ticket, expected, sent.acked_at_send)
        self.numbering.out_of_turn(ticket)
        self._send(ticket)

    @invariant()
    def nothing_is_stored_twice_and_nothing_acknowledged_is_missing(self) -> None:
        stored = self.leader.stored
        assert len(set(stored)) == len(stored), stored
        assert self.acked <= set(stored)


NumberingAgainstALeader.TestCase.settings = settings(
    max_examples=3000, stateful_step_count=20, deadline=None
)
test_numbering_against_a_leader = NumberingAgainstALeader.TestCase
