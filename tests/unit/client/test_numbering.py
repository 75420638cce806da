"""pnsq/client/numbering.py: numbers per partition, kept by a publish for its retries; a
refusal out of turn rebases only the oldest publish in flight, and only when no publish was
acknowledged since the refused try was sent (a stale refusal would rebase onto a stored
number); a given-up publish's number is asked for by sending it again, never given to another
publish."""

from __future__ import annotations

from pnsq.client.numbering import Numbering
from protocol.commands import Command, Pub


def make(partition: int | None, number: int | None) -> Command:
    return Pub("t", b"given up", partition, number)


def test_numbers_follow_per_partition_and_a_batch_takes_its_count() -> None:
    numbering = Numbering("writer")
    a, b = numbering.take("t", 0, 3), numbering.take("t", 0, 1)
    other = numbering.take("t", 1, 1)
    assert [numbering.number(x) for x in (a, b, other)] == [0, 3, 0]
    assert numbering.waits(b)
    assert not numbering.waits(a)
    numbering.done(a, acknowledged=True)
    assert not numbering.waits(b)


def test_the_oldest_in_flight_takes_the_number_the_leader_expects() -> None:
    numbering = Numbering()
    given_up = numbering.take("t", 0, 2)  # numbers 0-1, failed for good: never stored
    late = numbering.take("t", 0, 1)
    later = numbering.take("t", 0, 1)
    numbering.done(given_up, acknowledged=False)
    sent_with = numbering.acknowledged(late)
    assert not numbering.rebase(later, 0, numbering.acknowledged(later))  # not the oldest
    assert numbering.rebase(late, 0, sent_with)  # the leader expects 0
    assert (numbering.number(late), numbering.number(later)) == (0, 1)


def test_a_refusal_older_than_an_acknowledgement_does_not_rebase() -> None:
    numbering = Numbering()
    first, second = numbering.take("t", 0, 1), numbering.take("t", 0, 1)
    sent_with = numbering.acknowledged(second)  # second sent while first was in flight ...
    numbering.done(first, acknowledged=True)  # ... first stored and acknowledged meanwhile
    # the refusal of second ("expected 0"), written before first was stored, arrives now:
    # rebasing would give second the number first holds, and the leader would call it a
    # duplicate
    assert not numbering.rebase(second, 0, sent_with)
    assert numbering.number(second) == 1


def test_a_producer_is_named_once_uniquely_unless_named() -> None:
    assert Numbering("spark-q1-b7-p3").name == "spark-q1-b7-p3"
    assert Numbering().name != Numbering().name


def test_after_a_refusal_the_publishes_in_flight_go_again_in_order_without_waiting() -> None:
    numbering = Numbering()
    tickets = [numbering.take("t", 0, 1) for _ in range(4)]
    assert all(numbering.may_send(t) for t in tickets)  # in the first go: as they come
    numbering.out_of_turn(tickets[2])  # refused: the oldest in flight goes first again
    assert [numbering.may_send(t) for t in tickets] == [True, False, False, False]
    numbering.sending(tickets[0])  # queued: the next may follow at once (same connection)
    assert [numbering.may_send(t) for t in tickets] == [True, True, False, False]
    numbering.done(tickets[1], acknowledged=True)  # acknowledged before it went again
    assert numbering.may_send(tickets[2])
    numbering.sending(tickets[2])
    numbering.sending(tickets[3])
    later = numbering.take("t", 0, 1)
    assert numbering.may_send(later)  # the in-flight ones have all gone again


def test_a_given_up_publishs_number_is_filled_by_itself_not_given_to_the_next() -> None:
    numbering = Numbering()
    stored = numbering.take("t", 0, 1)
    numbering.done(stored, acknowledged=True)
    given_up = numbering.take("t", 0, 2)  # numbers 1-2: a try may still reach the leader
    numbering.done(given_up, acknowledged=False, resend=make)
    nxt = numbering.take("t", 0, 1)
    # the leader expects 1: the given-up publish is sent again with its own numbers ...
    assert numbering.given_up(nxt, 1) == (given_up, make)
    assert numbering.given_up(nxt, 2) is None  # (not the first number of a given-up one)
    assert numbering.number(given_up) == 1
    numbering.filled(given_up)
    assert numbering.given_up(nxt, 1) is None
    assert numbering.number(nxt) == 3  # ... and the next one keeps its own
    # a given-up publish is forgotten once a later one is acknowledged (the leader had it)
    again = numbering.take("t", 0, 1)
    numbering.done(again, acknowledged=False, resend=make)
    last = numbering.take("t", 0, 1)
    numbering.done(nxt, acknowledged=True)
    assert numbering.given_up(last, 4) == (again, make)  # acknowledged nxt came before it
    numbering.done(last, acknowledged=True)
    probe = numbering.take("t", 0, 1)
    assert numbering.given_up(probe, 4) is None


def test_a_refusal_older_than_the_ack_of_a_given_up_publish_sent_again_does_not_rebase() -> None:
    """Two publishes refused for a given-up one's number: the first sends it again (stored,
    acknowledged); the second's refusal, sent before that, must not renumber it onto the number
    just stored (it would be answered DUPLICATE and never stored)."""
    numbering = Numbering()
    given_up = numbering.take("t", 0, 1)  # number 0
    numbering.done(given_up, acknowledged=False, resend=make)
    first, second = numbering.take("t", 0, 1), numbering.take("t", 0, 1)
    numbering.done(first, acknowledged=False, resend=make)  # (its own tries spent too)
    sent_with = numbering.acknowledged(second)
    assert numbering.given_up(second, 0) == (given_up, make)
    numbering.filled(given_up)  # sent again by another publish, and acknowledged
    assert numbering.given_up(second, 0) is None
    assert not numbering.rebase(second, 0, sent_with)  # the refusal is older than that ack
    assert numbering.number(second) == 2
