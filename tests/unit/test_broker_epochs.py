"""A partition led under a leader epoch stamps it on every record it appends."""

from __future__ import annotations

from pathlib import Path

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from protocol.lookup import PartitionAssignment, TopicAssignment


async def test_records_carry_the_leader_epoch_lookupd_placed(tmp_path: Path) -> None:
    node = "127.0.0.1:4150"
    placed = TopicAssignment("t", 1, 1, (PartitionAssignment(node, (), 2),), {})
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        broker.apply_assignments(node, [placed])
        (record,) = broker.publish("t", [NewRecord(timestamp_ns=1, body=b"x")])
        assert record.epoch == 2
