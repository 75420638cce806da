"""The crowd helper of the open-files test (tests/massclients.py) against a tiny server: a
client reset before any reply connects once more when asked to, and fails otherwise."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.massclients import Crowd

OK = struct.pack(">Ii", 6, 0) + b"OK"
RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


@contextmanager
def server(resets: int) -> Iterator[str]:
    """A loopback server that resets its first ``resets`` connections once their IDENTIFY is
    in, and answers every later one OK."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)  # accept() looks at ``done`` this often
    done = threading.Event()

    def serve() -> None:
        seen = 0
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            conn.recv(64)
            seen += 1
            if seen <= resets:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
            else:
                conn.sendall(OK)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(5)
        listener.close()


def test_a_client_reset_before_any_reply_connects_once_more() -> None:
    with server(resets=1) as address:
        crowd = Crowd(address, 3, reconnects=True)
        crowd.connect_all(10)
        crowd.close_all()
    assert (crowd.served, crowd.failed, crowd.reconnected) == (3, 0, 1)


def test_without_reconnects_a_reset_client_fails_with_its_reason() -> None:
    with server(resets=1) as address:
        crowd = Crowd(address, 3)
        crowd.connect_all(10)
        crowd.close_all()
    assert (crowd.served, crowd.failed, crowd.reconnected) == (2, 1, 0)
    assert crowd.reasons == {"recv ECONNRESET": 1}
