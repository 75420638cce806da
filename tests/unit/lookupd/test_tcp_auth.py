"""lookupd's V1 listener under the cluster credential, on real loopback sockets: with a secret a
peer proves it before any command (a stranger gets one error and a closed connection, no
IDENTIFY reply and no registration), a holder of the secret registers only as the node it
proved, and a silent peer is dropped after the handshake timeout; without a secret a stock
peer is served as before and a peer that opens with the handshake is told the lookupd has
none."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from lookupd.core.views import Timeouts
from lookupd.state.cluster import Cluster
from lookupd.state.store import MetadataStore
from lookupd.tcp.auth import NO_SECRET, LinkAuth
from lookupd.tcp.server import LookupTCPServer
from pnsq._netio.handshake import HANDSHAKE_TIMEOUT, run_handshake
from protocol.cluster_auth import (
    DIALER,
    FrameType,
    Handshake,
    HandshakeError,
    HandshakeRefused,
)
from protocol.lookup_v1 import MAGIC_V1, encode_command, encode_identify
from tests.unit.lookupd.tcp_helpers import LOOKUPD_INFO
from tests.v1client import v1_replies

SECRET = b"s3cret"
NODE = {"broadcast_address": "10.0.0.7", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}
NODE_ID = "10.0.0.7:4150"


async def _serve(tmp_path: Path, secret: bytes) -> AsyncIterator[tuple[LookupTCPServer, int]]:
    server = LookupTCPServer(Cluster(MetadataStore(tmp_path / "meta"), Timeouts()), secret)
    server.set_reply_info(LOOKUPD_INFO)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        yield server, port
        nursery.cancel_scope.cancel()


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[LookupTCPServer, int]]:
    async for served in _serve(tmp_path, SECRET):
        yield served


@pytest.fixture
async def open_lookupd(tmp_path: Path) -> AsyncIterator[tuple[LookupTCPServer, int]]:
    async for served in _serve(tmp_path, b""):
        yield served


async def _until_closed(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    with trio.fail_after(HANDSHAKE_TIMEOUT + 2):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def _prove(port: int, secret: bytes, node_id: str) -> tuple[trio.SocketStream, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(MAGIC_V1)
    shake = Handshake(secret, DIALER, MAGIC_V1, node_id)
    assert await run_handshake(stream, shake) == b""
    assert shake.peer_identity is not None
    return stream, shake.peer_identity


async def test_a_strangers_identify_gets_one_error_and_a_close(
    secured: tuple[LookupTCPServer, int],
) -> None:
    server, port = secured
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(
            MAGIC_V1 + encode_identify(NODE) + encode_command("REGISTER", "t") + b"PING\n"
        )
        data = await _until_closed(stream)
    assert v1_replies(data) == [b"E_CLUSTER_AUTH cluster handshake required (docs/security.md)"]
    assert server.cluster.registry.peers == {}
    assert server.cluster.registry.topics == {}


async def test_a_holder_of_the_secret_registers_as_the_node_it_proved(
    secured: tuple[LookupTCPServer, int],
) -> None:
    server, port = secured
    stream, lookupd_id = await _prove(port, SECRET, NODE_ID)
    async with stream:
        assert lookupd_id == "127.0.0.1:4160"
        await stream.send_all(encode_identify(NODE) + encode_command("REGISTER", "t"))
        data = b""
        with trio.fail_after(5):
            while len(v1_replies(data)) < 2:
                data += await stream.receive_some(65536)
        registered = [p.node_id for p in server.cluster.registry.peers.values()]
    reply, ok = v1_replies(data)
    assert json.loads(reply)["tcp_port"] == 4160
    assert ok == b"OK"
    assert registered == [NODE_ID]
    assert list(server.cluster.registry.topics) == ["t"]


async def test_an_identify_naming_another_node_is_refused(
    secured: tuple[LookupTCPServer, int],
) -> None:
    server, port = secured
    stream, _ = await _prove(port, SECRET, "10.0.0.8:4150")
    async with stream:
        await stream.send_all(encode_identify(NODE))
        data = await _until_closed(stream)
    assert v1_replies(data) == [
        b"E_CLUSTER_AUTH IDENTIFY names 10.0.0.7:4150, the link proved 10.0.0.8:4150"
    ]
    assert server.cluster.registry.peers == {}
    assert server.cluster.registry.topics == {}


async def test_a_wrong_secret_gets_one_refusal_frame(
    secured: tuple[LookupTCPServer, int],
) -> None:
    server, port = secured
    with pytest.raises(HandshakeError, match="E_CLUSTER_AUTH"):
        await _prove(port, b"wrong", NODE_ID)
    assert server.cluster.registry.peers == {}
    assert server.cluster.registry.topics == {}


async def test_a_lookupd_without_a_secret_serves_a_stock_peer_as_before(
    open_lookupd: tuple[LookupTCPServer, int],
) -> None:
    server, port = open_lookupd
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(MAGIC_V1 + encode_identify(NODE))
        data = b""
        with trio.fail_after(5):
            while not v1_replies(data):
                data += await stream.receive_some(65536)
        registered = [p.node_id for p in server.cluster.registry.peers.values()]
    assert json.loads(v1_replies(data)[0])["http_port"] == 4161
    assert registered == [NODE_ID]


async def test_a_lookupd_without_a_secret_refuses_the_handshake(
    open_lookupd: tuple[LookupTCPServer, int],
) -> None:
    _, port = open_lookupd
    with pytest.raises(HandshakeRefused, match=r"holds no cluster secret"):
        await _prove(port, SECRET, NODE_ID)


@pytest.mark.parametrize("opening", [b"", MAGIC_V1, MAGIC_V1 + b"\x00\x00"])
async def test_a_silent_peer_is_dropped_after_the_handshake_timeout(
    autojump_clock: trio.abc.Clock, opening: bytes
) -> None:
    del autojump_clock
    lookupd_side, peer = trio.testing.memory_stream_pair()

    async def identity() -> str:
        return "127.0.0.1:4160"

    auth = LinkAuth(SECRET, identity, trio.current_time)
    await peer.send_all(opening)
    started = trio.current_time()
    opened: list[object] = []

    async def open_link() -> None:
        opened.append(await auth.open(lookupd_side, "10.0.0.9:5555"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_link)
        sent = await peer.receive_some(65536)
        refused_after = trio.current_time() - started
    assert refused_after == pytest.approx(HANDSHAKE_TIMEOUT)
    assert sent[4] == FrameType.REFUSAL
    assert opened == [None]


def test_the_no_secret_refusal_names_the_flag() -> None:
    assert "--cluster-secret-file" in NO_SECRET
