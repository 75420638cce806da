"""The broker on one injected clock: under Trio's MockClock (autojump) and a VirtualClock, a
60 s message timeout and a 30 s deferral pass in milliseconds of real time, and every time the
broker reads is the virtual one."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from nsqd.broker.clock import VirtualClock

SECOND = 1_000_000_000


class Client:
    """A subscriber as the channel sees one."""

    partition: int | None = None

    def __init__(self) -> None:
        self.timed_out = 0
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    def message_timed_out(self) -> None:
        self.timed_out += 1


async def test_a_message_times_out_on_the_virtual_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock()
    started = time.monotonic()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        client = Client()
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"x")])
        channel = broker.subscribe("t", "c", client)
        now = clock.now_ns()
        taken = channel.take(1, client, now + 60 * SECOND, now)
        assert [r.offset for r in taken.records] == [0]
        await trio.sleep(59)
        assert (channel.in_flight_count, client.timed_out) == (1, 0)
        await trio.sleep(2)
        assert (channel.in_flight_count, client.timed_out) == (0, 1)  # requeued by the timer
        assert channel.depth == 1
        assert broker.start_time == clock.start_ns // SECOND  # the broker's clock is this one
    assert time.monotonic() - started < 10  # virtual minutes, real milliseconds


async def test_a_deferred_message_is_released_on_the_virtual_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        client = Client()
        channel = broker.subscribe("t", "c", client)
        due = clock.now_ns() + 30 * SECOND
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"d", deliver_at_ns=due)])
        now = clock.now_ns()
        assert not channel.take(1, client, now + 60 * SECOND, now)
        await trio.sleep(29)
        now = clock.now_ns()
        assert not channel.take(1, client, now + 60 * SECOND, now)
        await trio.sleep(2)
        now = clock.now_ns()
        assert [r.body for r in channel.take(1, client, now + 60 * SECOND, now).records] == [b"d"]
