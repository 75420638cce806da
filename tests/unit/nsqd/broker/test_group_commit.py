"""Group commit across connections: PUBs handed over in one loop turn share one append, each
publisher gets its own records, or its own copy of the error; a withdrawn one is not stored."""

from __future__ import annotations

import errno
from pathlib import Path

import trio
import trio.testing

from nsqd.broker import (
    Broker,
    BrokerConfig,
    NewRecord,
    Record,
    StorageError,
    new_records,
    open_broker,
    read_records,
)
from nsqd.broker.committing import GroupCommit, own_copy
from nsqd.core.errors import ExitingError, NotEnoughReplicasError

PUBLISHERS = 8


async def _publish_together(
    broker: Broker, bodies: list[bytes], topic: str = "t"
) -> list[list[Record] | BaseException]:
    """Each body from its own task, all handed over in the same turn."""
    results: list[list[Record] | BaseException] = [[] for _ in bodies]

    async def one(i: int, body: bytes) -> None:
        try:
            results[i] = list(await broker.commits.publish(topic, new_records(1, [body]), None))
        except Exception as exc:  # noqa: BLE001 - the test looks at what each one got
            results[i] = exc

    async with trio.open_nursery() as nursery:
        for i, body in enumerate(bodies):
            nursery.start_soon(one, i, body)
    return results


async def test_publishes_of_one_turn_share_one_append(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await trio.testing.wait_all_tasks_blocked()  # the committer is waiting
        broker.publish("t", [NewRecord(1, b"first")])  # offset 0, not handed over
        bodies = [b"m%d" % i for i in range(PUBLISHERS)]
        results = await _publish_together(broker, bodies)
        assert broker.commits.appends == 1
        assert broker.commits.publishes == PUBLISHERS
        # each publisher got exactly its own record (Trio runs a turn's tasks in any order)
        got: dict[int, bytes] = {}
        for body, result in zip(bodies, results, strict=True):
            assert isinstance(result, list)
            (record,) = result
            assert record.body == body
            got[record.offset] = body
        assert sorted(got) == list(range(1, PUBLISHERS + 1))
        stored = await read_records(broker.topics["t"].partitions[0], 0, 100)
        assert [r.body for r in stored] == [b"first", *(got[o] for o in sorted(got))]


async def test_each_turn_is_its_own_append(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await trio.testing.wait_all_tasks_blocked()
        for turn in range(3):
            await _publish_together(broker, [b"a", b"b"])
            assert broker.commits.appends == turn + 1
        assert broker.topics["t"].partitions[0].log.end_offset == 6


async def test_topics_and_partitions_of_one_turn_are_appended_apart(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await trio.testing.wait_all_tasks_blocked()
        async with trio.open_nursery() as nursery:
            for topic in ("a", "b", "a", "b"):
                nursery.start_soon(
                    broker.commits.publish, topic, new_records(1, [topic.encode()]), None
                )
        assert broker.commits.appends == 2
        assert broker.topics["a"].partitions[0].log.end_offset == 2
        assert broker.topics["b"].partitions[0].log.end_offset == 2


async def test_a_failed_append_fails_every_publisher_with_its_own_error(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await trio.testing.wait_all_tasks_blocked()
        broker.publish("t", [NewRecord(1, b"x")])
        broker.exiting = True
        results = await _publish_together(broker, [b"a", b"b", b"c"])
        assert all(isinstance(r, ExitingError) for r in results), results
        assert len({id(r) for r in results}) == 3  # one instance each: one traceback each
        assert broker.commits.appends == 0
        broker.exiting = False
        assert broker.topics["t"].partitions[0].log.end_offset == 1


async def test_a_publisher_cancelled_before_the_commit_is_not_stored(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.publish("t", [NewRecord(1, b"x")])
        kept: list[Record] = []

        async def keep() -> None:
            kept.extend(await broker.commits.publish("t", new_records(1, [b"kept"]), None))

        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as scope:
                nursery.start_soon(keep)
                scope.cancel()  # cancels only what runs inside it: the publish below
                await broker.commits.publish("t", new_records(1, [b"withdrawn"]), None)
        stored = await read_records(broker.topics["t"].partitions[0], 0, 100)
        assert [r.body for r in stored] == [b"x", b"kept"]
        assert [r.body for r in kept] == [b"kept"]


async def test_without_the_committer_a_publish_appends_at_once(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.publish("t", [NewRecord(1, b"x")])
        idle = GroupCommit(broker.publish)  # its run() never started
        with trio.testing.assert_checkpoints():
            (record,) = await idle.publish("t", [NewRecord(1, b"y")], None)
        assert record.offset == 1
        assert idle.appends == 0


async def test_a_storage_failure_reaches_every_publisher_of_the_turn(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        await trio.testing.wait_all_tasks_blocked()
        broker.publish("t", [NewRecord(1, b"x")])
        broker.topics["t"].partitions[0].log.close()  # appending to it now fails
        results = await _publish_together(broker, [b"a", b"b"])
        assert all(isinstance(r, StorageError) for r in results), results
        assert results[0] is not results[1]
        assert str(results[0]) == str(results[1])


def test_a_copy_keeps_what_the_error_reply_is_built_from() -> None:
    disk_full = OSError(errno.ENOSPC, "No space left on device", "/data/t.00000.log")
    disk_full.detail = "seen at append"  # type: ignore[attr-defined]
    for original in (disk_full, ExitingError(), NotEnoughReplicasError("1 cop(ies) in sync")):
        copy = own_copy(original)
        assert type(copy) is type(original)
        assert copy is not original
        assert copy.args == original.args
        assert str(copy) == str(original)
        assert copy.__dict__ == original.__dict__
        assert copy.__cause__ is original
    copied = own_copy(disk_full)
    assert isinstance(copied, OSError)
    assert (copied.errno, copied.strerror, copied.filename) == (
        errno.ENOSPC,
        "No space left on device",
        "/data/t.00000.log",
    )


async def test_a_hand_over_racing_the_committers_end_is_still_appended(tmp_path: Path) -> None:
    """Handed over after the committer was cancelled but before it ran: committed on its way
    out, not left waiting."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.publish("t", [NewRecord(1, b"x")])
        commits = GroupCommit(broker.publish)
        stop = trio.CancelScope()

        async def committer() -> None:
            with stop:
                await commits.run()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(committer)
            await trio.testing.wait_all_tasks_blocked()
            stop.cancel()  # the committer has not run since: this hand-over is still taken
            with trio.fail_after(5):
                (record,) = await commits.publish("t", new_records(1, [b"late"]), None)
        assert record.offset == 1
        assert commits.appends == 1
