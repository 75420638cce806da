"""A tiny blocking nsqlookupd protocol V1 client for tests that need exact bytes."""

from __future__ import annotations

import json
import socket
import struct

from protocol.lookup_v1 import ResponseReader
from tests.rawclient import BlockingSocket

_SIZE = struct.Struct(">i")


def v1_replies(data: bytes) -> list[bytes]:
    """The complete size-prefixed V1 replies at the start of ``data`` (a lookupd's bytes)."""
    reader = ResponseReader()
    reader.receive_data(data)
    replies = []
    while (reply := reader.next_response()) is not None:
        replies.append(reply)
    return replies


class V1Client(BlockingSocket):
    """A socket speaking V1: ``read()`` returns the next size-prefixed reply."""

    def __init__(self, address: str, *, magic: bytes = b"  V1", timeout: float = 5.0) -> None:
        super().__init__(address, timeout, magic)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def identify(self, **fields: object) -> bytes:
        """IDENTIFY with ``fields`` as the JSON body; returns the reply."""
        body = json.dumps(fields).encode()
        self.send(b"IDENTIFY\n" + _SIZE.pack(len(body)) + body)
        return self.read()

    def identify_node(self, tcp_port: int = 4150, http_port: int = 4151, **extra: object) -> bytes:
        """IDENTIFY as an nsqd on 127.0.0.1 would."""
        return self.identify(
            version="1.3.0",
            tcp_port=tcp_port,
            http_port=http_port,
            hostname="test-host",
            broadcast_address="127.0.0.1",
            **extra,
        )

    def command(self, line: str) -> bytes:
        """Send ``line`` + newline and return the reply."""
        self.send(line.encode() + b"\n")
        return self.read()

    def read(self) -> bytes:
        (size,) = _SIZE.unpack(self._exactly(4))
        return self._exactly(size)

    def half_close(self) -> None:
        """Send EOF, keep reading."""
        self.sock.shutdown(socket.SHUT_WR)
