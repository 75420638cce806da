"""HTTP connections a fuzzer opens: requests pipelined after ``Connection: close``, and clients
that half-close (with no request, or after a keep-alive one) and wait for the server to close.

hypercorn 0.18 sent the closing EOF outside its send lock: the 400 it answers the extra request
with met the EOF, trio raised ``BusyResourceError`` out of the connection's task, and hypercorn's
server nursery (the daemon's) ended with it. And it kept a connection whose client had closed
its side until the 60 s keep-alive timer ran out, holding a descriptor each (Go nsqd closes at
once). The socket fuzzer found both within its first seconds. Both daemons serve HTTP through
``pnsq._netio.http``, so both are checked; Go nsqd 1.3.0 runs the half-close case beside pnsq.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_nsqd, pnsq_lookupd, pnsq_nsqd
from tests.fuzz.driver import Engine, Stats
from tests.fuzz.mutate import Ending, Input, Target
from tests.fuzz.run import descriptors, sockets_settle

pytestmark = pytest.mark.integration

CONNECTIONS = 2000
HANG = 10.0  # seconds without the server closing a finished connection: a hang (Go: ~0 s)


def _request(path: str, close: bool = True) -> bytes:
    connection = "Connection: close\r\n" if close else ""
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{connection}\r\n".encode()


def _run(daemon: Daemon, data: bytes, count: int) -> Stats:
    address = ("127.0.0.1", daemon.http_port)
    engine = Engine(address, address, connections=32, hang_timeout=HANG)
    item = Input(Target.HTTP, data, Ending.SHUT, "test")
    return engine.run(itertools.repeat(item), count, 300, lambda: daemon.proc.poll() is None)


@pytest.mark.parametrize(
    ("start", "path"),
    [
        pytest.param(pnsq_nsqd, "/stats?format=json", id="nsqd"),
        pytest.param(pnsq_lookupd, "/topics", id="lookupd"),
    ],
)
def test_requests_after_connection_close_end_only_their_connection(
    tmp_path: Path, start: Callable[[Path], Daemon], path: str
) -> None:
    daemon = start(tmp_path / "d").start()
    try:
        stats = _run(daemon, _request(path) * 2, CONNECTIONS)
        assert daemon.proc is not None
        assert daemon.proc.poll() is None, daemon.log_text()[-3000:]
        assert "Traceback" not in daemon.log_text()
        assert not stats.hangs
        assert sum(stats.http_statuses.values()) >= CONNECTIONS  # every connection was answered
        assert daemon._ping()
    finally:
        daemon.stop()


@pytest.mark.parametrize("start", [pnsq_nsqd, go_nsqd], ids=["pnsq", "go"])
@pytest.mark.parametrize(
    "data",
    [pytest.param(b"", id="no-request"), pytest.param(_request("/ping", False), id="keep-alive")],
)
def test_a_half_closed_connection_is_closed_by_the_server(
    tmp_path: Path, start: Callable[[Path], Daemon], data: bytes
) -> None:
    daemon = start(tmp_path / "d").start()
    try:
        assert daemon.proc is not None
        sockets_before, _ = descriptors(daemon.proc.pid)
        stats = _run(daemon, data, 300)
        assert not stats.hangs  # each connection closed by the server, not by our timer
        assert stats.server_closed == 300
        assert stats.http_statuses == ({"200": 300} if data else {})
        assert sockets_settle(daemon.proc.pid, sockets_before) <= sockets_before
    finally:
        daemon.stop()
