"""nsqd.cluster.registration's pure parts: what to register, and the commands that get there."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio
import trio.testing

from nsqd.broker import Broker
from nsqd.broker.changes import Changes
from nsqd.broker.clock import VirtualClock
from nsqd.cluster.registration import (
    PNSQ_PING_INTERVAL,
    LookupIdentity,
    LookupPeerError,
    V1Connection,
    desired_registrations,
    keep_registered,
    lookupd_http_address,
    registration_commands,
)
from protocol.lookup_v1 import decode_identify, encode_response


@dataclass
class FakePartition:
    number: int


@dataclass
class FakeTopic:
    partitions: list[FakePartition]
    channels: dict[str, object] = field(default_factory=dict)
    deleted: bool = False

    @property
    def led(self) -> list[FakePartition]:
        return self.partitions


@dataclass
class FakeBroker:
    topics: dict[str, FakeTopic]
    clock: VirtualClock = field(default_factory=VirtualClock)
    changes: Changes = field(default_factory=Changes)

    def list_topics(self) -> list[Any]:
        return [_Named(name, t) for name, t in sorted(self.topics.items())]


@dataclass
class _Named:
    name: str
    topic: FakeTopic

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.topic, attr)


def broker(**topics: FakeTopic) -> Broker:
    return cast(Broker, FakeBroker(topics))


def test_stock_registrations_are_topics_and_channels() -> None:
    b = broker(
        t=FakeTopic([FakePartition(0), FakePartition(1)], {"c": 1}),
        gone=FakeTopic([FakePartition(0)], deleted=True),
    )
    assert desired_registrations(b, partitioned=False) == {("t", None, None), ("t", None, "c")}


def test_partitioned_registrations_name_every_local_partition() -> None:
    b = broker(t=FakeTopic([FakePartition(0), FakePartition(1)], {"c": 1}))
    assert desired_registrations(b, partitioned=True) == {
        ("t", 0, None),
        ("t", 1, None),
        ("t", 0, "c"),
        ("t", 1, "c"),
    }


def test_commands_unregister_channels_first_and_register_topics_first() -> None:
    old: set[Any] = {("a", None, None), ("a", None, "x"), ("b", 0, None)}
    new: set[Any] = {("b", 0, None), ("c", 1, None), ("c", 1, "y")}
    lines = [line for _, line in registration_commands(old, new)]
    assert lines == [
        b"UNREGISTER a x\n",
        b"UNREGISTER a\n",
        b"REGISTER c 1\n",
        b"REGISTER c 1 y\n",
    ]
    assert registration_commands(new, new) == []


def test_identify_body_asks_for_partitions() -> None:
    identity = LookupIdentity("1.3.0", 4150, 4151, "host", "10.0.0.1")
    assert identity.identify_body() == {
        "version": "1.3.0",
        "tcp_port": 4150,
        "http_port": 4151,
        "hostname": "host",
        "broadcast_address": "10.0.0.1",
        "pnsq_extensions": ["partitions"],
    }
    assert identity.node_id == "10.0.0.1:4150"


def test_a_pnsq_lookupds_http_address_comes_from_its_identify_reply() -> None:
    assert lookupd_http_address("10.0.0.9", {"http_port": 4161}) == "10.0.0.9:4161"
    assert lookupd_http_address("::1", {"http_port": 4161}) == "[::1]:4161"


@pytest.mark.parametrize("port", [0, None, "4161", -1, 65536, True])
def test_a_reply_without_a_usable_http_port_is_refused(port: object) -> None:
    """A lookupd answering while its HTTP listener was not bound yet said 0; polling host:0 for
    the connection's life would leave the node without assignments: reconnect instead."""
    info: dict[str, object] = {} if port is None else {"http_port": port}
    with pytest.raises(LookupPeerError, match="no HTTP port"):
        lookupd_http_address("10.0.0.9", info)


def test_identify_body_carries_the_rack_to_pnsq_lookupd_only() -> None:
    identity = LookupIdentity("1.3.0", 4150, 4151, "host", "10.0.0.1", rack="r1")
    body = identity.identify_body()
    assert body["pnsq_rack"] == "r1"
    assert "pnsq_rack" not in identity.identify_body(extensions=False)
    decoded = decode_identify(json.dumps(body).encode())
    assert decoded.rack == "r1"
    stock = decode_identify(json.dumps(identity.identify_body(extensions=False)).encode())
    assert stock.rack == ""


async def test_a_thousand_registrations_leave_room_for_the_heartbeats(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A node leading 1,000 partitions registers each; a lookupd answering each line in 5 ms
    needs 5 s for them all. pnsq's lookupd takes a node silent for 2 s for dead, so PINGs go
    between the lines at their interval, and the lines go many at a time."""
    b = broker(t=FakeTopic([FakePartition(n) for n in range(1000)]))
    near, far = trio.testing.memory_stream_pair()
    seen: list[tuple[float, bytes]] = []  # (time, command) as the lookupd read them
    sends: list[int] = []  # commands per chunk the lookupd received

    async def lookupd() -> None:
        buffer = b""
        while True:
            chunk = await far.receive_some(1 << 20)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            sends.append(len(lines))
            for line in lines:
                await trio.sleep(0.005)
                seen.append((trio.current_time(), line))
                await far.send_all(encode_response(b"OK"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lookupd)
        nursery.start_soon(keep_registered, V1Connection(near), b, "lookupd", True)
        while sum(line.startswith(b"REGISTER") for _, line in seen) < 1000:
            await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    pings = [at for at, line in seen if line == b"PING"]
    assert len(pings) >= 8
    beats = [0.0, *pings]
    assert max(b - a for a, b in itertools.pairwise(beats)) < 4 * PNSQ_PING_INTERVAL
    assert max(sends) > 1  # pipelined, not one round trip per line


@pytest.mark.parametrize("partitioned", [True, False])
async def test_a_slow_pnsq_lookupd_does_not_end_the_registration(
    autojump_clock: trio.testing.MockClock, partitioned: bool
) -> None:
    """pnsq's lookupd takes a registration that closes for a dead node and fails it over: a
    reply that takes 2 s (a lookupd busy with a burst of work) must not end it. A stock
    nsqlookupd keeps nsqd's 1 s deadline."""
    b = broker(t=FakeTopic([FakePartition(0)]))
    near, far = trio.testing.memory_stream_pair()

    async def lookupd() -> None:
        while await far.receive_some(1 << 20):
            await trio.sleep(2.0)
            await far.send_all(encode_response(b"OK"))

    with trio.move_on_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lookupd)
            try:
                await keep_registered(V1Connection(near), b, "lookupd", partitioned)
            except trio.TooSlowError:
                assert not partitioned
                nursery.cancel_scope.cancel()
                return
    assert partitioned  # still registered after 10 s of slow replies
