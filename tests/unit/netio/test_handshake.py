"""The cluster handshake on Trio streams: two sides holding the secret agree over a real stream
pair, a silent peer is given up on after HANDSHAKE_TIMEOUT, and failures are logged at most
once a minute per peer address."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from pnsq._netio.handshake import HANDSHAKE_TIMEOUT, FailureLog, peer_host, run_handshake
from protocol.cluster_auth import DIALER, LISTENER, Handshake, HandshakeError
from protocol.replication import MAGIC


async def test_both_sides_agree_and_keep_what_follows() -> None:
    left, right = trio.testing.memory_stream_pair()
    dialer = Handshake(b"s", DIALER, MAGIC, "d")
    listener = Handshake(b"s", LISTENER, MAGIC, "l")
    got: list[bytes] = []

    async def listen() -> None:
        got.append(await run_handshake(right, listener))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen)
        assert await run_handshake(left, dialer) == b""
        await left.send_all(b"HELLO")
    assert got[0] in (b"", b"HELLO")
    assert listener.peer_identity == "d"


async def test_a_silent_peer_times_out(autojump_clock: trio.abc.Clock) -> None:
    del autojump_clock
    _, right = trio.testing.memory_stream_pair()
    started = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await run_handshake(right, Handshake(b"s", LISTENER, MAGIC, "l"))
    assert trio.current_time() - started == pytest.approx(HANDSHAKE_TIMEOUT)


async def test_a_peer_that_closes_is_a_handshake_error() -> None:
    left, right = trio.testing.memory_stream_pair()
    await left.aclose()
    with pytest.raises(HandshakeError, match="closed"):
        await run_handshake(right, Handshake(b"s", LISTENER, MAGIC, "l"))


def test_failures_are_logged_once_a_minute_per_address(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failures = FailureLog(logging.getLogger("test.handshake"), lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.handshake"):
        for _ in range(5):
            failures.failed("10.0.0.1", "wrong proof")
        failures.failed("10.0.0.2", "wrong proof")
        now[0] = 61.0
        failures.failed("10.0.0.1", "wrong proof")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0] == "cluster handshake with 10.0.0.1 failed: wrong proof"
    assert lines[2].endswith("(4 more since the last report)")


def test_peer_host_drops_the_port() -> None:
    assert peer_host("127.0.0.1:5555") == "127.0.0.1"
    assert peer_host("[::1]:5555") == "[::1]"
    assert peer_host("unix") == "unix"
