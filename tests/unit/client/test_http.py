"""The client's HTTP lookups when the node dies mid-reply: a reply cut short is a connection
failure (``OSError``), which the producer's routing survives (it keeps the last route), not an
``http.client`` exception that ends the publish."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pnsq.client._http import HTTPNode, fetch_partitions

CUT_REPLY = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 308\r\n\r\n"
    b'{"partitions": '  # then the node is gone: 293 of the 308 bytes never come
)


@contextmanager
def _dying_node(reply: bytes) -> Iterator[str]:
    """A node that answers one request with ``reply``, then closes the connection."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(reply)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        host, port = listener.getsockname()
        yield f"{host}:{port}"
        thread.join(5)


def test_a_reply_cut_short_is_a_connection_error() -> None:
    with _dying_node(CUT_REPLY) as address:
        node = HTTPNode(address, timeout=5)
        with pytest.raises(ConnectionError, match=r"broken HTTP reply.*IncompleteRead") as raised:
            node.request("GET", "/partitions", {"topic": "t"})
        assert raised.value.__cause__ is not None
        node.close()


def test_a_garbled_status_line_is_a_connection_error() -> None:
    with (
        _dying_node(b"SPDY/9 what\r\n\r\n") as address,
        pytest.raises(ConnectionError, match="broken HTTP reply"),
    ):
        fetch_partitions(address, "t", None, timeout=5)
