"""The cursor operations youzan's HTTP endpoints ask for: finishing a message wherever it is
(``/message/finish``), and confirming or releasing every deferred message at once
(``/channel/emptydelayed``, ``/channel/requeuedelayed``)."""

from __future__ import annotations

from nsqd.core.confirming import (
    confirm_deferred,
    confirm_waiting,
    finish_held,
    is_confirmed,
    release_deferred,
)
from nsqd.core.cursor import PartitionCursor
from nsqd.core.inflight import FlightTimeouts, Message
from tests.unit.nsqd.core.test_cursor import Rec

LOG = [Rec(i) for i in range(10)]


def fetch(offset: int, count: int, _max_bytes: int | None) -> list[Rec]:
    return LOG[offset : offset + count]


def _delivered(count: int, owner: str = "a") -> PartitionCursor:
    cursor = PartitionCursor(0, 0)
    cursor.start_flights(cursor.take(fetch, count, 0, len(LOG)), owner, 100, 0)
    return cursor


def test_finish_held_finishes_for_whoever_holds_it() -> None:
    cursor = _delivered(3, "a")
    assert finish_held(cursor, 1) == ["a"]
    assert 1 not in cursor.in_flight
    assert is_confirmed(cursor, 1)
    assert not is_confirmed(cursor, 0)
    assert finish_held(cursor, 1) == []  # not in flight any more
    assert finish_held(cursor, 7) == []  # never delivered
    assert finish_held(cursor, 0) == ["a"]
    assert cursor.confirmed == 2  # 0 and 1: contiguous


def test_confirm_waiting_takes_a_requeued_or_deferred_message_out() -> None:
    cursor = _delivered(4)
    cursor.requeue(1, "a", 0, 0)  # requeued now
    cursor.requeue(2, "a", 500, 0)  # deferred until 500
    assert confirm_waiting(cursor, 1)
    assert confirm_waiting(cursor, 2)
    assert not cursor.ready
    assert not cursor.deferred
    assert is_confirmed(cursor, 1)
    assert is_confirmed(cursor, 2)
    assert not confirm_waiting(cursor, 3)  # in flight, not waiting
    assert not confirm_waiting(cursor, 8)  # not read yet
    assert [m.offset for m in cursor.take(fetch, 10, 1_000, len(LOG))] == [4, 5, 6, 7, 8, 9]


def test_confirm_offset_skips_a_message_not_read_yet() -> None:
    cursor = PartitionCursor(0, 0)
    cursor.confirm_offset(2)
    cursor.confirm_offset(0)
    assert cursor.confirmed == 1
    assert is_confirmed(cursor, 2)
    assert not is_confirmed(cursor, 1)
    assert [m.offset for m in cursor.take(fetch, 4, 0, len(LOG))] == [1, 3, 4, 5]  # not 0


def test_confirm_waiting_takes_a_timed_out_message_out_from_behind_the_log() -> None:
    cursor = _delivered(2)
    owners, _ = cursor.expire(100, end_offset=6)  # both go behind offsets 2..5
    assert owners == ["a", "a"]
    assert confirm_waiting(cursor, 0)
    got = cursor.take(fetch, 10, 100, 6)
    assert [m.offset for m in got] == [2, 3, 4, 5, 1]
    assert cursor.confirmed == 1


def test_confirm_deferred_confirms_every_deferred_message_and_nothing_else() -> None:
    cursor = _delivered(5)
    for offset, delay in ((0, 300), (1, 100), (3, 200)):
        cursor.requeue(offset, "a", delay, 0)
    cursor.requeue(4, "a", 0, 0)
    assert confirm_deferred(cursor) == 3
    assert not cursor.deferred
    assert cursor.next_deadline() == 100
    assert cursor.confirmed == 2
    assert sorted(cursor.acked) == [3]
    assert [m.offset for m in cursor.take(fetch, 1, 0, len(LOG))] == [4]  # the requeued one
    assert confirm_deferred(cursor) == 0


def test_release_deferred_makes_them_ready_in_due_order_after_the_requeued() -> None:
    cursor = _delivered(4)
    cursor.requeue(0, "a", 300, 0)
    cursor.requeue(1, "a", 100, 0)
    cursor.requeue(2, "a", 0, 0)
    assert release_deferred(cursor) == 2
    assert not cursor.deferred
    assert [m.offset for m in cursor.take(fetch, 3, 0, 4)] == [2, 1, 0]
    assert release_deferred(cursor) == 0


def test_confirm_unsent_then_deferred_release_keep_the_ordered_head() -> None:
    """Ordered: releasing the deferred head makes it deliverable at once."""
    log = [Rec(0, deliver_at_ns=500), Rec(1)]
    cursor = PartitionCursor(0, 0)
    cursor.ordered = True

    def fetch2(o: int, n: int, _b: int | None) -> list[Rec]:
        return log[o : o + n]

    assert cursor.take(fetch2, 5, 0, 2) == []
    release_deferred(cursor)
    assert [m.offset for m in cursor.take(fetch2, 5, 0, 2)] == [0]


def test_flight_timeouts_skip_entries_of_messages_no_longer_in_flight_with_them() -> None:
    timeouts = FlightTimeouts()
    a, b = Message(0, Rec(0)), Message(0, Rec(1))
    a.deadline_ns, b.deadline_ns = 100, 300
    timeouts.add(100, [0, 1])  # a batch
    timeouts.add(300, [1])  # 1 touched to 300
    in_flight = {0: a, 1: b}
    assert timeouts.earliest(in_flight) == 100
    assert timeouts.pop_expired(200, in_flight) == [(100, 0)]
    del in_flight[0]  # timed out
    assert timeouts.earliest(in_flight) == 300
    del in_flight[1]  # FINed
    assert timeouts.earliest(in_flight) is None
