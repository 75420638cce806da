"""The statistics records of topics and channels: a topic or channel in a known state gives the
expected frozen record (what ``/stats`` and ``/metrics`` read)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nsqd.broker import (
    BrokerConfig,
    ChannelPartitionStatistics,
    NewRecord,
    ReplicationStatistics,
    TopicPartitionStatistics,
    open_broker,
)
from nsqd.broker.clock import VirtualClock
from nsqd.broker.partition import Partition
from nsqd.broker.statistics import replication_statistics
from nsqd.core.partition_state import Placement, Role
from nsqd.storage.memory import MemoryLog

SECOND = 1_000_000_000


class Client:
    """A subscriber as the channel sees one."""

    partition: int | None = None

    def wake(self) -> None:
        pass

    def message_timed_out(self) -> None:
        pass


LEADER_ALONE = ReplicationStatistics(
    role="leader",
    leader_epoch=0,
    high_watermark=3,
    isr=(),
    leads=True,
    replica_lag=(),
    max_replica_lag=0,
    under_replicated=False,
)


async def test_a_topic_without_channels_keeps_its_backlog(tmp_path: Path) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        now = clock.now_ns()
        broker.publish("t", [NewRecord(timestamp_ns=now, body=b"abc") for _ in range(3)])
        topic = broker.get_topic("t")
        record = topic.statistics()
        assert (record.name, record.depth, record.backend_depth) == ("t", 3, 3)
        assert (record.message_count, record.message_bytes) == (3, 9)
        assert record.partitions == (
            TopicPartitionStatistics(
                number=0,
                depth=3,
                backend_depth=3,
                message_count=3,
                message_bytes=9,
                start_offset=0,
                end_offset=3,
                replication=LEADER_ALONE,
            ),
        )
        assert record.channels == ()
        assert record.e2e_latency is None
        assert not record.youzan_style
        assert not record.paused


async def test_a_channel_counts_in_flight_and_depth(tmp_path: Path) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        client = Client()
        channel = broker.subscribe("t", "c", client)
        now = clock.now_ns()
        broker.publish("t", [NewRecord(timestamp_ns=now, body=b"x") for _ in range(3)])
        taken = channel.take(1, client, now + 60 * SECOND, now)
        assert len(taken) == 1
        record = channel.statistics()
        assert (record.name, record.topic_name) == ("c", "t")
        assert (record.depth, record.in_flight_count, record.deferred_count) == (2, 1, 0)
        assert (record.message_count, record.client_count) == (3, 1)
        assert record.subscribers == (client,)
        assert record.partitions == (
            ChannelPartitionStatistics(
                number=0,
                depth=2,
                backend_depth=2,
                in_flight_count=1,
                deferred_count=0,
                message_count=3,
                requeue_count=0,
                timeout_count=0,
                confirmed_offset=0,
                next_offset=1,
                start_offset=0,
                end_offset=3,
                lag=3,
            ),
        )
        topic = broker.get_topic("t").statistics()
        assert topic.depth == 0  # nsqd: the backlog is the channels' once one exists
        assert topic.channels == (record,)


async def test_latencies_only_with_percentiles(tmp_path: Path) -> None:
    clock = VirtualClock()
    config = BrokerConfig(data_path=tmp_path, e2e_percentiles=(0.99,))
    async with open_broker(config, clock) as broker:
        broker.get_or_create_channel(broker.get_or_create_topic("t"), "c")
        record = broker.get_topic("t").statistics((0.99,), clock.now_ns())
        assert record.e2e_latency is not None
        assert (record.e2e_latency.count, record.e2e_latency.percentiles) == (0, ((0.99, 0),))
        assert record.channels[0].e2e_latency == record.e2e_latency


async def test_a_partitioned_topic_is_youzan_style(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic = broker.get_or_create_topic("t", 2)
        broker.get_or_create_channel(topic, "c")
        record = topic.statistics()
        assert record.youzan_style
        assert [p.number for p in record.partitions] == [0, 1]
        assert record.channels[0].youzan_style
        assert [p.number for p in record.channels[0].partitions] == [0, 1]


async def test_records_are_frozen_snapshots(tmp_path: Path) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"x")])
        topic = broker.get_topic("t")
        record = topic.statistics()
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.depth = 7  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.partitions[0].replication.leads = False  # type: ignore[misc]
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"y")])
        assert (record.depth, topic.statistics().depth) == (1, 2)
        assert not hasattr(record, "__dict__")  # slotted


@pytest.mark.parametrize(
    ("placement", "under"),
    [
        pytest.param(Placement(Role.LEADER, 2, "a", ("b",), ("a", "b")), False, id="in-sync"),
        pytest.param(Placement(Role.LEADER, 2, "a", ("b",), ("a",)), True, id="short"),
        pytest.param(Placement(Role.LEADER, 2, "a", ("b",), ()), True, id="not-told"),
        pytest.param(Placement(Role.REPLICA, 2, "a", ("b",), ("a",)), False, id="replica"),
    ],
)
def test_replication_of_a_placed_partition(placement: Placement, under: bool) -> None:
    record = replication_statistics(Partition(0, MemoryLog(0, 10), None, 0, placement))
    assert record.role == placement.role.value
    assert (record.leader_epoch, record.isr) == (2, placement.isr)
    assert record.leads is (placement.role is Role.LEADER)
    assert record.under_replicated is under
    # the leader's lag per in-sync follower (which has acknowledged nothing of an empty log)
    lag = (("b", 0),) if record.leads and "b" in placement.isr else ()
    assert (record.replica_lag, record.max_replica_lag) == (lag, 0)
