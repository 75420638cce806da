"""Send inputs to a running daemon over many concurrent connections (one thread, selectors).

Each input gets its own connection: connect, send everything (reading whatever comes back
meanwhile), then end as the input says: half-close and read until the server closes, or reset.
A connection the server neither answers nor closes within ``hang_timeout`` of its last progress
is a *hang*. What came back is summed up: V2 error codes and OK/message frames, HTTP statuses,
so a caller can check the inputs reached the parser and the broker, not just the socket.
"""

from __future__ import annotations

import contextlib
import errno
import re
import selectors
import socket
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tests.fuzz.mutate import Ending, Input, Target

_FRAME = struct.Struct(">Ii")  # [u32 size][i32 type] of a server frame
_LINGER_0 = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST
_HTTP_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
_KEEP = 1 << 16  # response bytes kept per connection for the summary
# the server closed or reset this connection (ECONNREFUSED: it no longer listens at all, which
# the caller's health check reports)
_GONE = (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN, errno.ECONNABORTED, errno.ECONNREFUSED)


@dataclass
class Stats:
    inputs: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    endings: Counter[str] = field(default_factory=Counter)
    error_codes: Counter[str] = field(default_factory=Counter)
    http_statuses: Counter[str] = field(default_factory=Counter)
    ok_frames: int = 0
    message_frames: int = 0
    server_closed: int = 0
    hangs: list[Input] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        return self.inputs / self.elapsed if self.elapsed else 0.0


def summarize_v2(data: bytes, stats: Stats) -> None:
    """Count the frames of a V2 reply stream (stops at the first thing that is not a frame:
    a compressed stream after IDENTIFY, or a cut-off frame)."""
    pos = 0
    while pos + 8 <= len(data):
        size, kind = _FRAME.unpack_from(data, pos)
        if size < 4 or pos + 4 + size > len(data):
            return
        body = data[pos + 8 : pos + 4 + size]
        if kind == 0 and body == b"OK":
            stats.ok_frames += 1
        elif kind == 1:
            stats.error_codes[body.split(b" ", 1)[0].decode(errors="replace")] += 1
        elif kind == 2:
            stats.message_frames += 1
        elif kind not in (0, 1, 2):
            return
        pos += 4 + size


@dataclass
class _Conn:
    item: Input
    sock: socket.socket
    sent: int = 0
    received: bytearray = field(default_factory=bytearray)
    shut: bool = False
    progress: float = 0.0


class Engine:
    """Feeds inputs to ``tcp`` and ``http`` (host, port) with ``connections`` in flight."""

    def __init__(
        self,
        tcp: tuple[str, int],
        http: tuple[str, int],
        connections: int = 32,
        hang_timeout: float = 10.0,
        recent: int = 512,
    ) -> None:
        self.addresses = {Target.TCP: tcp, Target.HTTP: http}
        self.connections = connections
        self.hang_timeout = hang_timeout
        self.stats = Stats()
        self.recent: deque[Input] = deque(maxlen=recent)  # the last inputs, for a crash report
        self._selector = selectors.DefaultSelector()
        self._open: dict[socket.socket, _Conn] = {}

    def run(
        self,
        inputs: Iterator[Input],
        limit: int,
        budget: float,
        healthy: Callable[[], bool] = lambda: True,
    ) -> Stats:
        """Send up to ``limit`` inputs, stopping early after ``budget`` seconds or when
        ``healthy()`` (asked about twice a second) turns false. Waits for the open
        connections to finish before returning."""
        started = time.monotonic()
        deadline = started + budget
        next_check = started + 0.5
        stopping = False
        while True:
            now = time.monotonic()
            if not stopping and (self.stats.inputs >= limit or now >= deadline):
                stopping = True
            while not stopping and len(self._open) < self.connections:
                if self.stats.inputs >= limit:
                    break
                self._start(next(inputs), now)
            if stopping and not self._open:
                break
            for key, events in self._selector.select(timeout=0.1):
                self._service(self._open[key.fileobj], events, now)  # type: ignore[index]
            if now >= next_check:
                next_check = now + 0.5
                self._expire(now)
                if not healthy():
                    stopping = True
                    self._abort_all()
        self.stats.elapsed = time.monotonic() - started
        return self.stats

    def _start(self, item: Input, now: float) -> None:
        self.stats.inputs += 1
        self.stats.endings[item.ending.value] += 1
        self.recent.append(item)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(self.addresses[item.target])
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            raise OSError(
                code, f"connect to {self.addresses[item.target]}: {errno.errorcode[code]}"
            )
        conn = _Conn(item, sock, progress=now)
        self._open[sock] = conn
        self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)

    def _service(self, conn: _Conn, events: int, now: float) -> None:
        if events & selectors.EVENT_READ and not self._read(conn, now):
            return
        if events & selectors.EVENT_WRITE:
            self._write(conn, now)

    def _write(self, conn: _Conn, now: float) -> None:
        item = conn.item
        if item.ending is Ending.RESET_EARLY:
            with contextlib.suppress(OSError):  # the server may have dropped it already: fine
                conn.sock.send(item.data)
            self._finish(conn, reset=True)
            return
        if conn.sent < len(item.data):
            try:
                n = conn.sock.send(memoryview(item.data)[conn.sent : conn.sent + 65536])
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in _GONE:
                    raise
                self._closed_by_server(conn)
                return
            conn.sent += n
            self.stats.bytes_sent += n
            conn.progress = now
            if conn.sent < len(item.data):
                return
        if item.ending is Ending.RESET:
            self._finish(conn, reset=True)
            return
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            self._closed_by_server(conn)
            return
        conn.shut = True
        self._selector.modify(conn.sock, selectors.EVENT_READ)

    def _read(self, conn: _Conn, now: float) -> bool:
        """Drain what the server sent; False once the connection is finished."""
        try:
            chunk = conn.sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
            chunk = b""
        if not chunk:
            self._closed_by_server(conn)
            return False
        self.stats.bytes_received += len(chunk)
        if len(conn.received) < _KEEP:
            conn.received += chunk
        conn.progress = now
        return True

    def _closed_by_server(self, conn: _Conn) -> None:
        self.stats.server_closed += 1
        self._finish(conn, reset=False)

    def _finish(self, conn: _Conn, reset: bool) -> None:
        self._selector.unregister(conn.sock)
        del self._open[conn.sock]
        if reset:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_0)
        conn.sock.close()
        if conn.item.target is Target.HTTP:
            for status in _HTTP_STATUS.findall(conn.received):
                self.stats.http_statuses[status.decode()] += 1
        else:
            summarize_v2(bytes(conn.received), self.stats)

    def _expire(self, now: float) -> None:
        for conn in list(self._open.values()):
            if now - conn.progress > self.hang_timeout:
                self.stats.hangs.append(conn.item)
                self._finish(conn, reset=True)

    def _abort_all(self) -> None:
        for conn in list(self._open.values()):
            self._finish(conn, reset=True)
