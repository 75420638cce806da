"""The statsd task: the first push one interval after start, then on the interval's cadence,
each push's packets spread over the interval less a second (Go's SpreadWriter), on a virtual
clock and a real loopback UDP socket; an address that does not resolve skips the push and its
counters roll into the next one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import BrokerConfig, NewRecord, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.observe.statsd_push import StatsdPusher, StatsdSettings


async def _receive(sock: trio.socket.SocketType, count: int) -> list[tuple[float, bytes]]:
    got = []
    for _ in range(count):
        data = await sock.recv(65536)
        got.append((trio.current_time(), data))
    return got


async def test_pushes_on_the_interval_spread_over_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    clock = VirtualClock()
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        await listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
            topic = broker.get_or_create_topic("t", 1)
            broker.get_or_create_channel(topic, "c")
            settings = StatsdSettings(
                address=f"127.0.0.1:{port}",
                prefix="p.",
                interval=10.0,
                mem_stats=False,
                packet_size=1,  # every line over it: 12 packets of one line each
            )
            pusher = StatsdPusher(broker, settings)
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pusher.run)
                first = await _receive(listener, 12)
                broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"ab")])
                second = await _receive(listener, 12)
                nursery.cancel_scope.cancel()
    times = [round(t - start, 6) for t, _ in first + second]
    step = (10 - 1) / 12
    assert times == [round(10 + step * i, 6) for i in range(12)] + [
        round(20 + step * i, 6) for i in range(12)
    ]
    lines = b"".join(data for _, data in second).splitlines()
    assert b"p.topic.t.message_count:1|c" in lines
    assert b"p.topic.t.message_bytes:2|c" in lines
    assert all(data.count(b"\n") == 1 for _, data in first + second)


async def test_an_unresolvable_address_skips_the_push_and_keeps_the_counts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock()
    async with open_broker(BrokerConfig(data_path=tmp_path), clock) as broker:
        broker.publish("t", [NewRecord(timestamp_ns=clock.now_ns(), body=b"abc")])
        bad = StatsdSettings(address="no-port", prefix="", interval=5.0, mem_stats=False)
        pusher = StatsdPusher(broker, bad)
        await pusher.push()
        assert "failed to create UDP socket to statsd(no-port)" in caplog.text
        lines = b"".join(pusher.packets()).splitlines()
    assert b"topic.t.message_count:1|c" in lines  # not taken by the skipped push
