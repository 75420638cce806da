"""HTTP consume with several batches of one partition out at once (nsqd/broker/pull.py): each
batch has its own messages, is acked, nacked or timed out on its own, and the acks of
concurrent batches share a sync pass, with in-sync followers or without; ordered channels keep
one batch at a time. On the virtual clock."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import Broker, BrokerConfig, Channel, NewRecord, Topic, open_broker, syncing
from nsqd.broker.clock import VirtualClock
from nsqd.broker.journaling import Disk
from nsqd.broker.partition import Partition
from nsqd.broker.persistence import load_state
from nsqd.broker.pull import Batch, Puller
from nsqd.core.leases import LeaseEndedError
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.stream import _cursor_changes

LEASE_NS = 1_000_000_000
LONG_NS = 1_000_000 * LEASE_NS  # virtual time jumps while a sync waits for its worker thread


def _offsets(batch: Batch | None) -> list[int]:
    assert batch is not None
    return [m.offset for m in batch.messages]


def _setup(broker: Broker, clock: VirtualClock, count: int) -> tuple[Topic, Channel]:
    records = [NewRecord(timestamp_ns=clock.now_ns(), body=b"m%d" % i) for i in range(count)]
    broker.publish("t", records)
    topic = broker.get_topic("t")
    return topic, broker.get_or_create_channel(topic, "c")


def _with_a_follower(topic: Topic) -> Partition:
    """Partition 0 of ``topic``, led here (epoch 2) with an in-sync follower that never
    answers."""
    partition = topic.partition(0)
    me = partition.state.placement.leader
    partition.state.apply(Placement(Role.LEADER, 2, me, (me, "b:1"), (me, "b:1")))
    return partition


def _saved_cursor(tmp_path: Path) -> object:
    """The channel's cursor as a restart would read it (checkpoint and cursor journal)."""
    (directory,) = tmp_path.glob("topics/t-t/*/")
    channels = load_state(directory, "STAMP")["channels"]
    assert isinstance(channels, dict)
    return channels["c"]


async def test_batches_out_at_once_are_disjoint_and_each_ends_on_its_own(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 9)
        first = puller.take(topic, channel, 3, LEASE_NS)
        second = puller.take(topic, channel, 3, LONG_NS)
        third = puller.take(topic, channel, 3, LONG_NS)
        assert (_offsets(first), _offsets(second), _offsets(third)) == (
            [0, 1, 2],
            [3, 4, 5],
            [6, 7, 8],
        )
        assert first is not None
        assert second is not None
        assert third is not None
        assert len({first.lease.token, second.lease.token, third.lease.token}) == 3
        assert puller.take(topic, channel, 3, LEASE_NS) is None  # every message is out
        # the second is acked while the first and third are out: durable as out-of-order FINs
        await puller.ack(second.lease.token)
        assert _saved_cursor(tmp_path) == {"confirmed": 0, "acked": [], "runs": [[3, 6]]}
        # the first's lease ends: only its messages come back, before anything newer
        await trio.sleep(2)
        again = puller.take(topic, channel, 10, LONG_NS)
        assert _offsets(again) == [0, 1, 2]
        assert again is not None
        assert [m.attempts for m in again.messages] == [2, 2, 2]
        puller.nack(third.lease.token, 0)  # the third comes back on its own too
        back = puller.take(topic, channel, 10, LONG_NS)
        assert _offsets(back) == [6, 7, 8]
        assert back is not None
        await puller.ack(again.lease.token)
        await puller.ack(back.lease.token)
        assert _saved_cursor(tmp_path) == {"confirmed": 9, "acked": []}


async def test_concurrent_acks_share_a_sync_pass(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 400)
        batches = [puller.take(topic, channel, 100, LONG_NS) for _ in range(4)]
        tokens = [batch.lease.token for batch in batches if batch is not None]
        assert len(tokens) == 4
        await broker.wait_durable()  # the publish's checkpoint is behind us
        saves: list[bool] = []
        save = syncing.save_state

        async def counting(
            partition: Partition,
            state: dict[str, object],
            path: Path,
            disk: Disk,
            *,
            journal: bool = True,
        ) -> bool:
            saves.append(journal)
            return await save(partition, state, path, disk, journal=journal)

        monkeypatch.setattr(syncing, "save_state", counting)
        async with trio.open_nursery() as nursery:
            for token in tokens:
                nursery.start_soon(puller.ack, token)
        assert saves == [True]  # one pass saved the four, the acks waiting: to the journal
        assert _saved_cursor(tmp_path) == {"confirmed": 400, "acked": []}


async def test_an_ordered_channel_keeps_one_batch_at_a_time(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 6)
        channel.ordered = True
        first = puller.take(topic, channel, 3, LEASE_NS)
        assert _offsets(first) == [0, 1, 2]
        assert first is not None
        assert first.lease.exclusive
        assert puller.take(topic, channel, 3, LEASE_NS) is None
        await puller.ack(first.lease.token)
        assert _offsets(puller.take(topic, channel, 3, LEASE_NS)) == [3, 4, 5]


async def test_a_partition_with_in_sync_followers_gives_several_batches_at_once_too(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Its ack waits for the followers to hold the batch's FINs, whatever is out before it
    (tests/integration/test_http_consume_cluster.py): no reason to keep one batch at a time."""
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 9)
        _with_a_follower(topic)
        first = puller.take(topic, channel, 3, LEASE_NS)
        second = puller.take(topic, channel, 3, LEASE_NS)
        assert first is not None
        assert second is not None
        assert not first.lease.exclusive
        assert not second.lease.exclusive
        assert (_offsets(first), _offsets(second)) == ([0, 1, 2], [3, 4, 5])


async def test_an_ack_finishes_its_batch_in_one_run_contiguous_or_not(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A batch read in one piece (a range of offsets) and one of a requeued message and a new
    one (offsets apart) are both finished whole, each FIN counted in the e2e latency."""
    clock = VirtualClock()
    # a window longer than the virtual time the syncs take
    config = BrokerConfig(data_path=tmp_path, e2e_percentiles=(0.5,), e2e_window=1e12)
    async with open_broker(config, clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 6)
        first = puller.take(topic, channel, 1, LONG_NS)
        second = puller.take(topic, channel, 2, LONG_NS)
        assert (_offsets(first), _offsets(second)) == ([0], [1, 2])
        assert first is not None
        assert second is not None
        puller.nack(first.lease.token, 0)
        apart = puller.take(topic, channel, 2, LONG_NS)
        assert _offsets(apart) == [0, 3]
        assert apart is not None
        await puller.ack(apart.lease.token)
        await puller.ack(second.lease.token)
        cursor = channel.cursors[0]
        assert cursor.confirmed == 4
        assert not cursor.in_flight
        window = channel.e2e_latency
        assert window is not None
        assert sum(bucket.count for bucket in window.buckets) == 4


async def test_out_of_order_acks_are_saved_as_runs_and_restored_after_a_restart(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A batch held while later ones are acked (a consumer gone with messages in flight):
    the later batches are saved as runs, not an offset each, and a restart delivers only what
    was not acked."""
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 300)
        held = puller.take(topic, channel, 10, LONG_NS)
        assert _offsets(held) == list(range(10))
        for _ in range(29):
            batch = puller.take(topic, channel, 10, LONG_NS)
            assert batch is not None
            await puller.ack(batch.lease.token)
        assert _saved_cursor(tmp_path) == {"confirmed": 0, "acked": [], "runs": [[10, 300]]}
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic = broker.get_topic("t")
        again = puller.take(topic, topic.channels["c"], 1000, LONG_NS)
        assert _offsets(again) == list(range(10))


async def test_an_ack_waiting_for_the_followers_ends_when_its_channel_is_deleted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A follower that never answers holds a replicated ack; deleting the channel ends the wait
    (the lease ended with its channel), not the next request's timeout."""
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 3)
        partition = _with_a_follower(topic)
        batch = puller.take(topic, channel, 3, LONG_NS)
        assert batch is not None
        outcome: list[object] = []

        async def ack() -> None:
            try:
                await puller.ack(batch.lease.token)
                outcome.append("acked")
            except LeaseEndedError as exc:
                outcome.append(exc)

        with trio.fail_after(60):  # virtual seconds: a wait the deletion does not end fails
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ack)
                while "c" not in partition.cursor_push.get(
                    "b:1", ()
                ):  # on disk, now waiting for the follower
                    await trio.sleep(0.01)
                await trio.sleep(5)
                assert outcome == []  # the follower never answers
                started = trio.current_time()
                broker.delete_channel(topic, "c")
        assert trio.current_time() == started  # at once
        assert len(outcome) == 1
        assert isinstance(outcome[0], LeaseEndedError)


async def test_an_acks_state_goes_at_once_to_every_in_sync_follower(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """With two in-sync followers, the channel's state an ack waits for is pushed on both
    streams (each takes its own share), not on the first stream that looks only: the ack
    returns once both applied it, without waiting for the next interval."""
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        topic, channel = _setup(broker, clock, 3)
        partition = topic.partition(0)
        me = partition.state.placement.leader
        followers = ("b:1", "c:1")
        partition.state.apply(Placement(Role.LEADER, 2, me, (me, *followers), (me, *followers)))
        frames = partition.state.cursor_frames
        streams = [frames.start(node) for node in followers]  # each follower's stream
        batch = puller.take(topic, channel, 3, LONG_NS)
        assert batch is not None
        acked: list[float] = []

        async def ack() -> None:
            await puller.ack(batch.lease.token)
            acked.append(trio.current_time())

        with trio.fail_after(60):  # virtual seconds
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ack)
                while set(partition.cursor_push) != set(followers):
                    await trio.sleep(0.001)
                for node, stream in zip(followers, streams, strict=True):  # each one's look
                    sent = _cursor_changes(topic, partition, 2, (node, stream), {}, False)
                    assert [frame.channel for frame in sent] == ["c"], node
                assert partition.cursor_push == {}
                pushed = trio.current_time()
                for node, stream in zip(followers, streams, strict=True):
                    frames.acked(node, "c", stream)
                broker.replication.wake(partition, streams=False)
        assert acked == [pushed]
