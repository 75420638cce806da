"""A storage error while reading for delivery is contained (nsqd/broker/read_guard.py): the take
gives the other partitions' messages and raises nothing, the failing partition waits for a retry
time that doubles, the error is logged once per window, and a retry that reads delivers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.broker.read_guard import FIRST_RETRY_NS
from nsqd.core.inflight import Deliveries
from nsqd.storage import FrameLayout, StorageError
from nsqd.tcp.delivery import PLAIN_FRAME

DEADLINE_NS = 60_000_000_000


def _bodies(taken: Deliveries) -> list[bytes]:
    return [r.body for r in taken.records] + [r.body for run in taken.framed for r in run]


@pytest.mark.parametrize("layout", [None, PLAIN_FRAME], ids=["records", "frames"])
async def test_a_failing_partition_is_contained_and_retried(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    layout: FrameLayout | None,
) -> None:
    clock = VirtualClock()
    config = BrokerConfig(data_path=tmp_path, mem_queue_size=0)
    async with open_broker(config, clock) as broker:
        topic = broker.get_or_create_topic("t", 2)
        channel = broker.get_or_create_channel(topic, "c")
        for number in (0, 1):
            records = [
                NewRecord(timestamp_ns=clock.now_ns(), body=b"p%d-%d" % (number, i))
                for i in range(5)
            ]
            broker.publish("t", records, number)
        bad = topic.partition(0)

        def broken(*args: object, **kwargs: object) -> None:
            raise StorageError("read of segment failed: [Errno 5] Input/output error")

        monkeypatch.setattr(bad.log, "read", broken)
        monkeypatch.setattr(bad.log, "read_frames", broken)
        owner = object()
        with caplog.at_level(logging.ERROR, logger="nsqd.broker"):
            got = channel.take(
                100, owner, clock.now_ns() + DEADLINE_NS, clock.now_ns(), layout=layout
            )
            assert sorted(_bodies(got)) == [b"p1-%d" % i for i in range(5)]  # the other one
            assert not channel.has_ready(0)  # waits for its retry time, no busy loop
            for _ in range(5):  # each retry fails: the wait doubles, one line is logged
                await trio.sleep((bad.read_guard.retry_ns - clock.now_ns()) / 1e9)
                assert channel.has_ready(0)
                assert not channel.take(
                    100, owner, clock.now_ns() + DEADLINE_NS, clock.now_ns(), 0, layout=layout
                )
            assert bad.read_guard.failures == 6
            assert bad.read_guard.retry_ns - clock.now_ns() == 32 * FIRST_RETRY_NS
        lines = [
            r.getMessage()
            for r in caplog.records
            if "reading for delivery failed" in r.getMessage()
        ]
        assert len(lines) == 1
        assert "Input/output error" in lines[0]
        monkeypatch.undo()  # the disk is back: the next retry delivers
        await trio.sleep((bad.read_guard.retry_ns - clock.now_ns()) / 1e9)
        got = channel.take(
            100, owner, clock.now_ns() + DEADLINE_NS, clock.now_ns(), 0, layout=layout
        )
        assert _bodies(got) == [b"p0-%d" % i for i in range(5)]
