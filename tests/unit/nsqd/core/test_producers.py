"""nsqd/core/producers.py: a producer's retries are told duplicates, its next numbers append,
gaps and overlaps are refused; the state follows truncation, expiry and a snapshot."""

from __future__ import annotations

from dataclasses import dataclass

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


def test_producers_pushed_out_within_the_ttl_are_counted() -> None:
    """Past the limit the least recent producer goes, also one seen within the ttl (each HTTP
    Idempotency-Key is a producer): a retry of its publish is then appended again, so such
    evictions are counted (the broker logs them, /stats shows them); idle ones are not."""
    producers = Producers(ttl=100.0, limit=2)
    producers.record(1, 0, 1, 0, now=0.0)
    producers.record(2, 0, 1, 1, now=1.0)
    producers.record(3, 0, 1, 2, now=2.0)  # 1 goes, seen 2 s before
    assert (producers.evicted_early, producers.last_window) == (1, 2.0)
    assert producers.check(1, 0, 1, now=3.0) == (Verdict.APPEND, 0)  # its retry: new again
    producers.record(4, 0, 1, 3, now=500.0)  # 2 goes, idle past the ttl: not counted
    assert producers.evicted_early == 1


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


@dataclass
class _Run:
    bodies: list[bytes]


@given(
    before=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(1, 3)), max_size=8),
    turn=st.lists(
        st.one_of(
            st.integers(1, 3),  # a plain run of that many messages
            st.tuples(st.integers(0, 4), st.integers(0, 8), st.integers(1, 3)),
        ),
        max_size=8,
    ),
)
def test_take_is_check_then_record_of_each_in_turn(
    before: list[tuple[int, int, int]], turn: list[int | tuple[int, int, int]]
) -> None:
    """The publish reactor's turn judged and recorded in one pass leaves the state, the runs
    taken and their offsets as judging each run in turn would: :meth:`Producers.check`, and
    a :meth:`Producers.record` of each one it appends whole (a producer's second run in the
    turn follows its first; a retry, a gap, an unknown producer past 0 or a partly stored run
    is left alone, unrecorded)."""
    one_by_one, at_once = Producers(ttl=60, limit=10), Producers(ttl=60, limit=10)
    offset = 0
    for producer, first, count in before:
        offset += count
        for producers in (one_by_one, at_once):
            producers.record(producer, first, count, offset - 1, 1.0)
    runs: list[tuple[_Run, tuple[int, int] | None]] = []
    expected_taken: list[bool] = []
    expected_publishes = []
    at = offset - 1  # the last message's offset of the runs taken so far
    for run in turn:
        if isinstance(run, int):
            runs.append((_Run([b"m"] * run), None))
            expected_taken.append(True)
            at += run
            continue
        producer, first, count = run
        runs.append((_Run([b"m"] * count), (producer, first)))
        try:
            whole = one_by_one.check(producer, first, count, 2.0) == (Verdict.APPEND, 0)
        except SequenceError:
            whole = False
        expected_taken.append(whole)
        if whole:
            at += count
            one_by_one.record(producer, first, count, at, 2.0)
            expected_publishes.append((producer, first, count))
    taken, publishes = at_once.take(runs, offset, 2.0)
    assert taken == (None if all(expected_taken) else expected_taken)
    assert publishes == expected_publishes
    # the same producers and publishes (a duplicate's check made its producer the most recent:
    # in the reactor, its own task's check does that next)
    assert sorted((p, r) for p, _, r in at_once.snapshot()) == sorted(
        (p, r) for p, _, r in one_by_one.snapshot()
    )


@given(
    before=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(1, 3)), max_size=8),
    turn=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8), st.integers(1, 3)), max_size=8),
)
def test_a_turn_taken_then_truncated_at_its_start_is_undone(
    before: list[tuple[int, int, int]], turn: list[tuple[int, int, int]]
) -> None:
    """A turn whose append failed (:meth:`Producers.take` records before the append) is undone
    by truncating at the offset it started from: every later verdict is as if it never was
    (limit 10: none forgotten for room)."""
    producers, untouched = Producers(ttl=60, limit=10), Producers(ttl=60, limit=10)
    offset = 0
    for producer, first, count in before:
        offset += count
        for each in (producers, untouched):
            each.record(producer, first, count, offset - 1, 1.0)
    producers.take([(_Run([b"m"] * c), (p, f)) for p, f, c in turn], offset, 2.0)
    producers.truncate(offset)
    for producer in range(5):
        for first in range(12):
            assert verdict(producers, producer, first) == verdict(untouched, producer, first)


def verdict(producers: Producers, producer: int, first: int) -> object:
    try:
        return producers.check(producer, first, 1, 3.0)
    except SequenceError as exc:
        return exc.refusal, exc.expected
