"""Peers that misbehave at the socket level: nothing they do may end nsqd or its accept loops.

A reset storm (connect, then close with SO_LINGER 0 so the kernel sends RST) hits every listener
(TCP, HTTP, HTTPS, and the TLS upgrade on the TCP port) from several threads while a producer
publishes; nsqd keeps serving and every acknowledged message is delivered.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from protocol import Fin, Pub, Rdy, Sub
from tests.daemons import Daemon, pnsq_lookupd, pnsq_nsqd
from tests.integration.lookupd_helpers import wait_for
from tests.rawclient import RawClient
from tests.tlscerts import make_certs

pytestmark = pytest.mark.integration

RESETS = 1000
THREADS = 4
_LINGER_ZERO = struct.pack("ii", 1, 0)


def _reset(address: str, before_reset: Callable[[socket.socket], None]) -> None:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
        before_reset(sock)
    finally:
        sock.close()  # RST: the server may not even have accepted it yet


def _nothing(sock: socket.socket) -> None:
    del sock


def _send(data: bytes) -> Callable[[socket.socket], None]:
    def send(sock: socket.socket) -> None:
        sock.sendall(data)

    return send


def _storm(targets: list[tuple[str, Callable[[socket.socket], None]]], total: int) -> int:
    """``total`` resets spread over ``targets`` from :data:`THREADS` threads; returns how many
    connections the server refused outright (0 expected)."""
    refused = [0] * THREADS

    def worker(n: int) -> None:
        for i in range(n, total, THREADS):
            address, before = targets[i % len(targets)]
            try:
                _reset(address, before)
            except OSError:
                refused[n] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(refused)


class _Producer(threading.Thread):
    """Publishes numbered messages one at a time until stopped; remembers what was acked."""

    def __init__(self, daemon: Daemon, topic: str) -> None:
        super().__init__()
        self.daemon, self.topic = daemon, topic
        self.acked: list[bytes] = []
        self.error: Exception | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            client = RawClient(self.daemon.tcp_address)
            i = 0
            while not self.stop.is_set():
                body = b"m%06d" % i
                client.send(Pub(self.topic, body))
                assert client.read().data == b"OK"
                self.acked.append(body)
                i += 1
            client.close()
        except (OSError, AssertionError) as exc:  # reported by the test
            self.error = exc


def _drain(daemon: Daemon, topic: str, expected: int) -> set[bytes]:
    c = RawClient(daemon.tcp_address)
    c.send(Sub(topic, "all"), Rdy(1000))
    assert c.read().data == b"OK"
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < expected and time.monotonic() < deadline:
        frame = c.read(skip_heartbeats=True)
        assert frame.is_message, frame.data
        seen.add(frame.body)
        c.send(Fin(frame.message_id))
    c.close()
    return seen


@pytest.fixture
def tls_nsqd(tmp_path: Path) -> Iterator[Daemon]:
    certs = make_certs(tmp_path / "tls")
    daemon = pnsq_nsqd(
        tmp_path / "nsqd",
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        "--https-address=127.0.0.1:0",
    ).start()
    try:
        yield daemon
    finally:
        daemon.stop()


def _https_port(daemon: Daemon) -> int:
    for line in daemon.log_text().splitlines():
        if "HTTPS: listening on" in line:
            return int(line.rstrip().rsplit(":", 1)[1])
    raise AssertionError("no HTTPS listener in the log")


def test_a_reset_storm_on_every_listener_ends_nothing(tls_nsqd: Daemon) -> None:
    daemon = tls_nsqd
    https = f"127.0.0.1:{_https_port(daemon)}"
    tls_identify = b'IDENTIFY\n\x00\x00\x00\x11{"tls_v1": true}'
    targets = [
        (daemon.tcp_address, _nothing),  # before the server even reads
        (daemon.tcp_address, _send(b"  V2")),  # after the magic
        (daemon.tcp_address, _send(b"  V2" + tls_identify)),  # during the TLS upgrade
        (daemon.tcp_address, _send(b"  V2PUB t\n\x00\x00\x00\x10half")),  # mid-body
        (daemon.http_address, _nothing),
        (daemon.http_address, _send(b"POST /pub?topic=t HTTP/1.1\r\nContent-Length: 9\r\n\r\n")),
        (https, _nothing),
        (https, _send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")),  # a ClientHello's start
    ]
    producer = _Producer(daemon, "storm")
    producer.start()
    try:
        refused = _storm(targets, RESETS)
    finally:
        producer.stop.set()
        producer.join(30)
    assert producer.error is None, producer.error
    assert refused == 0
    assert daemon.proc is not None
    assert daemon.proc.poll() is None, daemon.log_text()[-3000:]
    # still serving on every listener, and nothing acknowledged went missing
    after = RawClient(daemon.tcp_address)
    after.send(Pub("storm", b"after"))
    assert after.read().data == b"OK"
    after.close()
    expected = {*producer.acked, b"after"}
    assert len(producer.acked) > 0
    assert _drain(daemon, "storm", len(expected)) == expected
    assert "Traceback" not in daemon.log_text()


def test_a_reset_storm_does_not_end_nsqlookupd(tmp_path: Path) -> None:
    lookupd = pnsq_lookupd(tmp_path / "lookupd").start()
    try:
        targets = [
            (lookupd.tcp_address, _nothing),
            (lookupd.tcp_address, _send(b"  V1")),
            (lookupd.tcp_address, _send(b"  V1IDENTIFY\n\x00\x00\x00\x02{}")),
            (lookupd.http_address, _nothing),
        ]
        assert _storm(targets, RESETS // 2) == 0
        assert lookupd.proc is not None
        assert lookupd.proc.poll() is None, lookupd.log_text()
        # still answering (within a few seconds: its backlog of resets on a loaded machine)
        wait_for(lookupd._ping, timeout=10, what="lookupd answering /ping after the storm")
        assert "Traceback" not in lookupd.log_text()
    finally:
        lookupd.stop()
