"""A leader that hangs (SIGSTOP) or is cut off closes nothing: a consumer's connection to it
heard nothing and waited until it came back, while lookupd had promoted another leader within
seconds (an audit's consumers waited out 100 s stops). Now the connection is given up after two
heartbeat intervals of silence, and a consumer that knows the leaders moves each subscription
whose partition is led elsewhere. On memory streams, with a virtual clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pnsq.client.connection import Connection
from pnsq.client.consumer import _watch_leaders
from pnsq.client.errors import ConnectionClosedError, NsqHTTPError
from pnsq.client.routing import PartitionInfo, TopicPartitions
from pnsq.client.subscription import SubscribeSpec, Subscription
from protocol import NEED_DATA, CommandParser, Nop, Pub, SubMode
from protocol.frames import encode_response


async def _nsqd(stream: trio.abc.Stream, heartbeats: float | None) -> None:
    """Answers each command but NOP with OK; sends a heartbeat every ``heartbeats`` seconds
    (None: goes silent after its answers, as a stopped process)."""
    parser = CommandParser()

    async def beat() -> None:
        while heartbeats is not None:
            await trio.sleep(heartbeats)
            await stream.send_all(encode_response(b"_heartbeat_"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(beat)
        while data := await stream.receive_some(65536):
            parser.receive_data(data)
            while (command := parser.next_event()) is not NEED_DATA:
                if not isinstance(command, Nop):  # the answer to a heartbeat has none
                    await stream.send_all(encode_response(b"OK"))
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("heartbeats", "closed"), [(None, True), (25.0, False)])
async def test_two_heartbeat_intervals_of_silence_end_the_connection(
    heartbeats: float | None, closed: bool, autojump_clock: trio.testing.MockClock
) -> None:
    client, server = trio.testing.memory_stream_pair()
    conn = Connection(client, "nsqd:4150", read_timeout=60.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._run)
        nursery.start_soon(_nsqd, server, heartbeats)
        assert await conn.command(Pub("t", b"x")) == b"OK"
        started = trio.current_time()
        await trio.sleep(59.0)
        assert not conn.closed
        await trio.sleep(300.0)
        assert conn.closed is closed
        if closed:
            assert isinstance(conn.close_reason, ConnectionClosedError)
            assert str(conn.close_reason) == "nothing from nsqd at nsqd:4150 for 60s"
            assert trio.current_time() - started < 365
        nursery.cancel_scope.cancel()


async def test_a_subscription_whose_partition_is_led_elsewhere_gives_its_connection_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, server = trio.testing.memory_stream_pair()
    conn = Connection(client, "old:4150", read_timeout=None)
    spec = SubscribeSpec("t", "c", SubMode.PLAIN, None, reconnect=True)
    sub = Subscription(spec, 0, "old:4150", rdy=lambda: 1, deliver=print, fail=print)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._run)
        nursery.start_soon(_nsqd, server, None)
        assert await conn.command(Pub("t", b"x")) == b"OK"
        sub.connection = conn
        sub.leader_moved("old:4150")  # the same leader: kept
        assert not conn.closed
        sub.leader_moved("new:4150")
        assert conn.closed
        assert str(conn.close_reason) == "t/0 is led at new:4150 now"
        with pytest.raises(ConnectionClosedError):
            await conn.command(Pub("t", b"y"))
        nursery.cancel_scope.cancel()


async def test_the_leader_watch_outlives_failed_lookups_and_moves_the_subscription(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A lookup that fails (lookupd down, a 500) is tried again at the next tick; the consumer
    is not ended by it. Once lookupd names another leader, the subscription moves."""

    class Flaky:
        calls = 0

        async def get(self, topic: str, *, refresh: bool = False) -> TopicPartitions | None:
            self.calls += 1
            if self.calls == 1:
                raise NsqHTTPError(500, "INTERNAL_ERROR")
            if self.calls == 2:
                raise OSError("connection refused")
            info = PartitionInfo(0, 0, 0, "new:4150", "new:4151")
            return TopicPartitions(topic, 1, False, False, (info,))

    client, server = trio.testing.memory_stream_pair()
    conn = Connection(client, "old:4150", read_timeout=None)
    spec = SubscribeSpec("t", "c", SubMode.PLAIN, None, reconnect=True)
    sub = Subscription(spec, 0, "old:4150", rdy=lambda: 1, deliver=print, fail=print)
    routes = Flaky()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._run)
        nursery.start_soon(_nsqd, server, None)
        sub.connection = conn
        nursery.start_soon(_watch_leaders, routes, "t", [sub])
        with trio.fail_after(10):
            while not conn.closed:
                await trio.sleep(0.1)
        assert routes.calls == 3
        assert str(conn.close_reason) == "t/0 is led at new:4150 now"
        nursery.cancel_scope.cancel()
