"""nsqd.broker.copying: records cross from a leader's log to a follower's, unchanged; a
follower cuts its log back to its new leader's history; publishers wait for the in-sync set."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import BrokerConfig, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.broker.copying import (
    Batch,
    ReplicaStreamError,
    append_from_leader,
    end_for_epoch,
    held_regions,
    last_epoch,
    mirror_channel,
    read_for_follower,
    read_for_repair,
    repair_from_replica,
    truncate_for_leader,
)
from nsqd.broker.partition import Partition
from nsqd.broker.read_guard import DamagedTail
from nsqd.broker.waiters import BEAT_TICKS, STREAM_TICK, ReplicationWaiters
from nsqd.core.errors import NotLeaderError
from nsqd.core.partition_state import Placement, Role
from nsqd.storage.cache import CacheBudget
from nsqd.storage.errors import RepairPending
from nsqd.storage.log import PartitionLog
from nsqd.storage.record import NewRecord

LEADER, FOLLOWER = "a:1", "b:1"


def partition(path: Path, role: Role, epoch: int = 1) -> Partition:
    log = PartitionLog.open(path, partition=3, cache=CacheBudget(0))  # reads: from disk
    placement = Placement(role, epoch, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
    return Partition(3, log, path, 0, placement)


def publish(p: Partition, *bodies: bytes, epoch: int = 1, ts: int = 100) -> None:
    entries = [
        NewRecord(ts + i, b, trace_id=7, ext=b"x" * i, epoch=epoch) for i, b in enumerate(bodies)
    ]
    p.log.append(entries)
    p.state.appended(p.log.end_offset)


def test_a_follower_holds_exactly_the_leaders_records(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    follower = partition(tmp_path / "f", Role.REPLICA)
    publish(leader, b"one", b"two", b"three")
    batch = read_for_follower(leader, 0, 1 << 20)
    assert (batch.base_offset, batch.count) == (0, 3)
    assert append_from_leader(follower, 1, batch) == 3
    assert follower.log.read(0, 10) == leader.log.read(0, 10)  # ids, times, ext, epoch too
    assert follower.state.log_end == 3
    assert follower.state.high_watermark == 0  # a follower learns it from the leader
    assert read_for_follower(leader, 3, 1 << 20).count == 0


def test_a_batch_must_start_at_the_followers_end(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    follower = partition(tmp_path / "f", Role.REPLICA)
    publish(leader, b"one", b"two")
    with pytest.raises(ReplicaStreamError, match="log ends at 0"):
        append_from_leader(follower, 1, read_for_follower(leader, 1, 1 << 20))
    assert follower.log.end_offset == 0


def test_damaged_or_miscounted_or_newer_epoch_batches_are_refused(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    follower = partition(tmp_path / "f", Role.REPLICA)
    publish(leader, b"one", b"two", epoch=2)
    good = read_for_follower(leader, 0, 1 << 20)
    flipped = bytearray(good.data)
    flipped[-1] ^= 1
    with pytest.raises(ReplicaStreamError, match="damaged"):
        append_from_leader(follower, 2, Batch(0, 2, bytes(flipped)))
    with pytest.raises(ReplicaStreamError, match="cut short"):
        append_from_leader(follower, 2, Batch(0, 2, good.data[:-3]))
    with pytest.raises(ReplicaStreamError, match="announced"):
        append_from_leader(follower, 2, Batch(0, 3, good.data))
    with pytest.raises(ReplicaStreamError, match="epoch 2 from epoch 1"):
        append_from_leader(follower, 1, good)
    assert follower.log.end_offset == 0  # nothing of a refused batch is stored


def test_a_returning_leader_cuts_back_to_the_new_leaders_history(tmp_path: Path) -> None:
    new_leader = partition(tmp_path / "n", Role.LEADER, epoch=2)
    old_leader = partition(tmp_path / "o", Role.REPLICA, epoch=2)
    publish(new_leader, b"a", b"b", epoch=1)
    publish(old_leader, b"a", b"b", epoch=1)
    publish(old_leader, b"never acknowledged", epoch=1)  # appended, then the node died
    publish(new_leader, b"c", epoch=2)  # the new leader's first record
    assert last_epoch(old_leader) == 1
    cut = end_for_epoch(new_leader, last_epoch(old_leader))
    assert cut == 2
    truncate_for_leader(old_leader, cut)
    assert old_leader.log.end_offset == 2
    append_from_leader(old_leader, 2, read_for_follower(new_leader, cut, 1 << 20))
    assert [r.body for r in old_leader.log.read(0, 10)] == [b"a", b"b", b"c"]


async def test_publishers_wait_for_the_in_sync_follower(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    waiters = ReplicationWaiters()
    publish(leader, b"one", b"two")
    done: list[int] = []

    async def publisher(end: int) -> None:
        await waiters.wait(leader, end, 1)
        done.append(end)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher, 1)
        nursery.start_soon(publisher, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert done == []
        leader.state.follower_acked(FOLLOWER, 1)
        waiters.wake(leader)
        await trio.testing.wait_all_tasks_blocked()
        assert done == [1]
        leader.state.follower_acked(FOLLOWER, 2)
        waiters.wake(leader)
    assert sorted(done) == [1, 2]


async def test_a_publisher_is_not_acknowledged_after_leadership_moved(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    waiters = ReplicationWaiters()
    publish(leader, b"one")
    outcome: list[BaseException] = []

    async def publisher() -> None:
        try:
            await waiters.wait(leader, 1, 1)
        except NotLeaderError as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(publisher)
        await trio.testing.wait_all_tasks_blocked()
        leader.state.apply(Placement(Role.REPLICA, 2, FOLLOWER, (LEADER,), (FOLLOWER,)))
        waiters.wake(leader)
    assert len(outcome) == 1


@pytest.mark.parametrize(
    "placement",
    [
        # handed over: a replica now, of a new leader alone in its in-sync set
        Placement(Role.REPLICA, 2, FOLLOWER, (LEADER,), (FOLLOWER,)),
        # still leading, but under a newer epoch: the records' epoch is history now
        Placement(Role.LEADER, 2, LEADER, (FOLLOWER,), (LEADER,)),
    ],
)
async def test_a_publish_appended_before_leadership_moved_is_not_acknowledged_after(
    tmp_path: Path, placement: Placement
) -> None:
    """The move came between the append and the wait (the group commit hands the records
    back a scheduling round later): the wait must not see the new placement's empty set of
    followers as "nothing to wait for"."""
    leader = partition(tmp_path / "l", Role.LEADER)
    waiters = ReplicationWaiters()
    publish(leader, b"one")
    leader.state.apply(placement)
    with pytest.raises(NotLeaderError):
        await waiters.wait(leader, 1, 1)


async def test_a_leader_alone_in_sync_acknowledges_at_once(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    leader.state.apply(Placement(Role.LEADER, 1, LEADER, (FOLLOWER,), (LEADER,)))
    publish(leader, b"one")
    with trio.testing.assert_no_checkpoints():
        await ReplicationWaiters().wait(leader, 1, 1)


def test_a_followers_copy_is_the_leaders_bytes_and_survives_a_reopen(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    follower = partition(tmp_path / "f", Role.REPLICA)
    for i in range(50):  # many batches: the index gets entries as an append would give
        publish(leader, *[b"m%d-%d" % (i, j) for j in range(20)], ts=1000 * i)
        append_from_leader(follower, 1, read_for_follower(leader, follower.log.end_offset, 1 << 20))
    assert follower.log.end_offset == 1000
    leader_files = sorted(p.name for p in (tmp_path / "l").iterdir() if p.suffix == ".log")
    for name in leader_files:
        assert (tmp_path / "f" / name).read_bytes() == (tmp_path / "l" / name).read_bytes()
    follower.log.close()
    reopened = PartitionLog.open(tmp_path / "f", partition=3)
    assert reopened.end_offset == 1000
    assert reopened.read(517, 3) == leader.log.read(517, 3)
    assert reopened.offset_for_timestamp(25_000) == leader.log.offset_for_timestamp(25_000)


def test_a_batch_that_crosses_the_segment_size_rotates_the_followers_log(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    small = PartitionLog.open(tmp_path / "f", partition=3, max_bytes_per_file=4096)
    follower = Partition(3, small, tmp_path / "f", 0, Placement(Role.REPLICA, 1, LEADER))
    publish(leader, *[b"x" * 300 for _ in range(40)])
    append_from_leader(follower, 1, read_for_follower(leader, 0, 1 << 20))
    assert len(list((tmp_path / "f").glob("*.log"))) > 1
    assert follower.log.read(0, 100) == leader.log.read(0, 100)


def _damage(p: Partition, offset: int) -> None:
    """Flip a byte in the body of the record at ``offset`` of ``p``'s first segment file."""
    (path,) = sorted(p.log.directory.glob("*.log"))
    data = bytearray(path.read_bytes())
    position = 0
    for _ in range(offset):
        position += 4 + (int.from_bytes(data[position : position + 4], "big") & ((1 << 30) - 1))
    data[position + 60] ^= 0x10
    path.write_bytes(bytes(data))


def _copy_all(leader: Partition, follower: Partition) -> int:
    """Stream the leader's log to the follower as a leader's stream does (the first batch read
    and encoded again); returns the batches it took."""
    batches = 0
    while follower.log.end_offset < leader.log.end_offset:
        at = follower.log.end_offset
        batch = read_for_follower(leader, at, 300, as_written=batches > 0)
        assert batch.count, f"no progress at {at}"
        append_from_leader(follower, 1, batch)
        batches += 1
    return batches


def test_records_the_leader_lost_reach_the_follower_as_lost_markers(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    follower = partition(tmp_path / "f", Role.REPLICA)
    publish(leader, *[b"body %03d " % i + b"." * 40 for i in range(30)])
    _damage(leader, 10)
    _copy_all(leader, follower)  # no stall at the leader's gap
    assert follower.log.end_offset == 30
    expected = [r.offset for r in leader.log.read(0, 30)]
    assert 10 not in expected
    got, at = [], 0
    while at < 30:
        records = follower.log.read(at, 30)
        got.extend(records)
        at = records[-1].offset + 1
    assert [r.offset for r in got] == expected
    assert [r.body for r in got] == [r.body for r in leader.log.read(0, 30)]
    assert last_epoch(follower) == 1


def test_a_damaged_record_the_follower_holds_is_copied_back(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    follower = partition(tmp_path / "f", Role.REPLICA)
    publish(leader, *[b"body %03d " % i + b"." * 40 for i in range(30)])
    _copy_all(leader, follower)
    _damage(leader, 10)
    assert [r.offset for r in leader.log.read(8, 4)] == [8, 9, 11]  # other reads skip it
    with pytest.raises(RepairPending):  # held: the in-sync replica may hold it
        leader.read_for_delivery(8, 4, None)
    assert held_regions(leader) == [(10, 1)]
    copy = read_for_repair(follower, 10, 1)
    assert repair_from_replica(leader, copy)
    records = leader.read_for_delivery(0, 30, None)
    assert [r.body for r in records] == [r.body for r in follower.log.read(0, 30)]
    assert leader.log.skipped.healed == 1
    assert read_for_repair(follower, 28, 5).count == 0  # past its end: it lacks them


def test_with_no_copy_at_the_replica_the_region_is_skipped(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    publish(leader, *[b"body %03d " % i + b"." * 40 for i in range(30)])
    _damage(leader, 10)
    with pytest.raises(RepairPending):
        leader.read_for_delivery(8, 4, None)
    assert not repair_from_replica(leader, Batch(10, 0, b""))  # "I lack them too"
    assert [r.offset for r in leader.read_for_delivery(8, 4, None)] == [8, 9, 11]


def test_damage_up_to_the_log_end_is_no_busy_loop(tmp_path: Path) -> None:
    leader = partition(tmp_path / "l", Role.LEADER)
    publish(leader, *[b"body %03d " % i + b"." * 40 for i in range(11)])
    (path,) = sorted(leader.log.directory.glob("*.log"))
    data = bytearray(path.read_bytes())
    data[_position(data, 10)] ^= 0x20  # the newest record's length: nothing intact after it
    path.write_bytes(bytes(data))
    with pytest.raises(RepairPending):  # up to the segment's end: held for the replica too
        leader.read_for_delivery(10, 5, None)
    assert held_regions(leader) == [(10, 1)]
    repair_from_replica(leader, Batch(10, 0, b""))  # the replica lacks it: given up
    with pytest.raises(DamagedTail):  # not []: the consumer's guard waits before reading again
        leader.read_for_delivery(10, 5, None)
    assert [r.offset for r in leader.read_for_delivery(8, 5, None)] == [8, 9]


def _position(data: bytearray, offset: int) -> int:
    position = 0
    for _ in range(offset):
        position += 4 + (int.from_bytes(data[position : position + 4], "big") & ((1 << 30) - 1))
    return position


async def test_idle_streams_wake_at_the_ticks_their_slots_and_looks_ask_for(
    tmp_path: Path,
) -> None:
    """One timer for every idle stream: a stream that looks at its channels wakes at every
    tick, the others once every BEAT_TICKS ticks, each partition at a tick of its own (the
    slots given in turn: heartbeats spread evenly, not one burst); records wake at once."""
    parts = [partition(tmp_path / str(n), Role.LEADER) for n in range(2 * BEAT_TICKS)]
    waiters = ReplicationWaiters()
    woken: dict[int, list[int]] = {n: [] for n in range(len(parts))}

    async def stream(n: int, look: bool) -> None:
        for _ in range(3 * BEAT_TICKS):
            await waiters.wait_data(parts[n], parts[n].log.end_offset, look=look)
            woken[n].append(waiters._ticks)  # the tick that woke it

    async with trio.open_nursery() as nursery:
        for n in range(len(parts)):
            nursery.start_soon(stream, n, n == 0)
        for _ in range(3 * BEAT_TICKS):
            await trio.testing.wait_all_tasks_blocked()
            waiters.tick()
        await trio.testing.wait_all_tasks_blocked()
        assert woken[0] == list(range(1, 3 * BEAT_TICKS + 1))  # looking: every tick
        quiet = [woken[n] for n in range(1, len(parts))]
        assert all(len(ticks) == 3 for ticks in quiet)  # once every BEAT_TICKS ticks
        assert all(b - a == BEAT_TICKS for ticks in quiet for a, b in itertools.pairwise(ticks))
        per_slot = Counter(ticks[0] % BEAT_TICKS for ticks in quiet)
        assert len(per_slot) == BEAT_TICKS  # spread evenly
        assert max(per_slot.values()) == 2
        publish(parts[1], b"now")
        waiters.appended(parts[1])
        await trio.testing.wait_all_tasks_blocked()
        assert len(woken[1]) == 4  # records: at once, between ticks
        nursery.cancel_scope.cancel()


async def test_idle_streams_to_a_node_that_counts_silence_per_node_wake_once_per_heartbeat(
    tmp_path: Path,
) -> None:
    """Thirty partitions' idle streams to one follower node that counts silence per node, ten
    to another: each tick wakes one stream per node due a heartbeat, none while the node was
    sent something within BEAT_DUE, so each node gets its heartbeat on time from about one
    wake-up an interval (not a wake-up of every stream); a stream that counts its own silence
    still wakes at its slot."""
    parts = [partition(tmp_path / str(n), Role.LEADER) for n in range(41)]
    now = [0.0]
    waiters = ReplicationWaiters(lambda: now[0])
    nodes = ["a"] * 30 + ["b"] * 10 + [None]
    woken: list[tuple[int, float]] = []
    beats: dict[str, list[float]] = {"a": [], "b": []}

    async def stream(n: int) -> None:
        node, since = nodes[n], 0.0
        if node is not None:
            waiters.sent_to[node] = since  # its first frame (a stream's first look sends one)
        while True:
            await waiters.wait_data(parts[n], parts[n].log.end_offset, beats_for=node)
            woken.append((n, now[0]))
            if node is not None and waiters.beat_due(node, since, now[0]):
                since = waiters.sent_to[node] = now[0]  # the stream's heartbeat
                beats[node].append(now[0])

    ticks = 6 * BEAT_TICKS
    async with trio.open_nursery() as nursery:
        for n in range(len(parts)):
            nursery.start_soon(stream, n)
        for _ in range(ticks):
            await trio.testing.wait_all_tasks_blocked()
            now[0] += STREAM_TICK
            waiters.tick()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    interval = STREAM_TICK * BEAT_TICKS
    for node in ("a", "b"):
        assert len(beats[node]) >= 5
        assert max(b - a for a, b in itertools.pairwise(beats[node])) <= interval + 1e-9
    per_node = [n for n, _ in woken if nodes[n] is not None]
    assert len(per_node) <= len(beats["a"]) + len(beats["b"]) + 2  # not 40 every interval
    own = [at for n, at in woken if n == 40]  # at its slot, every BEAT_TICKS ticks
    assert len(own) == ticks // BEAT_TICKS
    assert all(b - a == pytest.approx(interval) for a, b in itertools.pairwise(own))


async def test_a_followers_ephemeral_channel_is_a_mark_its_consumer_goes_on_from(
    tmp_path: Path,
) -> None:
    """On a follower an #ephemeral channel of the leader's is no channel (no client would ever
    leave it, and it would keep the partition's messages for good): a mark, from which the
    channel made again here (this node leading now) starts; the leader's delete drops it."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic = broker.get_or_create_topic("t", 1)
        part = topic.partitions[0]
        broker.publish("t", [NewRecord(1, b"m%d" % i) for i in range(10)], 0)
        mirror_channel(broker, topic, part, "tail#ephemeral", 7, (), False)
        mirror_channel(broker, topic, part, "gone#ephemeral", 3, (), False)
        mirror_channel(broker, topic, part, "gone#ephemeral", 0, (), True)
        assert topic.channels == {}
        assert part.ephemeral_marks == {"tail#ephemeral": 7}
        channel = broker.get_or_create_channel(topic, "tail#ephemeral")
        assert channel.cursors[0].confirmed == 7
        assert part.ephemeral_marks == {}
        other = broker.get_or_create_channel(topic, "new#ephemeral")
        assert other.cursors[0].confirmed == 10  # a channel made for the first time: at the end
