"""Consumers that cannot take a message (RDY 0: go-nsq's spare connections) are not woken by
each publish, and consumers leaving together do not wake each other: every publish woke every
consumer of the channel (~11 µs each: 23 ms a PUB with 2,000 idle consumers), and each
departure woke all the others (8,000 leaving together: a minute of the event loop)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio.lowlevel import ParkingLot

import nsqd.tcp.consuming
from tests.unit.nsqd.tcp.test_publish_reactor import RESPONSE, Client, connect, listening

CONSUMERS = 20
PUBLISHES = 10


class CountedLot:
    """A consumer's pump lot that counts its wake-ups (trio's lot is final: wrapped)."""

    wakes = 0

    def __init__(self) -> None:
        self._lot = ParkingLot()

    async def park(self) -> None:
        await self._lot.park()

    def unpark_all(self) -> list[trio.lowlevel.Task]:
        CountedLot.wakes += 1
        return self._lot.unpark_all()


async def idle_consumer(port: int) -> Client:
    client = await connect(port)
    await client.stream.send_all(b"SUB t c\nRDY 0\n")
    assert await client.frame() == (RESPONSE, b"OK")
    return client


async def test_idle_consumers_are_not_woken_by_publishes_or_departures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nsqd.tcp.consuming, "ParkingLot", CountedLot)
    async with listening(tmp_path) as (_broker, _server, port):
        consumers = [await idle_consumer(port) for _ in range(CONSUMERS)]
        await trio.sleep(0.05)  # every pump parked
        publisher = await connect(port)
        CountedLot.wakes = 0
        for n in range(PUBLISHES):
            assert await publisher.pub("t", b"m%d" % n) == (RESPONSE, b"OK")
        assert CountedLot.wakes == 0  # none of them could take a message
        for consumer in consumers:
            await consumer.stream.aclose()
        with trio.fail_after(5):
            while CountedLot.wakes < CONSUMERS:  # each one's own end
                await trio.sleep(0.01)
        await trio.sleep(0.05)
        assert CountedLot.wakes <= 2 * CONSUMERS  # not each departure waking all the others
        await consumers[0].stream.aclose()
        # a consumer given RDY room is still woken for what is there
        ready = await idle_consumer(port)
        await ready.stream.send_all(b"RDY 1\n")
        kind, data = await ready.frame()
        assert (kind, data[26:]) == (2, b"m0")
