"""The pure lease table of HTTP consume (nsqd/core/leases.py)."""

from __future__ import annotations

import pytest

from nsqd.core.leases import (
    REMEMBERED_ENDED,
    Lease,
    LeaseEndedError,
    LeaseState,
    LeaseTable,
    UnknownTokenError,
)


def _lease(
    token: str = "t", partition: int = 0, deadline: int = 100, *, exclusive: bool = True
) -> Lease:
    return Lease(token, "topic", "channel", partition, deadline, exclusive=exclusive)


def test_an_open_exclusive_lease_locks_its_partition_until_claimed() -> None:
    table = LeaseTable()
    table.add(_lease())
    assert table.locked("topic", "channel", 0, now_ns=10)
    assert table.locked("topic", "channel", 0, now_ns=10, exclusive=True)
    assert not table.locked("topic", "channel", 1, now_ns=10)
    assert not table.locked("topic", "other", 0, now_ns=10)
    lease = table.claim("t", now_ns=10)
    assert lease.token == "t"
    assert not table.locked("topic", "channel", 0, now_ns=10)
    with pytest.raises(LeaseEndedError):
        table.claim("t", now_ns=10)  # acked or nacked once only


def test_a_lease_past_its_deadline_is_expired_and_unlocks() -> None:
    table = LeaseTable()
    table.add(_lease(deadline=100))
    assert not table.locked("topic", "channel", 0, now_ns=100)
    with pytest.raises(LeaseEndedError):
        table.claim("t", now_ns=100)


def test_a_timed_out_message_ends_the_lease_before_its_deadline() -> None:
    table = LeaseTable()
    lease = _lease(deadline=100)
    table.add(lease)
    lease.message_timed_out()  # the channel emptied or moved by setoffset
    assert lease.state is LeaseState.EXPIRED
    assert not table.locked("topic", "channel", 0, now_ns=10)
    with pytest.raises(LeaseEndedError):
        table.claim("t", now_ns=10)


def test_unknown_tokens_are_invalid_and_ended_ones_are_remembered_boundedly() -> None:
    table = LeaseTable()
    with pytest.raises(UnknownTokenError):
        table.claim("never", now_ns=0)
    for i in range(REMEMBERED_ENDED + 1):
        table.add(_lease(f"t{i}", deadline=10))
    table.sweep(now_ns=10)
    assert len(table) == 0
    with pytest.raises(LeaseEndedError):
        table.claim(f"t{REMEMBERED_ENDED}", now_ns=10)
    with pytest.raises(UnknownTokenError):
        table.claim("t0", now_ns=10)  # forgotten: the oldest of too many


def test_a_newer_lease_of_the_partition_is_not_unlocked_by_the_older_ending() -> None:
    table = LeaseTable()
    old = _lease("old", deadline=50)
    table.add(old)
    newer = _lease("new", deadline=500)
    table.add(newer)  # the old one timed out and its messages went to a new batch
    with pytest.raises(LeaseEndedError):
        table.claim("old", now_ns=60)
    assert table.locked("topic", "channel", 0, now_ns=60)


def test_a_partition_holds_several_shared_leases_and_each_ends_on_its_own() -> None:
    table = LeaseTable()
    leases = [_lease(f"s{i}", deadline=100 + i * 100, exclusive=False) for i in range(3)]
    for lease in leases:
        assert not table.locked("topic", "channel", 0, now_ns=10)  # room for one more
        table.add(lease)
    assert table.open_count("topic", "channel", 0) == 3
    # an exclusive lease waits until the partition has no open lease at all
    assert table.locked("topic", "channel", 0, now_ns=10, exclusive=True)
    assert table.claim("s1", now_ns=10) is leases[1]  # acked while the others are out
    assert table.open_count("topic", "channel", 0) == 2
    with pytest.raises(LeaseEndedError):
        table.claim("s1", now_ns=10)
    # s0's deadline passes: it ends alone, s2 stays open
    assert not table.locked("topic", "channel", 0, now_ns=150)
    assert table.open_count("topic", "channel", 0) == 1
    with pytest.raises(LeaseEndedError):
        table.claim("s0", now_ns=150)
    assert table.claim("s2", now_ns=150) is leases[2]
    assert not table.locked("topic", "channel", 0, now_ns=150, exclusive=True)
    assert table.open_count("topic", "channel", 0) == 0


def test_an_exclusive_lease_keeps_shared_ones_out_and_a_timed_out_message_ends_one() -> None:
    table = LeaseTable()
    shared = _lease("s", exclusive=False)
    table.add(shared)
    shared.message_timed_out()  # the channel emptied or moved by setoffset
    assert not table.locked("topic", "channel", 0, now_ns=10, exclusive=True)
    table.add(_lease("x"))
    assert table.locked("topic", "channel", 0, now_ns=10)  # a shared one waits too
    assert not table.locked("topic", "channel", 1, now_ns=10)
    with pytest.raises(LeaseEndedError):
        table.claim("s", now_ns=10)
    table.claim("x", now_ns=10)
    assert not table.locked("topic", "channel", 0, now_ns=10)
