"""nsqd.broker.idempotence: numbered publishes stored once on a leader; a replica knows what
its leader's producers stored, forgets what a truncation took, and a reopened partition knows
what it knew (its checkpoint, then the stamps of the records after it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from nsqd.broker import idempotence
from nsqd.broker.copying import append_from_leader, read_for_follower, truncate_for_leader
from nsqd.broker.partition import Partition
from nsqd.core.partition_state import Placement, Role
from nsqd.core.producers import SequenceError
from nsqd.storage.cache import CacheBudget
from nsqd.storage.log import PartitionLog
from nsqd.storage.record import NewRecord, Record
from nsqd.storage.stamp import header_of, read_stamp

LEADER, FOLLOWER = "a:1", "b:1"
P = 0x1234


def partition(path: Path, role: Role = Role.LEADER, epoch: int = 1) -> Partition:
    log = PartitionLog.open(path, partition=0, cache=CacheBudget(0))
    placement = Placement(role, epoch, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
    return Partition(0, log, path, 0, placement)


def publish(p: Partition, first: int, *bodies: bytes, ext: bytes = b"") -> Sequence[Record] | int:
    def append(entries: Sequence[NewRecord]) -> Sequence[Record]:
        records = p.log.append(entries, 1)
        p.state.appended(p.log.end_offset)
        return records

    entries = [NewRecord(100 + i, body, ext=ext) for i, body in enumerate(bodies)]
    return idempotence.publish_numbered(p, entries, P, first, 1000.0, append)


def bodies(p: Partition) -> list[bytes]:
    return [r.body for r in p.log.read(0, 100)]


def test_a_retry_is_stored_once_and_told_where_the_first_try_is(tmp_path: Path) -> None:
    leader = partition(tmp_path)
    stored = publish(leader, 0, b"a", b"b")
    assert not isinstance(stored, int)
    assert [read_stamp(r.ext) for r in stored] == [(P, 0), (P, 1)]
    assert publish(leader, 0, b"a", b"b") == 1  # the offset of its last message
    assert publish(leader, 1, b"b") == 1
    again = publish(leader, 2, b"c", ext=b'{"k":"v"}')
    assert not isinstance(again, int)
    assert header_of(again[0].ext) == b'{"k":"v"}'  # youzan's header after the stamp
    with pytest.raises(SequenceError, match="expected sequence 3, got 9"):
        publish(leader, 9, b"z")
    assert bodies(leader) == [b"a", b"b", b"c"]


def test_a_replica_knows_its_leaders_producers_and_forgets_what_truncation_took(
    tmp_path: Path,
) -> None:
    leader = partition(tmp_path / "l")
    follower = partition(tmp_path / "f", Role.REPLICA)
    publish(leader, 0, b"a", b"b")
    publish(leader, 2, b"c")
    append_from_leader(follower, 1, read_for_follower(leader, 0, 1 << 20))
    # promoted, the follower tells the retries apart from new numbers as the leader did
    assert publish(follower, 0, b"a", b"b") == 1
    assert publish(follower, 2, b"c") == 2
    truncate_for_leader(follower, 2)  # "c" gone: a new leader never had it
    stored = publish(follower, 2, b"c")
    assert not isinstance(stored, int)
    assert bodies(follower) == [b"a", b"b", b"c"]


def test_a_reopened_partition_knows_its_producers_from_its_checkpoint_and_log(
    tmp_path: Path,
) -> None:
    first = partition(tmp_path)
    publish(first, 0, b"a")
    saved = {idempotence.KEY: idempotence.checkpoint(first)}  # as state.json holds it
    publish(first, 1, b"b", b"c")  # after the checkpoint: read back from the log
    first.log.close()
    again = partition(tmp_path)
    idempotence.restore(again, saved, 1000.0)
    assert publish(again, 0, b"a") == 0
    assert publish(again, 1, b"b", b"c") == 2
    assert bodies(again) == [b"a", b"b", b"c"]
    again.log.close()
    # no saved producer state: a log of the release before (no stamps to look for), which
    # gets one saved before it takes a write; one that has it is left alone
    older = partition(tmp_path)
    idempotence.restore(older, {"topic_start": 0}, 1000.0)
    with pytest.raises(SequenceError, match="unknown here"):
        publish(older, 1, b"b", b"c")
    first_save = idempotence.saved_state({"topic_start": 0}, older)
    assert first_save is not None
    assert first_save["topic_start"] == 0
    assert first_save[idempotence.KEY] == {"end": 3, "rows": []}
    assert idempotence.saved_state(first_save, older) is None
    assert idempotence.saved_state({}, older) is None  # no state.json: new, its records read


def test_a_checkpoint_ahead_of_the_log_forgets_what_the_crash_took(tmp_path: Path) -> None:
    p = partition(tmp_path)
    publish(p, 0, b"a")
    publish(p, 1, b"b")
    saved = {idempotence.KEY: idempotence.checkpoint(p)}
    p.log.truncate(1)  # the tail the crash took before its fsync
    p.log.close()
    again = partition(tmp_path)
    idempotence.restore(again, saved, 1000.0)
    stored = publish(again, 1, b"b")
    assert not isinstance(stored, int)
    assert bodies(again) == [b"a", b"b"]
