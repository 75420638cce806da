"""pnsq's Python client against a real daemon.

By default the daemon is pnsq's nsqd; ``PNSQ_CLIENT_DAEMON=go`` runs the same tests against the
Go nsqd 1.3.0 (to tell client bugs from daemon bugs); pnsq-only features are then skipped.
"""

from __future__ import annotations

import os
import struct
import urllib.request

import pytest
import trio
import trio.testing

from pnsq.client import (
    ConnectionClosedError,
    Consumer,
    Message,
    NsqError,
    open_connection,
    open_consumer,
    open_producer,
)
from protocol.commands import Fin, Pub
from tests.daemons import Daemon

pytestmark = pytest.mark.integration

DAEMON = os.environ.get("PNSQ_CLIENT_DAEMON", "pnsq")
TIMEOUT = 10.0


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Daemon:
    """The daemon under test: pnsq's nsqd, or the Go nsqd with PNSQ_CLIENT_DAEMON=go."""
    daemon: Daemon = request.getfixturevalue("real_nsqd" if DAEMON == "go" else "nsqd")
    return daemon


pnsq_only = pytest.mark.skipif(DAEMON == "go", reason="pnsq / youzan extension")


async def _receive(consumer: Consumer, count: int) -> list[Message]:
    out: list[Message] = []
    async for message in consumer:
        out.append(message)
        if len(out) == count:
            break
    return out


async def test_publish_then_consume_100(server: Daemon) -> None:
    bodies = [f"message {i}".encode() for i in range(100)]
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            assert producer.connection.features["max_rdy_count"] > 0
            async with trio.open_nursery() as nursery:  # pipelined on one connection
                for body in bodies:
                    nursery.start_soon(producer.publish, "t100", body)
        async with open_consumer(server.tcp_address, "t100", "ch", max_in_flight=30) as consumer:
            received: list[bytes] = []
            async for message in consumer:
                assert message.attempts == 1
                assert len(message.id) == 16
                received.append(message.body)
                await message.finish()
                if len(received) == len(bodies):
                    break
    assert sorted(received) == sorted(bodies)


async def test_mpublish_1000(server: Daemon) -> None:
    bodies = [struct.pack(">I", i) * 4 for i in range(1000)]
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            await producer.mpublish("tmpub", bodies)
        async with open_consumer(
            server.tcp_address, "tmpub", "ch", max_in_flight=200, auto_finish=True
        ) as consumer:
            received = [m.body for m in await _receive(consumer, len(bodies))]
            # nothing more: every message arrived exactly once
            with trio.move_on_after(0.3):
                extra = await consumer.receive()
                pytest.fail(f"unexpected extra message {extra}")
    assert sorted(received) == sorted(bodies)


async def test_dpublish_arrives_after_the_delay(server: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_consumer(server.tcp_address, "tdefer", "ch") as consumer:
            async with open_producer(server.tcp_address) as producer:
                start = trio.current_time()
                await producer.dpublish("tdefer", b"later", 1000)
            message = await consumer.receive()
            elapsed = trio.current_time() - start
            await message.finish()
    assert message.body == b"later"
    # Go nsqd scans a new channel's deferred queue only after its 5 s channel-list refresh
    assert 1.0 <= elapsed < (7.0 if DAEMON == "go" else 2.0)


async def test_requeue_redelivers_with_one_more_attempt(server: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            await producer.publish("treq", b"again")
        async with open_consumer(server.tcp_address, "treq", "ch", max_in_flight=1) as consumer:
            first = await consumer.receive()
            assert first.attempts == 1
            await first.requeue(0)
            second = await consumer.receive()
            await second.finish()
    assert second.id == first.id
    assert second.body == b"again"
    assert second.attempts == 2


async def test_touch_keeps_a_message_in_flight(server: Daemon) -> None:
    """msg_timeout 1 s: the touched message stays in flight for 2.5 s, the other times out."""
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            await producer.mpublish("ttouch", [b"touched", b"left alone"])
        async with open_consumer(
            server.tcp_address, "ttouch", "ch", max_in_flight=2, msg_timeout_ms=1000
        ) as consumer:
            assert consumer.connection.features["msg_timeout"] == 1000
            first = {m.body: m for m in await _receive(consumer, 2)}
            touched = first[b"touched"]
            redelivered: list[Message] = []

            async def collect() -> None:
                async for message in consumer:
                    redelivered.append(message)
                    await message.finish()

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect)
                # touch every 0.3 s for 2.5 s (and until the other message timed out)
                while trio.current_time() - start < 2.5 or not redelivered:
                    await trio.sleep(0.3)
                    await touched.touch()
                nursery.cancel_scope.cancel()
            await touched.finish()
            # a PUB on the same connection: its OK comes after any E_FIN_FAILED
            await consumer.connection.command(Pub("ttouch-barrier", b"x"))
            assert consumer.connection.failed_acks == 0
    assert [(m.body, m.attempts) for m in redelivered] == [(b"left alone", 2)]


@pnsq_only
async def test_publish_traced_id_carries_the_trace_id(server: Daemon) -> None:
    trace_id = 0x0123_4567_89AB_CDEF
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            await producer.publish("ttrace", b"first")
            message_id, offset = await producer.publish_traced("ttrace", b"traced", trace_id)
        async with open_consumer(server.tcp_address, "ttrace", "ch", auto_finish=True) as consumer:
            seen = {m.body: m for m in await _receive(consumer, 2)}
    assert len(message_id) == 16
    assert message_id[8:] == struct.pack(">Q", trace_id)
    assert offset > 0  # after the first message
    traced = seen[b"traced"]
    assert traced.id == message_id
    assert traced.trace_id == trace_id
    assert seen[b"first"].trace_id == 0


async def test_error_frame_raises_nsq_error_with_nsqds_text(server: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            first = producer.connection
            with pytest.raises(NsqError) as info:
                await producer.publish("bad!topic", b"x")
            # fatal: nsqd closes the connection; the producer reconnects for the next publish
            await producer.publish("fine", b"x")
            assert first.closed
            assert producer.connection is not first
        async with open_producer(server.tcp_address, max_attempts=1) as producer:
            with pytest.raises(NsqError):
                await producer.publish("bad!topic", b"x")
            with trio.fail_after(5):
                while not producer.connection.closed:
                    await trio.sleep(0.01)
            await producer.publish("fine", b"x")  # a closed connection is replaced up front
    assert info.value.text == 'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'
    assert info.value.code == "E_BAD_TOPIC"
    assert info.value.fatal


async def test_non_fatal_fin_failure_keeps_the_connection(server: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_consumer(server.tcp_address, "tfin", "ch") as consumer:
            conn = consumer.connection
            await conn.send(Fin(b"0123456789abcdef"))
            assert await conn.command(Pub("tfin", b"after")) == b"OK"
            assert conn.failed_acks == 1
            message = await consumer.receive()
            await message.finish()
            assert message.body == b"after"


async def test_heartbeats_are_answered(server: Daemon) -> None:
    """heartbeat 1 s: nsqd drops a client after 2 s without a command unless it answers NOP."""
    with trio.fail_after(TIMEOUT):
        async with open_connection(server.tcp_address, heartbeat_interval_ms=1000) as conn:
            await trio.sleep(2.5)
            assert await conn.command(Pub("thb", b"alive")) == b"OK"


async def test_cancelled_publishes_keep_replies_matched(server: Daemon) -> None:
    """Replies of cancelled commands are still consumed, so later replies reach their callers."""
    with trio.fail_after(TIMEOUT):
        async with open_producer(server.tcp_address) as producer:
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(producer.publish, "tcancel", b"%d" % i)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            await producer.publish("tcancel", b"last")
            if DAEMON != "go":  # a traced reply: an OK matched to it would raise
                message_id, _ = await producer.publish_traced("tcancel", b"traced", 7)
                assert message_id[8:] == struct.pack(">Q", 7)


def _delete_channel(server: Daemon, topic: str, channel: str) -> None:
    url = f"http://{server.http_address}/channel/delete?topic={topic}&channel={channel}"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=5) as r:
        assert r.status == 200


async def test_consumer_without_reconnect_raises_when_nsqd_closes(server: Daemon) -> None:
    """Deleting the channel makes nsqd close its consumers."""
    with trio.fail_after(TIMEOUT):
        async with open_consumer(server.tcp_address, "tclose", "ch", reconnect=False) as consumer:
            _delete_channel(server, "tclose", "ch")
            with pytest.raises(ConnectionClosedError):
                await consumer.receive()


async def test_consumer_reconnects_when_nsqd_closes(server: Daemon) -> None:
    with trio.fail_after(TIMEOUT):
        async with open_consumer(server.tcp_address, "trecon", "ch") as consumer:
            first = consumer.connection
            _delete_channel(server, "trecon", "ch")
            while consumer.subscriptions[0].reconnects == 0 or consumer.connection.closed:
                await trio.sleep(0.05)
            assert first.closed
            async with open_producer(server.tcp_address) as producer:
                await producer.publish("trecon", b"after")
            message = await consumer.receive()
            await message.finish()
    assert message.body == b"after"
