"""nsqd.cluster.registration's pure parts: what to register, and the commands that get there."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from nsqd.broker import Broker
from nsqd.cluster.registration import (
    LookupIdentity,
    LookupPeerError,
    desired_registrations,
    lookupd_http_address,
    registration_commands,
)
from protocol.lookup_v1 import decode_identify


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
