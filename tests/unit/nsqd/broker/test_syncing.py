"""The syncer's pass over the partitions awaits the disk (fsync, checkpoint writes): a partition
lookupd takes away meanwhile (its channels' cursors go with it) is not checkpointed by that
pass, and the pass goes on. (Under ``/topic/meta/update?replicator=`` changes with load, a node
ended with ``KeyError`` in the checkpoint of a partition dropped during its own fsync.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nsqd.broker import BrokerConfig, NewRecord, admin, open_broker
from nsqd.broker.persistence import STATE_FILE, partition_state


async def test_a_partition_dropped_during_its_fsync_is_not_checkpointed(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 3)
        broker.get_or_create_channel(topic, "c")
        for number in (0, 1, 2):
            broker.publish("t", [NewRecord(1, b"m%d" % number)], partition=number)
        await broker.sync_once()
        victim = topic.partition(1)
        disk = broker.syncer._disk
        dropped: list[int] = []

        async def drop_during_its_fsync(fn: Callable[..., None], *args: object) -> bool:
            if getattr(fn, "__self__", None) is victim.log and not dropped:
                topic.release(1)  # as lookupd's assignments do when a copy is taken away
                for channel in topic.channels.values():
                    channel.drop_partition(1)
                broker.registry.retire(victim)
                dropped.append(1)
            return await disk(fn, *args)

        broker.syncer._disk = drop_during_its_fsync  # type: ignore[method-assign]
        for number in (0, 1, 2):
            broker.publish("t", [NewRecord(2, b"again")], partition=number)
        for partition in (*topic.partitions, victim):
            partition.dirty = True
        await broker.sync_once()
        assert dropped == [1]
        assert victim.dirty  # not checkpointed: its cursors are gone
        assert not topic.partition(0).dirty  # the others were, by the same pass
        assert not topic.partition(2).dirty


async def test_a_new_partition_writes_no_state_until_it_says_more_than_none_would(
    tmp_path: Path,
) -> None:
    """A partition this node created restores from no ``state.json`` to what it holds: the
    syncer writes none (a node given thousands of new partitions wrote and fsynced one each)
    until its state differs from a new partition's; then it does, and a restart reads it."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 2)
        await admin.create_channel(broker, "t", "c")
        broker.publish("t", [NewRecord(1, b"m")], partition=0)  # records alone: no state
        await broker.sync_once()
        assert [(p.directory / STATE_FILE).exists() for p in topic.partitions] == [False, False]
        before = [partition_state(topic, p) for p in topic.partitions]
        await admin.empty_channel(broker, "t", "c")  # partition 0's cursor moves past "m"
        await broker.sync_once()
        assert [(p.directory / STATE_FILE).exists() for p in topic.partitions] == [True, False]
        after = [partition_state(topic, p) for p in topic.partitions]
        assert after[0] != before[0]
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_topic("t")
        assert [partition_state(topic, p) for p in topic.partitions] == after
