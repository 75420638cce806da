"""The cuttable link: faithful forwarding, a silent cut, reset-on-restore, a clean close.

Each test runs a small threaded echo server on 127.0.0.1 and talks to it through a Link.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.fault.linkcut import Link, LinkClosed

MB = 1024 * 1024
CHUNK = 64 * 1024


class EchoServer:
    """Echoes every connection until its end of stream, then half-closes; one thread each."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.target = ("127.0.0.1", self.listener.getsockname()[1])
        self.accepted = 0
        self.received = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="echo-accept")
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            thread = threading.Thread(target=self._echo, args=(conn,), name="echo-conn")
            with self._lock:
                self.accepted += 1
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(CHUNK):
                with self._lock:
                    self.received += len(data)
                conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join()
        self.listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join()
        for conn in conns:
            conn.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def link(echo: EchoServer) -> Iterator[Link]:
    with Link(echo.target) as link:
        yield link


def connect(link: Link, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", link.port), timeout=timeout)


def round_trip(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(len(payload) - len(got))
        if not chunk:
            break
        got += chunk
    return got


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def assert_silent(sock: socket.socket, seconds: float) -> None:
    """Nothing arrives, and the connection is neither ended (FIN) nor reset (RST)."""
    sock.settimeout(seconds)
    with pytest.raises(TimeoutError):
        sock.recv(1)


def test_echo_round_trips_and_counts_bytes(link: Link) -> None:
    with connect(link) as sock:
        assert round_trip(sock, b"hello, link") == b"hello, link"
        assert round_trip(sock, b"x" * 100_000) == b"x" * 100_000
    wait_until(lambda: link.bytes_up == link.bytes_down == 100_011)
    assert link.accepted == 1
    assert link.address == f"127.0.0.1:{link.port}"


def _transfer(link: Link, size: int, results: dict[int, tuple[str, str]], index: int) -> None:
    """Send ``size`` random bytes, half-close, read the echo to its end; record both hashes."""
    payload = os.urandom(size)
    with connect(link, timeout=20) as sock:

        def send() -> None:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        digest = hashlib.sha256()
        while chunk := sock.recv(CHUNK):
            digest.update(chunk)
        sender.join()
    results[index] = (hashlib.sha256(payload).hexdigest(), digest.hexdigest())


def test_ten_connections_of_5mb_each_way_arrive_intact(link: Link, echo: EchoServer) -> None:
    results: dict[int, tuple[str, str]] = {}
    threads = [
        threading.Thread(target=_transfer, args=(link, 5 * MB, results, i)) for i in range(10)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 10
    for sent, echoed in results.values():
        assert sent == echoed
    assert link.bytes_up == link.bytes_down == echo.received == 50 * MB


def test_cut_stops_an_existing_connection_both_ways_without_fin_or_reset() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5.0)
    try:
        with Link(("127.0.0.1", server.getsockname()[1])) as link, connect(link) as client:
            far, _ = server.accept()
            with far:
                client.sendall(b"up")
                assert far.recv(16) == b"up"
                far.sendall(b"down")
                assert client.recv(16) == b"down"
                wait_until(lambda: (link.bytes_up, link.bytes_down) == (2, 4))
                link.cut()
                far.sendall(b"lost on the way down")
                client.sendall(b"lost on the way up")
                assert_silent(client, 1.0)
                assert_silent(far, 0.5)
                assert (link.bytes_up, link.bytes_down) == (2, 4)
    finally:
        server.close()


def test_cut_is_silent_for_old_and_new_connections(link: Link, echo: EchoServer) -> None:
    old = connect(link)
    assert round_trip(old, b"before") == b"before"
    wait_until(lambda: link.bytes_down == len(b"before"))  # the counter follows the send
    up, down = link.bytes_up, link.bytes_down
    link.cut()
    assert link.is_cut
    old.sendall(b"during the cut")
    assert_silent(old, 1.0)
    new = connect(link)  # the handshake completes, nothing after it does
    new.sendall(b"anyone there?")
    assert_silent(new, 1.0)
    assert (link.bytes_up, link.bytes_down) == (up, down)
    assert echo.received == len(b"before")
    assert echo.accepted == 1  # the held connection never reached the target
    old.close()
    new.close()


def test_restore_resets_caught_connections_and_forwards_new_ones(
    link: Link, echo: EchoServer
) -> None:
    old = connect(link)
    assert round_trip(old, b"before") == b"before"
    link.cut()
    held = connect(link)
    held.sendall(b"lost")
    wait_until(lambda: link.accepted == 2)
    link.restore()
    assert not link.is_cut
    for sock in (old, held):
        sock.settimeout(5.0)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
        sock.close()
    with connect(link) as fresh:
        assert round_trip(fresh, b"after") == b"after"
    assert echo.received == len(b"before") + len(b"after")


def test_heal_after_restores_on_its_own(link: Link) -> None:
    link.heal_after(0.3)
    assert link.is_cut
    with connect(link) as held:
        assert_silent(held, 0.1)
    wait_until(lambda: not link.is_cut, timeout=3.0)
    with connect(link) as fresh:
        assert round_trip(fresh, b"healed") == b"healed"


def test_half_close_passes_the_end_of_stream_each_way(link: Link) -> None:
    with connect(link) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)  # the echo server sees EOF, echoes, then half-closes
        got = b""
        while chunk := sock.recv(CHUNK):
            got += chunk
        assert got == b"last words"


def send_until_stalled(sock: socket.socket, limit: int) -> int:
    """Send zeros until a send times out; return how many bytes went."""
    sent, block = 0, b"\0" * CHUNK
    try:
        while sent < limit:
            sent += sock.send(block)
    except TimeoutError:
        return sent
    raise AssertionError(f"{limit} bytes went and the sender never stalled")


def assert_cpu_idle(seconds: float) -> None:
    """This process burns (almost) no CPU for ``seconds``."""
    start = time.process_time()
    time.sleep(seconds)
    assert time.process_time() - start < seconds / 5


def test_an_idle_link_does_not_spin() -> None:
    """Idle, half-closed and held connections leave the loop asleep (no busy polling)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5.0)
    try:
        with Link(("127.0.0.1", server.getsockname()[1])) as link:
            idle, half = connect(link), connect(link)
            far_idle, _ = server.accept()
            far_half, _ = server.accept()
            half.shutdown(socket.SHUT_WR)
            far_half.settimeout(5.0)
            assert far_half.recv(1) == b""  # the end of stream got through; far_half stays open
            assert_cpu_idle(0.5)
            link.cut()
            held = connect(link)
            wait_until(lambda: link.accepted == 3)
            assert_cpu_idle(0.5)
            for sock in (idle, half, held, far_idle, far_half):
                sock.close()
    finally:
        server.close()


def test_a_reader_that_never_reads_stalls_the_sender() -> None:
    sink = socket.create_server(("127.0.0.1", 0))  # never accepts: the kernel holds the bytes
    try:
        with Link(("127.0.0.1", sink.getsockname()[1])) as link, connect(link) as sock:
            sock.settimeout(1.0)
            sent = send_until_stalled(sock, 256 * MB)
            wait_until(lambda: link.bytes_up > 0)
            # what the link read but could not pass on stays below its buffer limit, so the
            # stall is the receiver's kernel buffers filling, passed back to the sender
            assert 0 < link.bytes_up <= sent
    finally:
        sink.close()


def test_unreachable_target_resets_the_client() -> None:
    spare = socket.create_server(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there now: the upstream connect is refused
    # the reset may even beat create_connection's own check of the handshake
    with (
        Link(("127.0.0.1", port)) as link,
        pytest.raises(ConnectionResetError),
        connect(link) as sock,
    ):
        sock.recv(1)


def test_close_stops_every_thread_and_frees_the_port(echo: EchoServer) -> None:
    before = set(threading.enumerate())
    link = Link(echo.target)
    live = connect(link)
    assert round_trip(live, b"ping") == b"ping"
    link.cut()
    held = connect(link)
    wait_until(lambda: link.accepted == 2)
    link.close()
    link.close()  # idempotent
    assert not any(t.name.startswith("linkcut:") for t in threading.enumerate())
    echo.close()  # its connection threads end once the link has closed their sockets
    assert set(threading.enumerate()) <= before
    with pytest.raises(LinkClosed):
        link.cut()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", link.port), timeout=2).close()
    rebound = socket.socket()
    rebound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rebound.bind(("127.0.0.1", link.port))
    rebound.close()
    live.close()
    held.close()
