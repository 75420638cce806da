"""nsqd.broker.idempotence: numbered publishes stored once on a leader; a replica knows what
its leader's producers stored, forgets what a truncation took, and a reopened partition knows
what it knew (its checkpoint, then the stamps of the records after it)."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

import pytest

from nsqd.broker import BrokerConfig, idempotence, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.broker.copying import append_from_leader, read_for_follower, truncate_for_leader
from nsqd.broker.partition import Partition
from nsqd.core.errors import NotWritableError
from nsqd.core.partition_state import Placement, Role
from nsqd.core.producers import SequenceError, Verdict
from nsqd.storage.batch import BodyBatch
from nsqd.storage.cache import CacheBudget
from nsqd.storage.errors import StorageError
from nsqd.storage.log import PartitionLog
from nsqd.storage.record import NewRecord, Record
from nsqd.storage.segment import Segment
from nsqd.storage.stamp import header_of, read_stamp
from protocol.message import partition_of

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
    assert first_save[idempotence.KEY] == {"end": 3, "rows": [], "epoch": 1}
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


def test_a_checkpoint_of_a_log_since_cut_and_rewritten_is_not_trusted(tmp_path: Path) -> None:
    """A replica's checkpoint, then its log cut back to a new leader's and written again past
    the cut: the checkpoint's producer at the rewritten offset is not taken for stored."""
    for extra in (0, 2):  # rewritten up to the checkpoint's end, and past it
        path = tmp_path / str(extra)
        p = partition(path)
        publish(p, 0, b"a")
        publish(p, 1, b"b")  # offset 1, epoch 1: never reached the new leader
        saved = {idempotence.KEY: idempotence.checkpoint(p)}
        truncate_for_leader(p, 1)
        p.log.append([NewRecord(200 + i, b"new") for i in range(1 + extra)], 2)
        p.log.close()
        again = partition(path, epoch=2)
        idempotence.restore(again, saved, 1000.0)
        stored = publish(again, 1, b"b")  # the retry is stored, not acknowledged as a duplicate
        assert not isinstance(stored, int)
        assert bodies(again) == [b"a"] + [b"new"] * (1 + extra) + [b"b"]
        assert publish(again, 0, b"a") == 0  # what the log holds is still known (read back)
        again.log.close()


def test_a_change_of_the_producer_state_alone_is_saved_once_a_second(tmp_path: Path) -> None:
    p = partition(tmp_path)
    assert not idempotence.checkpoint_due(p, 0.0)
    publish(p, 0, b"a")
    assert idempotence.checkpoint_due(p, 0.0)  # never saved
    idempotence.saved(p, 0.0)
    assert not idempotence.checkpoint_due(p, 5.0)  # nothing changed since
    publish(p, 1, b"b")
    assert not idempotence.checkpoint_due(p, 0.5)
    assert idempotence.checkpoint_due(p, idempotence.CHECKPOINT_INTERVAL)


def test_runs_appended_together_take_only_numbers_that_come_next(tmp_path: Path) -> None:
    """The publish reactor's append of several publishers' runs: plain ones and numbered ones
    that come next (a producer's second run after its first too) go in one batch, stamped; a
    retry, an unknown producer's number and a gap are left to be judged alone."""
    p = partition(tmp_path)
    publish(p, 0, b"a")  # producer P stored 0
    q = 0x99
    runs: list[idempotence.Run] = [
        (BodyBatch(1, [b"plain"]), None),
        (BodyBatch(2, [b"b", b"c"]), (P, 1)),  # comes next
        (BodyBatch(3, [b"d"]), (P, 3)),  # P's second run: after its first
        (BodyBatch(4, [b"c"]), (P, 2)),  # a retry of part of the first: alone
        (BodyBatch(5, [b"q0"]), (q, 0)),  # a new producer starts at 0
        (BodyBatch(6, [b"again"]), (q + 1, 7)),  # unknown, not at 0
        (BodyBatch(7, [b"q9"]), (q, 9)),  # a gap
    ]
    appended: list[BodyBatch] = []

    def append(batch: BodyBatch) -> Sequence[Record]:
        appended.append(batch)
        return p.log.append(batch, 1)

    taken = idempotence.publish_runs(p, runs, 1000.0, append)
    assert taken == [True, True, True, False, True, False, False]
    assert len(appended) == 1  # the taken ones, as one batch
    assert [(r.body, read_stamp(r.ext)) for r in p.log.read(0, 10)] == [
        (b"a", (P, 0)),
        (b"plain", None),
        (b"b", (P, 1)),
        (b"c", (P, 2)),
        (b"d", (P, 3)),
        (b"q0", (q, 0)),
    ]
    assert publish(p, 1, b"b", b"c") == 3  # each known as stored, at its offset
    assert publish(p, 3, b"d") == 4
    assert idempotence.publish_runs(p, [(BodyBatch(8, [b"e"]), (P, 4))], 1001.0, append) is None
    assert publish(p, 4, b"e") == 6  # recorded at its offset


def test_a_turn_whose_append_fails_is_not_taken_as_stored(tmp_path: Path) -> None:
    """The reactor's runs are recorded as appended before the append: one that fails before
    it stores anything (no room for the first record) leaves each producer where it was, so
    its retry is appended, not told a duplicate."""
    p = partition(tmp_path)
    publish(p, 0, b"a")

    def refused(batch: BodyBatch) -> Sequence[Record]:
        raise StorageError("no room")

    runs: list[idempotence.Run] = [
        (BodyBatch(1, [b"b"]), (P, 1)),
        (BodyBatch(2, [b"n0"]), (0x99, 0)),
    ]
    with pytest.raises(StorageError):
        idempotence.publish_runs(p, runs, 1000.0, refused)
    assert bodies(p) == [b"a"]
    assert p.producers.check(P, 1, 1, 1001.0) == (Verdict.APPEND, 0)
    assert p.producers.check(0x99, 0, 1, 1001.0) == (Verdict.APPEND, 0)
    with pytest.raises(SequenceError):
        p.producers.check(0x99, 1, 1, 1001.0)  # forgotten: it never stored anything
    assert publish(p, 1, b"b") != 1  # appended now, not a duplicate of offset 1
    assert bodies(p) == [b"a", b"b"]


def test_numbered_runs_appended_together_read_back_stamped_from_cache_and_disk(
    tmp_path: Path,
) -> None:
    """Runs all numbered (their stamps gathered as numbers, packed with each record's header)
    read back with each record's own stamp: from the tail cache and from the segment."""
    log = PartitionLog.open(tmp_path, partition=0, cache=CacheBudget(1 << 20))
    runs: list[idempotence.Run] = [
        (BodyBatch(1, [b"a", b"b"], 0, [1, 2]), (P, 0)),
        (BodyBatch(3, [b"c"], 0, [3]), (0x99, 5)),
    ]
    log.append(idempotence.joined(runs, [(P, 0, 2), (0x99, 5, 1)]), 1)
    log.append(idempotence.joined([(BodyBatch(4, [b"d"], 0, [4]), (P, 2))], [(P, 2, 1)]), 1)
    expected = [(b"a", (P, 0)), (b"b", (P, 1)), (b"c", (0x99, 5)), (b"d", (P, 2))]
    assert [(r.body, read_stamp(r.ext)) for r in log.read(0, 10)] == expected  # cached
    log.close()
    reopened = PartitionLog.open(tmp_path, partition=0, cache=CacheBudget(0))
    assert [(r.body, read_stamp(r.ext)) for r in reopened.read(0, 10)] == expected
    reopened.close()


@pytest.mark.parametrize("path", ["alone", "reactor"])
def test_a_numbered_append_that_fails_half_written_is_not_stored_twice_by_its_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A batch crossing into a new segment the disk has no room for keeps its first part: a
    retry of the publish stores only the rest (each number once)."""
    log = PartitionLog.open(tmp_path, partition=0, cache=CacheBudget(0), max_bytes_per_file=400)
    placement = Placement(Role.LEADER, 1, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
    p = Partition(0, log, tmp_path, 0, placement)
    bodies_ = [b"m%d" % i + b"." * 100 for i in range(6)]  # ~3 a segment

    def no_room(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def append(entries: Sequence[NewRecord]) -> Sequence[Record]:
        return p.log.append(entries, 1)

    with monkeypatch.context() as patched:
        patched.setattr(Segment, "create", no_room)
        batch = BodyBatch(1, list(bodies_))
        if path == "alone":
            with pytest.raises(StorageError):
                idempotence.publish_numbered(p, batch, P, 0, 1000.0, append)
        else:
            with pytest.raises(StorageError):
                idempotence.publish_runs(p, [(batch, (P, 0))], 1000.0, append)
    kept = p.log.end_offset
    assert 0 < kept < len(bodies_)  # the first part stored
    idempotence.publish_numbered(p, BodyBatch(2, bodies_), P, 0, 1001.0, append)  # the retry
    assert bodies(p) == bodies_
    assert [read_stamp(r.ext) for r in p.log.read(0, 10)] == [(P, n) for n in range(6)]


async def test_a_turns_runs_are_judged_and_appended_in_one_partition(tmp_path: Path) -> None:
    """The broker picks the partition once: the runs go to the partition whose producer state
    admitted them, even for a caller that named none (round-robin: each pick differs)."""
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        broker.get_or_create_topic("t", 2)
        for producer in range(P, P + 4):
            batch = BodyBatch(clock.now_ns(), [b"m"])
            taken, records = broker.publish_runs("t", None, [(batch, (producer, 0))])
            assert taken is None  # all of them
            number = partition_of(records[0].internal_id)
            judged = broker.get_topic("t").partition(number).producers
            assert judged.check(producer, 0, 1, 0.0) == (Verdict.DUPLICATE, records[0].offset)


async def test_past_the_disk_mark_no_publish_makes_a_topic_and_a_stored_one_is_acknowledged(
    tmp_path: Path,
) -> None:
    """A full disk refuses every kind of publish to a new topic before the topic is made (none
    is created, plain or numbered); a numbered retry of messages stored before the disk filled
    stores nothing, and is acknowledged again."""
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        stored = broker.publish_numbered("t", BodyBatch(clock.now_ns(), [b"m"]), 0, P, 0)
        assert not isinstance(stored, int)
        broker.disk.out_of_space(OSError(errno.ENOSPC, "No space left on device"))
        batch = BodyBatch(clock.now_ns(), [b"n"])
        attempts = [
            lambda: broker.publish("new", batch),
            lambda: broker.publish_numbered("new", batch, 0, P, 0),
            lambda: broker.publish_runs("new", 0, [(batch, (P, 0))]),
            lambda: broker.publish_numbered("t", batch, 0, P, 1),  # new numbers: refused
        ]
        for attempt in attempts:
            with pytest.raises(NotWritableError):
                attempt()
        assert broker.find_topic("new") is None
        assert broker.publish_numbered("t", BodyBatch(clock.now_ns(), [b"m"]), 0, P, 0) == 0
