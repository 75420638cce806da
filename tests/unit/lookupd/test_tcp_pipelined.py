"""lookupd answers a node's pipelined REGISTERs in one send per read, in order: a node that
takes on a thousand partitions (a failover) sends their REGISTERs together, and one send and
one scheduler round per reply made each REGISTER cost ~0.2 ms on a busy lookupd."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.tcp.server import LookupTCPServer
from protocol.lookup_v1 import MAGIC_V1, ResponseReader, encode_command, encode_identify
from tests.unit.lookupd.tcp_helpers import LOOKUPD_INFO

NODE = {
    "broadcast_address": "node",
    "tcp_port": 4150,
    "http_port": 4151,
    "version": "1.3.0",
    "pnsq_extensions": ["partitions"],
}
REMOTE = "127.0.0.1:5000"


class CountingStream(trio.abc.Stream):
    """The server's end of a memory stream pair, counting its sends."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sends = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sends += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _replies(stream: trio.abc.Stream, reader: ResponseReader, count: int) -> list[bytes]:
    replies: list[bytes] = []
    with trio.fail_after(5):
        while len(replies) < count:
            reply = reader.next_response()
            if reply is None:
                chunk = await stream.receive_some(65536)
                assert chunk, "lookupd closed the connection"
                reader.receive_data(chunk)
            else:
                replies.append(reply)
    return replies


async def _session(
    tmp_path: Path, commands: bytes, count: int
) -> tuple[list[bytes], int, dict[str, set[int]]]:
    """IDENTIFY, then ``commands`` in one write: the ``count`` replies after IDENTIFY's, the
    server's sends for them, and the partitions then registered per topic."""
    cluster = Cluster(MetadataStore(tmp_path / "meta"), Timeouts())
    server = LookupTCPServer(cluster)
    server.set_reply_info(LOOKUPD_INFO)
    client, server_end = trio.testing.memory_stream_pair()
    counted = CountingStream(server_end)
    reader = ResponseReader()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._handle, counted, REMOTE)
        await client.send_all(MAGIC_V1 + encode_identify(NODE))
        await _replies(client, reader, 1)
        before = counted.sends
        await client.send_all(commands)
        replies = await _replies(client, reader, count)
        await trio.testing.wait_all_tasks_blocked()
        sends = counted.sends - before
        held = {
            topic: set(producers[REMOTE].partitions)
            for topic, producers in cluster.registry.topics.items()
            if REMOTE in producers
        }
        nursery.cancel_scope.cancel()  # (the peer's registrations go with its connection)
    return replies, sends, held


async def test_pipelined_registers_are_answered_in_one_send(tmp_path: Path) -> None:
    topics = [f"t{i}" for i in range(5)]
    lines = b"".join(encode_command("REGISTER", t, n) for t in topics for n in range(100))
    replies, sends, held = await _session(tmp_path, lines, 500)
    assert replies == [b"OK"] * 500
    assert sends == 1
    assert held == {topic: set(range(100)) for topic in topics}


async def test_an_error_after_pipelined_commands_follows_their_replies(tmp_path: Path) -> None:
    lines = b"".join(encode_command("REGISTER", "t", n) for n in range(3)) + b"BOGUS\n"
    replies, _, _ = await _session(tmp_path, lines, 4)
    assert replies[:3] == [b"OK"] * 3
    assert replies[3].startswith(b"E_INVALID")
