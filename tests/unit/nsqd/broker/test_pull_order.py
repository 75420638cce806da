"""HTTP consume keeps its offsets model: a batch that comes back (its lease expired, or nacked
with no delay) is the next batch of its partition, from the committed offset, attempts + 1 —
not something handed out after the messages behind it. On the virtual clock."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.broker.pull import Batch, Puller

LEASE_NS = 1_000_000_000


class SkewedClock(VirtualClock):
    """Virtual wall time that the test can move on without Trio's clock (so no timer runs)."""

    skew_ns = 0

    def now_ns(self) -> int:
        return super().now_ns() + self.skew_ns


def _offsets(batch: Batch | None) -> list[int]:
    assert batch is not None
    return [m.offset for m in batch.messages]


@pytest.mark.parametrize("ending", ["lease expires", "nack 0"])
async def test_a_batch_that_comes_back_is_the_next_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, ending: str
) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        records = [NewRecord(timestamp_ns=clock.now_ns(), body=b"m%d" % i) for i in range(6)]
        broker.publish("t", records)
        topic = broker.get_topic("t")
        channel = broker.get_or_create_channel(topic, "c")
        first = puller.take(topic, channel, 3, LEASE_NS)
        assert _offsets(first) == [0, 1, 2]
        assert first is not None
        if ending == "nack 0":
            puller.nack(first.lease.token, 0)
        else:
            await trio.sleep(2)  # the lease ends; the channel's timer requeues the batch
        again = puller.take(topic, channel, 3, LEASE_NS)
        assert _offsets(again) == [0, 1, 2]
        assert again is not None
        assert [m.attempts for m in again.messages] == [2, 2, 2]
        await puller.ack(again.lease.token)
        assert _offsets(puller.take(topic, channel, 3, LEASE_NS)) == [3, 4, 5]


async def test_an_expired_batch_comes_back_even_before_the_timer_ran(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The lease's deadline passed, the channel's timer has not run yet: the next request of
    the partition still gets the expired batch first."""
    clock = SkewedClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        puller = Puller(broker)
        records = [NewRecord(timestamp_ns=clock.now_ns(), body=b"m%d" % i) for i in range(6)]
        broker.publish("t", records)
        topic = broker.get_topic("t")
        channel = broker.get_or_create_channel(topic, "c")
        assert _offsets(puller.take(topic, channel, 3, LEASE_NS)) == [0, 1, 2]
        clock.skew_ns = 2 * LEASE_NS  # the deadline passed; no checkpoint: the timer did not run
        assert _offsets(puller.take(topic, channel, 3, LEASE_NS)) == [0, 1, 2]
