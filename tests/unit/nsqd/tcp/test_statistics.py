"""A V2 session's statistics record: what a producer and a consumer on a real listener report
(the values ``/stats`` and ``/metrics`` show of clients), frozen and typed."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from nsqd.broker import BrokerConfig, open_broker
from nsqd.observe.records import ClientStatistics, HasStatistics
from nsqd.observe.stats import client_stats
from nsqd.tcp.server import TCPServer
from nsqd.tcp.session import Session
from nsqd.tcp.settings import SessionSettings

OK_FRAME = struct.pack(">Ii", 6, 0) + b"OK"


def pub(topic: str, body: bytes) -> bytes:
    return b"PUB %s\n" % topic.encode() + struct.pack(">I", len(body)) + body


@asynccontextmanager
async def listening(tmp_path: Path) -> AsyncIterator[tuple[TCPServer, int]]:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker, trio.open_nursery() as n:
        server = TCPServer(broker, SessionSettings())
        port = await n.start(server.serve, "127.0.0.1", 0)
        yield server, port
        n.cancel_scope.cancel()


async def connect(port: int, *commands: bytes, replies: int) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"  V2" + b"".join(commands))
    received = b""
    while len(received) < replies * len(OK_FRAME):
        received += await stream.receive_some(65536)
    assert received == OK_FRAME * replies
    return stream


async def records_when(server: TCPServer, ready: int) -> dict[str, ClientStatistics]:
    """The sessions' records by role, once the consumer's RDY (no reply) is applied."""
    with trio.fail_after(10):
        while True:
            records = [s.statistics() for s in server.sessions]
            if any(r.ready_count == ready for r in records):
                break
            await trio.sleep(0.01)
    return {("consumer" if r.subscribed else "producer"): r for r in records}


async def test_a_producer_and_a_consumer_report_themselves(tmp_path: Path) -> None:
    async with listening(tmp_path) as (server, port):
        producer = await connect(port, pub("t", b"ab"), pub("u", b"c"), pub("t", b"d"), replies=3)
        consumer = await connect(port, b"SUB t c\n", replies=1)
        await consumer.send_all(b"RDY 5\n")
        records = await records_when(server, 5)
        assert all(isinstance(s, HasStatistics) for s in server.sessions)

        made = records["producer"]
        assert made.pub_counts == (("t", 2), ("u", 1))  # by topic name
        assert (made.state, made.ready_count, made.subscribed) == (0, 0, False)
        assert made.hostname == made.client_id == "127.0.0.1"
        assert made.remote_address.startswith("127.0.0.1:")

        took = records["consumer"]
        assert took.pub_counts == ()
        assert (took.state, took.ready_count, took.subscribed, took.youzan_style) == (
            3,
            5,
            True,
            False,
        )
        assert (took.tls, took.snappy, took.deflate, took.authed) == (False, False, False, False)
        assert took.msg_timeout_ns == 60_000_000_000
        with trio.fail_after(10):  # the two messages of t go out under RDY 5
            while took.in_flight_count < 2:
                await trio.sleep(0.01)
                took = (await records_when(server, 5))["consumer"]
        assert took.message_count == 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            took.ready_count = 0  # type: ignore[misc]

        doc = client_stats(made, "t")
        assert doc["pub_counts"] == [{"topic": "t", "count": 2}]  # the topic filter applies
        assert list(doc)[:3] == ["client_id", "hostname", "version"]
        assert list(doc)[-5:] == [
            "tls",
            "tls_cipher_suite",
            "tls_version",
            "tls_negotiated_protocol",
            "tls_negotiated_protocol_is_mutual",
        ]
        for stream in (producer, consumer):
            await stream.aclose()


def test_a_session_is_what_stats_ask_for() -> None:
    assert issubclass(Session, HasStatistics)
