"""The syncer's pass over the partitions awaits the disk between them: a partition lookupd takes
away meanwhile (its channels' cursors gone with it) is not checkpointed by that pass, and the
pass goes on (a three-node cluster under ``/topic/meta/update?replicator=`` changes lost a node
this way: ``KeyError`` in the checkpoint of a dropped partition ended nsqd)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nsqd.broker import BrokerConfig, NewRecord, open_broker


async def test_a_partition_dropped_while_a_pass_waits_for_the_disk_is_skipped(
    tmp_path: Path,
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 2)
        broker.get_or_create_channel(topic, "c")
        for number in (0, 1):
            broker.publish("t", [NewRecord(1, b"m%d" % number)], partition=number)
        await broker.sync_once()
        disk = broker.syncer._disk
        dropped: list[int] = []

        async def drop_during_the_first_wait(fn: Callable[..., None], *args: object) -> bool:
            if not dropped:  # as lookupd's assignments do when a copy is taken away
                partition = topic.release(1)
                for channel in topic.channels.values():
                    channel.drop_partition(1)
                broker.registry.retire(partition)
                dropped.append(1)
            return await disk(fn, *args)

        broker.syncer._disk = drop_during_the_first_wait  # type: ignore[method-assign]
        broker.publish("t", [NewRecord(2, b"again")], partition=0)
        for partition in topic.partitions:
            partition.dirty = True
        await broker.sync_once()
        assert dropped == [1]
        assert topic.partition(0).saved_state is not None
        assert not topic.partition(0).dirty  # checkpointed by the same pass
