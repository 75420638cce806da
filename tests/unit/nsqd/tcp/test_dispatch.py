"""One TCP port, several protocols: the listener routes each connection by its 4-byte magic
(V2 clients today; the replication protocol registers the same way)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from nsqd.broker import BrokerConfig, open_broker
from nsqd.tcp.server import TCPServer
from nsqd.tcp.settings import SessionSettings


async def _exchange(port: int, data: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        await stream.send_eof()
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                received += chunk
    return received


async def test_each_magic_reaches_its_protocol(tmp_path: Path) -> None:
    seen: list[tuple[str, bytes]] = []

    async def other_protocol(stream: trio.abc.Stream, remote: str, initial: bytes) -> None:
        seen.append((remote, initial))
        await stream.send_all(b"T1:" + initial)

    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker, trio.open_nursery() as n:
        server = TCPServer(broker, SessionSettings())
        server.add(b"  T1", other_protocol)
        with pytest.raises(ValueError, match="already served"):
            server.add(b"  V2", other_protocol)
        with pytest.raises(ValueError, match="not 4 bytes"):
            server.add(b"R1", other_protocol)
        port = await n.start(server.serve, "127.0.0.1", 0)
        assert await _exchange(port, b"  T1hello") == b"T1:hello"
        assert seen[0][0].startswith("127.0.0.1:")
        v2 = await _exchange(port, b"  V2PUB t\n\x00\x00\x00\x01x")
        assert v2.endswith(b"OK")  # protocol V2 as before
        bad = await _exchange(port, b"  X9")
        assert bad.endswith(b"E_BAD_PROTOCOL")
        n.cancel_scope.cancel()
