"""A partition led under a leader epoch stamps it on every record it appends, and a publish is
acknowledged only while that epoch lasts here."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio.testing

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from nsqd.core.errors import NotLeaderError
from protocol.lookup import PartitionAssignment, TopicAssignment

NODE, FOLLOWER, OTHER = "127.0.0.1:4150", "127.0.0.1:4250", "127.0.0.1:4350"


async def test_records_carry_the_leader_epoch_lookupd_placed(tmp_path: Path) -> None:
    node = "127.0.0.1:4150"
    placed = TopicAssignment("t", 1, 1, (PartitionAssignment(node, (), 2),), {})
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.apply_assignments(node, [placed])
        (record,) = broker.publish("t", [NewRecord(timestamp_ns=1, body=b"x")])
        assert record.epoch == 2


@pytest.mark.parametrize(
    "moved",
    [
        # handed over: this node follows the new leader, alone in its in-sync set
        PartitionAssignment(FOLLOWER, (NODE,), 3, (FOLLOWER,)),
        # still the leader, under a newer epoch (an offline partition brought back)
        PartitionAssignment(NODE, (FOLLOWER,), 3, (NODE,)),
    ],
)
async def test_a_publish_is_not_acknowledged_once_its_epoch_is_over(
    tmp_path: Path, moved: PartitionAssignment
) -> None:
    """Leadership moved between the append and the wait for the in-sync set (the group commit
    hands the records back a scheduling round after the append): the publish gets
    NotLeaderError, not an acknowledgement of a record the new leader may never receive."""
    led = PartitionAssignment(NODE, (FOLLOWER,), 2, (NODE, FOLLOWER))
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.apply_assignments(NODE, [TopicAssignment("t", 1, 2, (led,), {})])
        records = broker.publish("t", [NewRecord(timestamp_ns=1, body=b"x")])
        broker.apply_assignments(NODE, [TopicAssignment("t", 1, 2, (moved,), {})])
        with pytest.raises(NotLeaderError):
            await broker.publish_acks.wait_replicated("t", records)


async def test_a_publish_waiting_when_its_partition_is_placed_elsewhere_is_refused(
    tmp_path: Path,
) -> None:
    """A leadership move whose source leaves the partition: the node may hear only the end of
    it (the partition is no longer placed here, on two other nodes). A publish parked for the
    in-sync set gets NotLeaderError (E_FAILED_ON_NOT_LEADER) instead of waiting forever."""
    led = PartitionAssignment(NODE, (FOLLOWER,), 2, (NODE, FOLLOWER))
    elsewhere = PartitionAssignment(FOLLOWER, (OTHER,), 3, (FOLLOWER, OTHER))
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.apply_assignments(NODE, [TopicAssignment("t", 1, 2, (led,), {})])
        records = broker.publish("t", [NewRecord(timestamp_ns=1, body=b"x")])
        refused = False

        async def wait() -> None:
            nonlocal refused
            with pytest.raises(NotLeaderError):
                await broker.publish_acks.wait_replicated("t", records)
            refused = True

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked()
                broker.apply_assignments(NODE, [TopicAssignment("t", 1, 2, (elsewhere,), {})])
        assert refused


async def test_a_leader_alone_in_sync_acknowledges_without_waiting(tmp_path: Path) -> None:
    alone = PartitionAssignment(NODE, (FOLLOWER,), 2, (NODE,))
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.apply_assignments(NODE, [TopicAssignment("t", 1, 2, (alone,), {})])
        records = broker.publish("t", [NewRecord(timestamp_ns=1, body=b"x")])
        with trio.testing.assert_no_checkpoints():
            await broker.publish_acks.wait_replicated("t", records, durable=False)
