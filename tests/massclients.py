"""Thousands of V2 clients from one thread: non-blocking sockets on a selector.

Each client connects, sends the magic and an ``IDENTIFY`` in one write, and counts as *served*
once the response frame arrives. A SYN the listen queue dropped is retried by the kernel (after
1 s, then 3 s, ...), so callers give it a bounded wait rather than expecting it at once. With
``reconnects``, a client reset before it received a byte connects again (once): under a full
parallel test run one of 10,000 loopback connections was seen reset with nothing in the
daemon's log; such clients are counted (:attr:`Crowd.reconnected`) for the caller to bound.
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import time
from dataclasses import dataclass, field

_IDENTIFY = b"  V2IDENTIFY\n" + struct.pack(">I", 2) + b"{}"
_FRAME_HEADER = struct.Struct(">Ii")  # [u32 size (type + data)][i32 frame type]
_OK_FRAME = _FRAME_HEADER.pack(6, 0) + b"OK"  # IDENTIFY without feature negotiation: "OK"


@dataclass
class _Client:
    sock: socket.socket
    sent: bool = False
    received: bytes = b""
    retried: bool = False  # connected again after a reset (Crowd.reconnects)


@dataclass
class Crowd:
    """``count`` clients of ``address``; see the module docstring."""

    address: str
    count: int
    reconnects: bool = False  # a client reset before any byte came connects once more
    clients: list[_Client] = field(default_factory=list)
    served: int = 0
    failed: int = 0  # refused or reset before being served
    reconnected: int = 0  # clients that connected again after a reset (``reconnects``)
    #: how many clients failed each way ("connect ECONNRESET", "recv ...", "eof after N bytes")
    reasons: dict[str, int] = field(default_factory=dict)

    def connect_all(self, wait: float) -> float:
        """Start every connection at once, then serve the selector until all are served or
        failed, or ``wait`` seconds pass; returns the seconds it took."""
        host, port = self.address.rsplit(":", 1)
        selector = selectors.DefaultSelector()
        started = time.monotonic()
        for _ in range(self.count):
            self._connect(selector, (host, int(port)))
        pending = len(self.clients)
        deadline = started + wait
        while pending and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.1):
                client = key.data
                if not client.sent:
                    error = client.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if error:
                        self._fail(selector, client, f"connect {errno.errorcode.get(error, error)}")
                        pending -= 1
                        continue
                    client.sock.send(_IDENTIFY)  # tiny: fits the empty send buffer
                    client.sent = True
                    selector.modify(client.sock, selectors.EVENT_READ, client)
                    continue
                try:
                    chunk = client.sock.recv(64)
                except OSError as exc:
                    again = self._reconnect(selector, client, (host, int(port)))
                    if again is None:
                        reason = f"recv {errno.errorcode.get(exc.errno or 0, exc)}"
                        self._fail(selector, client, reason)
                    if not again:  # failed (counted), here or in its new connect
                        pending -= 1
                    continue
                if not chunk:
                    self._fail(selector, client, f"eof after {len(client.received)} bytes")
                    pending -= 1
                    continue
                client.received += chunk
                if len(client.received) >= len(_OK_FRAME):
                    assert client.received == _OK_FRAME, client.received
                    selector.unregister(client.sock)
                    self.served += 1
                    pending -= 1
        selector.close()
        return time.monotonic() - started

    def _connect(
        self, selector: selectors.BaseSelector, address: tuple[str, int], retry: bool = False
    ) -> _Client | None:
        """Start one client's connection; None when it failed at once (counted)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self._count_failure(f"connect {errno.errorcode.get(code, code)}")
            return None
        client = _Client(sock, retried=retry)
        self.clients.append(client)
        selector.register(sock, selectors.EVENT_WRITE, client)
        return client

    def _reconnect(
        self, selector: selectors.BaseSelector, client: _Client, address: tuple[str, int]
    ) -> bool | None:
        """With :attr:`reconnects`: ``client``, reset before any byte came and not connected
        again yet, connects again in its place: True, or False when that connect failed at
        once (counted as failed); None when it may not (the caller counts the failure)."""
        if not self.reconnects or client.retried or client.received:
            return None
        selector.unregister(client.sock)
        client.sock.close()
        self.clients.remove(client)
        self.reconnected += 1
        return self._connect(selector, address, retry=True) is not None

    def _fail(self, selector: selectors.BaseSelector, client: _Client, reason: str) -> None:
        selector.unregister(client.sock)
        self._count_failure(reason)

    def _count_failure(self, reason: str) -> None:
        self.failed += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def close_all(self) -> None:
        """Close every connection (FIN), as fast as one thread can."""
        for client in self.clients:
            client.sock.close()
        self.clients.clear()
