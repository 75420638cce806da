"""nsqd/core/producers.py: a producer's retries are told duplicates, its next numbers append,
gaps and overlaps are refused; the state follows truncation, expiry and a snapshot."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nsqd.core.producers import RECENT, Producers, Refusal, SequenceError, Verdict

P = 0xABCDEF


def test_a_new_producer_appends_from_0_then_only_the_next() -> None:
    producers = Producers(ttl=60.0, limit=10)
    with pytest.raises(SequenceError, match=r"unknown here .* start at 0, got 7") as unknown:
        producers.check(P, 7, 3, 0.0)  # a retry of 0 may still be on its way
    assert (unknown.value.refusal, unknown.value.expected) == (Refusal.UNKNOWN, 0)
    assert producers.check(P, 0, 7, 0.0) == (Verdict.APPEND, 0)
    producers.record(P, 0, 7, offset=99, now=0.0)
    producers.record(P, 7, 3, offset=102, now=0.0)
    assert producers.check(P, 10, 1, 0.0) == (Verdict.APPEND, 0)
    assert producers.check(P, 7, 3, 0.0) == (Verdict.DUPLICATE, 102)
    assert producers.check(P, 8, 1, 0.0) == (Verdict.DUPLICATE, 102)  # part of a stored batch
    with pytest.raises(SequenceError, match="expected sequence 10, got 12") as gap:
        producers.check(P, 12, 1, 0.0)
    assert (gap.value.refusal, gap.value.expected) == (Refusal.GAP, 10)
    assert producers.check(P, 8, 4, 0.0) == (Verdict.APPEND, 2)  # 8, 9 stored: 10, 11 new
    assert len(producers) == 1


def test_a_retry_older_than_the_recent_publishes_waits_for_the_oldest_kept() -> None:
    producers = Producers(ttl=60.0, limit=10)
    for number in range(RECENT + 3):
        producers.record(P, number, 1, offset=number * 10, now=0.0)
    oldest_kept = (3) * 10  # numbers 3..7 are the recent ones
    assert producers.check(P, 0, 1, 0.0) == (Verdict.DUPLICATE, oldest_kept)
    assert producers.check(P, 5, 1, 0.0) == (Verdict.DUPLICATE, 50)


def test_truncation_forgets_what_the_log_lost() -> None:
    producers = Producers(ttl=60.0, limit=10)
    producers.record(P, 0, 2, offset=1, now=0.0)
    producers.record(P, 2, 2, offset=3, now=0.0)
    producers.record(2, 0, 1, offset=4, now=0.0)
    producers.truncate(3)  # offsets 3 and 4 gone
    assert producers.check(P, 2, 2, 0.0) == (Verdict.APPEND, 0)  # stored no more: again
    assert producers.check(P, 0, 2, 0.0) == (Verdict.DUPLICATE, 1)
    assert producers.check(2, 0, 1, 0.0) == (Verdict.APPEND, 0)  # forgotten altogether
    with pytest.raises(SequenceError):
        producers.check(2, 1, 1, 0.0)  # ... so only from 0
    assert len(producers) == 1


def test_idle_producers_expire_and_the_least_recent_goes_past_the_limit() -> None:
    producers = Producers(ttl=60.0, limit=2)
    producers.record(1, 0, 1, offset=0, now=0.0)
    producers.record(2, 0, 1, offset=1, now=30.0)
    assert producers.check(1, 0, 1, now=40.0)[0] is Verdict.DUPLICATE  # touches 1
    producers.record(3, 0, 1, offset=2, now=41.0)  # over the limit: 2 is the least recent
    assert [row[0] for row in producers.snapshot()] == [1, 3]
    assert producers.expire(now=100.0) == 1  # 1 idle since 40
    assert [row[0] for row in producers.snapshot()] == [3]


def test_a_snapshot_restores_the_same_verdicts() -> None:
    producers = Producers(ttl=60.0, limit=10)
    producers.record(P, 0, 4, offset=9, now=1.0)
    producers.record(5, 10, 1, offset=10, now=2.0)  # read back from a log: any number
    again = Producers(ttl=60.0, limit=10)
    again.restore(producers.snapshot())
    assert again.snapshot() == producers.snapshot()
    assert again.check(P, 0, 4, 3.0) == (Verdict.DUPLICATE, 9)
    assert again.check(5, 11, 1, 3.0) == (Verdict.APPEND, 0)


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=30),
    retries=st.lists(st.integers(0, 29), max_size=30),
    rebuild=st.booleans(),
)
def test_every_number_is_stored_once_whatever_is_retried(
    sizes: list[int], retries: list[int], rebuild: bool
) -> None:
    """A producer publishes batches; after each, some earlier batch is sent again. The log
    (offset -> number) holds each number once, in order, and every retry waits for an offset
    at or after the retried batch's last message."""
    producers = Producers(ttl=1e9, limit=100)
    log: list[int] = []
    sent: list[tuple[int, int]] = []
    number = 0  # a new producer starts at 0
    for index, size in enumerate(sizes):
        assert producers.check(P, number, size, 0.0) == (Verdict.APPEND, 0)
        log.extend(range(number, number + size))
        producers.record(P, number, size, offset=len(log) - 1, now=0.0)
        sent.append((number, size))
        number += size
        if rebuild:  # as after a restart: the state read back from the log, record by record
            producers = Producers(ttl=1e9, limit=100)
            for offset, stored in enumerate(log):
                producers.record(P, stored, 1, offset=offset, now=0.0)
        if index < len(retries) and retries[index] < len(sent):
            first, count = sent[retries[index]]
            verdict, wait = producers.check(P, first, count, 0.0)
            assert verdict is Verdict.DUPLICATE
            assert wait >= log.index(first + count - 1)
    assert log == list(range(number))


@given(
    published=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), max_size=12),
    producer=st.integers(0, 3),
    first=st.integers(0, 40),
    count=st.integers(1, 3),
)
def test_admit_is_checks_append_of_everything(
    published: list[tuple[int, int]], producer: int, first: int, count: int
) -> None:
    """The publish reactor's quick question agrees with the full verdict: a publish is admitted
    exactly when it would be appended whole (producer 3 is never known); the same producer's
    second publish in one turn never is."""
    producers = Producers(ttl=60, limit=100)
    following: dict[int, int] = {}  # each producer's next number
    offset = 0
    for who, size in published:
        start = following.get(who, 0)
        offset += size
        producers.record(who, start, size, offset - 1, 1.0)
        following[who] = start + size
    try:
        whole = producers.check(producer, first, count, 2.0) == (Verdict.APPEND, 0)
    except SequenceError:
        whole = False
    assert producers.admit([None, (producer, first), None]) == [True, whole, True]
    assert producers.admit([(producer, first), (producer, first + count)]) == [whole, False]
    assert whole == (first == following.get(producer, 0))


@given(
    before=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(1, 3)), max_size=8),
    turn=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(1, 3)), max_size=8),
)
def test_record_all_is_record_of_each(
    before: list[tuple[int, int, int]], turn: list[tuple[int, int, int]]
) -> None:
    """A turn's publishes recorded at once leave the state, and every later verdict, as a
    :meth:`Producers.record` of each would: known producers that follow, new ones, and ones
    that start over (limit 3: the least recent go)."""
    one_by_one, at_once = Producers(ttl=60, limit=3), Producers(ttl=60, limit=3)
    offset = 0
    for producer, first, count in before:
        offset += count
        for producers in (one_by_one, at_once):
            producers.record(producer, first, count, offset - 1, 1.0)
    appended = []
    for producer, first, count in turn:
        offset += count
        appended.append((producer, first, count, offset - 1))
    for producer, first, count, last in appended:
        one_by_one.record(producer, first, count, last, 2.0)
    at_once.record_all(appended, 2.0)
    assert at_once.snapshot() == one_by_one.snapshot()
