"""nsqd's HTTP API for /ping, /info, /pub, /mpub: the same table run against Go nsqd 1.3.0
(proving each expectation) and against pnsq."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from protocol import Rdy, Sub
from tests.daemons import Daemon, go_nsqd, pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

LIMITS = ("--max-msg-size=100", "--max-body-size=1000")


@pytest.fixture(scope="module", params=["go-nsqd", "pnsq"])
def daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    path: Path = tmp_path_factory.mktemp(request.param)
    make = go_nsqd if request.param == "go-nsqd" else pnsq_nsqd
    d = make(path / "data", *LIMITS).start()
    try:
        yield d
    finally:
        d.stop()


def http(
    daemon: Daemon, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes, Message]:
    """Status, body and headers (an email Message: case-insensitive, raw names kept)."""
    req = urllib.request.Request(f"http://{daemon.http_address}{path}", body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def test_ping_is_plain_ok_without_the_nsq_header(daemon: Daemon) -> None:
    status, body, headers = http(daemon, "GET", "/ping")
    assert (status, body) == (200, b"OK")
    assert "X-Nsq-Content-Type" not in headers


def test_info_has_nsqds_keys(daemon: Daemon) -> None:
    status, body, headers = http(daemon, "GET", "/info")
    assert status == 200
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"
    raw_names = [name for name, _ in headers.items()]  # as sent, not case-folded
    assert "X-Nsq-Content-Type" in raw_names  # Go's canonical casing, byte for byte
    info = json.loads(body)
    assert list(info) == [
        "version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time",
        "max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout",
        "max_deflate_level",
    ]  # fmt: skip
    assert info["version"] == "1.3.0"
    assert (info["tcp_port"], info["http_port"]) == (daemon.tcp_port, daemon.http_port)
    assert info["max_heartbeat_interval"] == 60_000_000_000  # a Go time.Duration: ns


BIN_OK = struct.pack(">iiBiBB", 2, 1, 0x61, 2, 0x62, 0x63)

CASES = [
    # method, path, body, status, reply
    ("POST", "/pub?topic=t", b"hello", 200, b"OK"),
    ("POST", "/pub?topic=t&defer=500", b"later", 200, b"OK"),
    ("POST", "/pub?topic=t", b"", 400, b'{"message":"MSG_EMPTY"}'),
    ("POST", "/pub", b"x", 400, b'{"message":"MISSING_ARG_TOPIC"}'),
    ("POST", "/pub?topic=bad!", b"x", 400, b'{"message":"INVALID_TOPIC"}'),
    ("POST", "/pub?topic=t", b"x" * 101, 413, b'{"message":"MSG_TOO_BIG"}'),
    ("POST", "/pub?topic=bad!", b"x" * 101, 413, b'{"message":"MSG_TOO_BIG"}'),  # body first
    ("POST", "/pub?topic=t&defer=abc", b"x", 400, b'{"message":"INVALID_DEFER"}'),
    ("POST", "/pub?topic=t&defer=-1", b"x", 400, b'{"message":"INVALID_DEFER"}'),
    ("POST", "/pub?topic=t&defer=3600001", b"x", 400, b'{"message":"INVALID_DEFER"}'),
    ("GET", "/pub?topic=t", None, 405, b'{"message":"METHOD_NOT_ALLOWED"}'),
    ("POST", "/mpub?topic=t", b"a\nb\n\nc\n", 200, b"OK"),
    ("POST", "/mpub?topic=t", b"\n\n", 200, b"OK"),
    ("POST", "/mpub?topic=t", b"a\n" + b"x" * 101, 413, b'{"message":"MSG_TOO_BIG"}'),
    ("POST", "/mpub?topic=t", b"x\n" * 600, 413, b'{"message":"BODY_TOO_BIG"}'),
    ("POST", "/mpub?topic=t&binary=true", BIN_OK, 200, b"OK"),
    ("POST", "/mpub?topic=t&binary=1", struct.pack(">i", 0), 413, b'{"message":"BAD_BODY"}'),
    (
        "POST",
        "/mpub?topic=t&binary=true",
        struct.pack(">ii", 1, 0),
        413,
        b'{"message":"BAD_MESSAGE"}',
    ),
    ("POST", "/mpub", b"a", 400, b'{"message":"MISSING_ARG_TOPIC"}'),
    ("GET", "/nope", None, 404, b'{"message":"NOT_FOUND"}'),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "reply"), CASES)
def test_endpoint_table(
    daemon: Daemon, method: str, path: str, body: bytes | None, status: int, reply: bytes
) -> None:
    got_status, got_body, headers = http(daemon, method, path, body)
    assert (got_status, got_body) == (status, reply)
    assert headers.get("X-Nsq-Content-Type") == "nsq; version=1.0"


def test_http_publishes_arrive_in_order_over_tcp(daemon: Daemon) -> None:
    c = RawClient(daemon.tcp_address)
    c.identify()
    c.send(Sub("httpflow", "ch"), Rdy(10))
    assert c.read().data == b"OK"
    assert http(daemon, "POST", "/pub?topic=httpflow", b"one")[0] == 200
    assert http(daemon, "POST", "/mpub?topic=httpflow", b"two\nthree")[0] == 200
    assert http(daemon, "POST", "/mpub?topic=httpflow&binary=true", BIN_OK)[0] == 200
    bodies = [c.read(skip_heartbeats=True).body for _ in range(5)]
    assert bodies == [b"one", b"two", b"three", b"a", b"bc"]


def test_non_http_bytes_get_an_http_error_at_once(daemon: Daemon) -> None:
    # go-nsq's TestProducerHTTPConnectionFails: a producer pointed at the HTTP port must
    # read "HTTP" as the first four bytes, promptly.
    s = socket.create_connection(("127.0.0.1", daemon.http_port), timeout=3)
    s.sendall(b'  V2IDENTIFY\n\x00\x00\x00\x18{"client_id":"x","a":1}')
    started = time.monotonic()
    data = s.recv(4)
    assert data == b"HTTP"
    assert time.monotonic() - started < 1.0
    s.close()
