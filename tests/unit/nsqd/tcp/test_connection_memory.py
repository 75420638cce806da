"""What a connection holds is given back when it ends, without waiting for Python's cycle
collector: a stranger's MPUB bodies cut short (up to --max-body-size each) grew the daemon by
hundreds of megabytes a round of connections."""

from __future__ import annotations

import gc
import socket
import struct
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from nsqd.tcp.session import Session
from nsqd.tcp.settings import SessionSettings
from tests.unit.nsqd.tcp.test_publish_reactor import connect, listening

ELEMENT = 1_000_000  # each of the MPUB's four messages, with its size (the limit is 1 MiB)
SENT = 3_000_000  # of the body's 4 MB, what arrives before the client closes its side
CONNECTIONS = 4


@contextmanager
def traced_without_the_cycle_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        if enabled:
            gc.enable()


def traced() -> int:
    return tracemalloc.get_traced_memory()[0]


async def test_a_body_cut_short_is_freed_when_its_connection_ends(tmp_path: Path) -> None:
    element = b"x" * (ELEMENT - 4)
    body = struct.pack(">I", 4) + (struct.pack(">I", len(element)) + element) * 4
    cut = b"MPUB t\n" + struct.pack(">I", len(body)) + body[:SENT]
    with traced_without_the_cycle_collector():
        async with listening(tmp_path) as (_broker, _server, port):
            baseline = traced()
            for _ in range(CONNECTIONS):
                client = await connect(port)
                await client.stream.send_all(cut)
                await client.stream.send_eof()
                kind, data = await client.frame()  # nsqd's read error, then the close
                assert (kind, data) == (1, b"E_BAD_MESSAGE MPUB failed to read message body")
                await client.stream.aclose()
            with trio.fail_after(10):  # fails without the release: nothing would free it
                while traced() - baseline > SENT:
                    await trio.sleep(0.01)


def sessions_left() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, Session))


async def test_a_closed_connection_leaves_nothing_for_the_cycle_collector(tmp_path: Path) -> None:
    """A session's parts refer back to it (the consumer's owner, the parser's command table):
    each closed connection waited for the collector's rare full pass (~75 MB for 10,000
    connections, then a pause of seconds to free them). Freed as they end now."""
    with traced_without_the_cycle_collector():
        async with listening(tmp_path) as (_broker, _server, port):
            before = sessions_left()
            for n in range(20):
                client = await connect(port)
                if n % 2:  # a consumer, and a plain connection
                    await client.stream.send_all(b"SUB t c\nRDY 1\n")
                    assert await client.frame() == (0, b"OK")
                await client.stream.aclose()
            with trio.fail_after(10):  # fails without: nothing would free them
                while sessions_left() > before:
                    await trio.sleep(0.01)


async def test_a_publisher_that_reads_no_replies_is_read_no_further(tmp_path: Path) -> None:
    """nsqd stops reading a client whose replies it cannot write; the publish reactor read on
    and queued an OK per PUB without bound (a stranger's connection grew the daemon by
    megabytes a second). Bounded now by --max-pending-output-bytes' share."""
    bound = 64 * 1024
    pub = b"PUB t\n" + struct.pack(">I", 1) + b"x"
    settings = SessionSettings(max_pending_output_bytes=bound)
    async with listening(tmp_path, settings) as (broker, server, port):
        client = await connect(port)
        client.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with trio.move_on_after(3):  # until the daemon stops reading us
            while True:
                await client.stream.send_all(pub * 1000)
        (session,) = server.sessions
        assert session.output.backlog <= bound + 64 * 1024  # (one read's replies past it)
        stored = broker.topics["t"].partitions[0].log.end_offset
        await client.stream.aclose()
    assert stored < 1_000_000  # it stopped reading: not everything sent was taken


async def test_a_departed_consumer_s_unsent_messages_are_let_go_at_once(tmp_path: Path) -> None:
    """A consumer that leaves holding messages keeps its session until they time out (its
    in-flight entries name it; msg_timeout up to 15 minutes), as nsqd keeps the messages;
    what its socket had not taken (up to --max-pending-output-bytes) goes when it leaves."""
    body = b"m" * 100_000
    async with listening(tmp_path) as (_broker, server, port):
        publisher = await connect(port)
        for _ in range(40):
            await publisher.stream.send_all(b"PUB t\n" + struct.pack(">I", len(body)) + body)
            assert await publisher.frame() == (0, b"OK")
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await stream.send_all(b"  V2SUB t c\nRDY 40\n")
        with trio.fail_after(10):  # it reads nothing: the daemon's output for it backs up
            while not [s for s in server.sessions if s.output.backlog > 500_000]:
                await trio.sleep(0.01)
        (session,) = [s for s in server.sessions if s.output.backlog > 500_000]
        await stream.aclose()
        with trio.fail_after(10):
            while session in server.sessions:
                await trio.sleep(0.01)
        assert session.consuming.in_flight > 0  # its messages still name it
        assert session.output.backlog == 0  # but nothing is kept to send
