"""lookupd's TCP listener answers IDENTIFY with its own ports only once both listeners are
bound: a node that identified earlier got ``http_port`` 0 and kept it for the connection's
life, so it polled ``host:0`` for its assignments and could not create topics through lookupd
(seen in scripts/run: nodes start with the lookupds)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import trio

from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.tcp.server import LookupTCPServer
from protocol.lookup_v1 import MAGIC_V1, encode_identify
from tests.unit.lookupd.tcp_helpers import LOOKUPD_INFO

#: a node's IDENTIFY (the fields nsqlookupd requires)
NODE = {"broadcast_address": "node", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}


async def _reply(stream: trio.SocketStream) -> dict[str, object]:
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await stream.receive_some(4096)
        assert chunk, "lookupd closed the connection"
        data += chunk
    parsed: dict[str, object] = json.loads(data[4:])
    return parsed


async def _identify(nursery: trio.Nursery, server: LookupTCPServer) -> trio.SocketStream:
    """Start ``server`` in ``nursery``, connect and send a node's IDENTIFY."""
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(MAGIC_V1 + encode_identify(NODE))
    return stream


def _server(tmp_path: Path) -> LookupTCPServer:
    return LookupTCPServer(Cluster(MetadataStore(tmp_path / "meta"), Timeouts()))


async def test_an_identify_before_the_ports_are_known_waits_for_them(tmp_path: Path) -> None:
    server = _server(tmp_path)
    async with trio.open_nursery() as nursery:
        async with await _identify(nursery, server) as stream:
            with trio.move_on_after(0.2):
                early = await stream.receive_some(4096)
                raise AssertionError(f"IDENTIFY answered before the ports were known: {early!r}")
            server.set_reply_info(LOOKUPD_INFO)
            with trio.fail_after(5):
                reply = await _reply(stream)
        nursery.cancel_scope.cancel()
    assert reply["http_port"] == 4161
    assert reply["tcp_port"] == 4160
    assert reply["broadcast_address"] == "127.0.0.1"


async def test_once_the_ports_are_known_identify_is_answered_at_once(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.set_reply_info(LOOKUPD_INFO)
    async with trio.open_nursery() as nursery:
        async with await _identify(nursery, server) as stream:
            with trio.fail_after(5):
                reply = await _reply(stream)
        nursery.cancel_scope.cancel()
    assert reply["http_port"] == 4161
