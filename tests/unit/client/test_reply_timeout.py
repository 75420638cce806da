"""A command whose reply never comes: the call ends with ReplyTimeoutError after the connection's
reply timeout, the connection closes (a late reply could not be matched), and every other command
waiting on it ends the same way. On a memory stream, with a virtual clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pnsq.client.connection import Connection
from pnsq.client.errors import ConnectionClosedError, ReplyTimeoutError
from protocol import NEED_DATA, CommandParser, Pub
from protocol.frames import encode_response


async def _answer_first_only(stream: trio.abc.Stream, commands: list[object]) -> None:
    """An nsqd that answers its first command and then goes silent (SIGSTOP)."""
    parser = CommandParser()
    while data := await stream.receive_some(65536):
        parser.receive_data(data)
        while (command := parser.next_event()) is not NEED_DATA:
            commands.append(command)
            if len(commands) == 1:
                await stream.send_all(encode_response(b"OK"))


@pytest.mark.parametrize("timeout", [0.5, 30.0])
async def test_an_overdue_reply_ends_every_waiting_call(
    timeout: float, autojump_clock: trio.testing.MockClock
) -> None:
    client, server = trio.testing.memory_stream_pair()
    conn = Connection(client, "nsqd:4150", reply_timeout=timeout)
    commands: list[object] = []
    outcomes: list[BaseException | bytes] = []

    async def publish(body: bytes) -> None:
        try:
            outcomes.append(await conn.command(Pub("t", body)))
        except ConnectionClosedError as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._run)
        nursery.start_soon(_answer_first_only, server, commands)
        assert await conn.command(Pub("t", b"first")) == b"OK"
        started = trio.current_time()
        async with trio.open_nursery() as calls:
            for body in (b"second", b"third"):
                calls.start_soon(publish, body)
        waited = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert len(commands) == 3  # both were sent: they may have taken effect
    assert [type(o) for o in outcomes] == [ReplyTimeoutError, ReplyTimeoutError]
    assert timeout <= waited < timeout + 0.1
    assert conn.closed
    with pytest.raises(ConnectionClosedError):
        await conn.command(Pub("t", b"after"))


async def test_no_reply_timeout_waits_as_long_as_it_takes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, server = trio.testing.memory_stream_pair()
    conn = Connection(client, "nsqd:4150", reply_timeout=None)
    commands: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn._run)
        nursery.start_soon(_answer_first_only, server, commands)
        assert await conn.command(Pub("t", b"first")) == b"OK"
        with trio.move_on_after(3600) as waited:
            await conn.command(Pub("t", b"second"))
        assert waited.cancelled_caught
        assert not conn.closed
        nursery.cancel_scope.cancel()
