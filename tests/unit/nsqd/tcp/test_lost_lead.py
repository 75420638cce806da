"""A consumer whose partitions stop being led here (lookupd moved or failed one over) is told to
look again and closed: a stock SUB when any partition it reads goes, a SUB of one partition
only when that one goes."""

from __future__ import annotations

from pathlib import Path

import trio

from nsqd.broker import NewRecord
from protocol.frames import FrameType
from protocol.lookup import PartitionAssignment, TopicAssignment
from tests.unit.nsqd.tcp.test_publish_reactor import connect, listening, subscribe

NODE, OTHER = "127.0.0.1:4150", "127.0.0.1:4250"


def _placed(first_leader: str) -> TopicAssignment:
    """Topic ``t``, two partitions: 0 led by ``first_leader``, 1 by this node (each with the
    other node as its replica, out of sync: a publish is delivered without it)."""
    other = OTHER if first_leader == NODE else NODE
    return TopicAssignment(
        "t",
        2,
        2,
        (
            PartitionAssignment(first_leader, (other,), 1, (first_leader,)),
            PartitionAssignment(NODE, (OTHER,), 1, (NODE,)),
        ),
        {},
    )


async def test_a_stock_sub_is_closed_but_a_sub_of_a_partition_still_led_goes_on(
    tmp_path: Path,
) -> None:
    async with listening(tmp_path) as (broker, _server, port):
        broker.apply_assignments(NODE, [_placed(NODE)])
        stock = await subscribe(port, "t", "all", 10)
        one = await connect(port)
        await one.stream.send_all(b"SUB t mine 1\nRDY 10\n")
        assert await one.frame() == (FrameType.RESPONSE, b"OK")
        with trio.fail_after(10):
            broker.apply_assignments(NODE, [_placed(OTHER)])  # partition 0 moves away
            kind, data = await stock.frame()
            assert (kind, data) == (FrameType.ERROR, b"E_FAILED_ON_NOT_LEADER ")
            # partition 1 is still led here: its consumer keeps it
            broker.publish("t", [NewRecord(timestamp_ns=1, body=b"on 1")], 1)
            kind, data = await one.frame()
            assert kind == FrameType.MESSAGE
            assert data.endswith(b"on 1")
