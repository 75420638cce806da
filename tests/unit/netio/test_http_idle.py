"""The HTTP server's idle timer, on a real loopback socket under a mock clock: a keep-alive
connection is closed once it has been idle for the keep-alive timeout (60 s) since its last
response, never while a request is being served, and at once when the client has closed its
side with nothing left to answer.

One idle watch per connection, its deadline moved by each request and response
(``pnsq._netio.http_connection``), replaced hypercorn's task per idle period."""

from __future__ import annotations

import logging
import socket
import struct
from typing import Any

import trio
import trio.testing

from pnsq._netio.http import Receive, Scope, Send, lifespan, send_response, serve_http

KEEP_ALIVE = 60.0  # serve_http's keep-alive timeout
LOG = logging.getLogger("test.http_idle")


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """``/sleep?<seconds>`` answers after that many seconds; anything else at once."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    await receive()
    if scope["path"] == "/poll":  # a long poll that gives up, unanswered, when its client leaves
        while (await receive())["type"] != "http.disconnect":
            pass
        return
    if scope["path"] == "/sleep":
        await trio.sleep(float(scope["query_string"]))
    await send_response(send, 200, b"OK", b"text/plain")


async def serve(nursery: trio.Nursery) -> trio.SocketStream:
    port: Any = await nursery.start(
        lambda task_status: serve_http(
            app, "127.0.0.1", 0, log=LOG, errorlog="test.http_idle", task_status=task_status
        )
    )
    return await trio.open_tcp_stream("127.0.0.1", port)


async def exchange(stream: trio.SocketStream, target: str) -> None:
    await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    reply = b""
    while not reply.endswith(b"OK"):
        data = await stream.receive_some(4096)
        assert data, reply
        reply += data
    assert reply.startswith(b"HTTP/1.1 200 ")


async def closed_after(stream: trio.SocketStream) -> float:
    """Seconds until the server closes ``stream`` (nothing else may arrive meanwhile)."""
    start = trio.current_time()
    assert await stream.receive_some(4096) == b""
    return trio.current_time() - start


async def test_an_idle_connection_closes_after_the_keep_alive_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        stream = await serve(nursery)
        for _ in range(3):  # each response starts the timer again
            await exchange(stream, "/ping")
            await trio.sleep(KEEP_ALIVE - 1)
        await exchange(stream, "/ping")
        assert KEEP_ALIVE <= await closed_after(stream) < KEEP_ALIVE + 1
        nursery.cancel_scope.cancel()


async def test_a_request_served_longer_than_the_timeout_is_not_cut(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        stream = await serve(nursery)
        await trio.sleep(KEEP_ALIVE / 2)  # idle from the connection's start
        start = trio.current_time()
        await exchange(stream, f"/sleep?{3 * KEEP_ALIVE}")
        assert trio.current_time() - start >= 3 * KEEP_ALIVE
        assert KEEP_ALIVE <= await closed_after(stream) < KEEP_ALIVE + 1
        nursery.cancel_scope.cancel()


async def test_a_half_closed_connection_closes_once_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        stream = await serve(nursery)
        await exchange(stream, "/ping")
        await stream.send_eof()  # idle and the client gone: closed at once
        assert await closed_after(stream) < 1

        stream = await serve(nursery)
        await stream.send_all(b"GET /sleep?5 HTTP/1.1\r\nHost: x\r\n\r\n")
        await stream.send_eof()  # busy: answered, then closed
        start = trio.current_time()
        reply = b""
        while data := await stream.receive_some(4096):
            reply += data
        assert reply.startswith(b"HTTP/1.1 200 ")
        assert reply.endswith(b"OK")
        assert 5 <= trio.current_time() - start < 6
        nursery.cancel_scope.cancel()


async def test_a_request_left_unanswered_after_the_client_went_closes_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        stream = await serve(nursery)
        await stream.send_all(b"GET /poll HTTP/1.1\r\nHost: x\r\n\r\n")
        await trio.sleep(1)
        await stream.send_eof()  # the app sees its client go and ends without a reply
        with trio.fail_after(3 * KEEP_ALIVE):  # not held until the server stops
            assert await closed_after(stream) < 1
        nursery.cancel_scope.cancel()


async def test_a_connection_reset_before_its_reply_closes_once_the_app_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        stream = await serve(nursery)
        await stream.send_all(b"GET /sleep?5 HTTP/1.1\r\nHost: x\r\n\r\n")
        await trio.sleep(1)
        # a reset, not a FIN: the reply's send fails, so no response completes
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()
        await trio.sleep(10)
        assert _connection_tasks(nursery) == 0
        nursery.cancel_scope.cancel()


def _connection_tasks(nursery: trio.Nursery) -> int:
    """Tasks below ``nursery`` that serve one connection (the idle watch among them)."""
    count = 0
    for task in nursery.child_tasks:
        if task.name.endswith("_idle_timeout"):
            count += 1
        for child in task.child_nurseries:
            count += _connection_tasks(child)
    return count


async def test_every_connection_task_ends_with_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        streams = [await serve(nursery) for _ in range(3)]
        await exchange(streams[0], "/ping")  # keep-alive: its watch runs until it closes
        await trio.sleep(1)
        assert _connection_tasks(nursery) >= 1
        # closed by the server after a Connection: close request
        await streams[1].send_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while await streams[1].receive_some(4096):
            pass
        # closed by the client in the middle of a request
        await streams[2].send_all(b"GET /sleep?5 HTTP/1.1\r\nHost: x\r\n\r\n")
        await trio.sleep(1)
        await streams[2].aclose()
        await trio.sleep(10)
        assert _connection_tasks(nursery) == 1  # the keep-alive connection's only
        await trio.sleep(KEEP_ALIVE)
        assert _connection_tasks(nursery) == 0
        nursery.cancel_scope.cancel()
