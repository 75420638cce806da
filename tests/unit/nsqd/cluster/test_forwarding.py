"""A stock publish forwarded to a leader that answers it leads the partition no more (a move, a
drain, a hand-over since this node looked it up) is looked up again and sent to the new leader:
the stock client gets ``OK``, not a fatal ``E_PUB_FAILED ... E_FAILED_ON_NOT_LEADER``."""

from __future__ import annotations

import struct
from collections.abc import Callable

import httpx
import trio

from nsqd.cluster.forwarding import Forwarder, ForwardError
from protocol.cluster_links import FORWARDING

ERROR_FRAME, RESPONSE_FRAME = 1, 0


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">ii", len(data) + 4, kind) + data


async def serve_leader(
    answer: bytes, kind: int, received: list[bytes], task_status: trio.TaskStatus[int]
) -> None:
    """A leader at a loopback port: each PUB it reads is answered with ``answer``."""

    async def session(stream: trio.SocketStream) -> None:
        buffer = b""
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            buffer += data
            if buffer.startswith(FORWARDING):
                buffer = buffer[len(FORWARDING) :]
            while b"\n" in buffer:
                line, rest = buffer.split(b"\n", 1)
                if len(rest) < 4:
                    break
                (size,) = struct.unpack(">I", rest[:4])
                if len(rest) < 4 + size:
                    break
                received.append(line + b" " + rest[4 : 4 + size])
                buffer = rest[4 + size :]
                await stream.send_all(frame(kind, answer))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(session, listeners)


def lookupd(leader_port: Callable[[], int]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/lookup"
        peer = {"broadcast_address": "127.0.0.1", "tcp_port": leader_port(), "http_port": 1}
        return httpx.Response(200, json={"producers": [peer], "partitions": {"0": peer}})

    return httpx.MockTransport(handler)


async def publish_through_a_move(
    *, old_answer: bytes
) -> tuple[list[bytes], list[bytes], ForwardError | None]:
    """Publish ``m`` while lookupd names the old leader, which answers ``old_answer``; lookupd
    names the new leader once the old one has answered. What each leader got, and the
    publish's error."""
    failed = None
    old_seen: list[bytes] = []
    new_seen: list[bytes] = []
    async with trio.open_nursery() as nursery:
        old = await nursery.start(serve_leader, old_answer, ERROR_FRAME, old_seen)
        new = await nursery.start(serve_leader, b"OK", RESPONSE_FRAME, new_seen)
        forwarder = Forwarder(lambda: ["lookupd:4161"], lambda: "127.0.0.1:1")
        forwarder._http = httpx.AsyncClient(transport=lookupd(lambda: new if old_seen else old))
        try:
            with trio.fail_after(10):
                await forwarder.publish("t", [b"m"])
        except ForwardError as exc:
            failed = exc
        finally:
            await forwarder.aclose()
            nursery.cancel_scope.cancel()
    return old_seen, new_seen, failed


async def test_a_leader_that_leads_no_more_is_looked_up_again() -> None:
    old_seen, new_seen, failed = await publish_through_a_move(old_answer=b"E_FAILED_ON_NOT_LEADER ")
    assert failed is None
    assert old_seen == [b"PUB t 0 m"]
    assert new_seen == [b"PUB t 0 m"]  # sent again, to the leader lookupd names now


async def test_another_refusal_is_the_clients() -> None:
    refusal = b"E_BAD_MESSAGE PUB invalid message body size 0"
    old_seen, new_seen, failed = await publish_through_a_move(old_answer=refusal)
    assert failed is not None
    assert "E_BAD_MESSAGE" in str(failed)
    assert (len(old_seen), new_seen) == (1, [])  # not sent again
