"""A tiny blocking protocol V2 client for integration tests that need exact bytes."""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass

from protocol.commands import Command
from protocol.encode import encode_command
from protocol.frames import FrameType

_HEADER = struct.Struct(">Ii")
_MESSAGE = struct.Struct(">qH")


@dataclass(frozen=True)
class Frame:
    type: int
    data: bytes

    @property
    def is_message(self) -> bool:
        return self.type == FrameType.MESSAGE

    @property
    def attempts(self) -> int:
        return int(_MESSAGE.unpack_from(self.data)[1])

    @property
    def timestamp_ns(self) -> int:
        return int(_MESSAGE.unpack_from(self.data)[0])

    @property
    def message_id(self) -> bytes:
        return self.data[10:26]

    @property
    def body(self) -> bytes:
        return self.data[26:]


class BlockingSocket:
    """A blocking loopback connection that sends a protocol magic first (none if empty)."""

    def __init__(self, address: str, timeout: float, magic: bytes) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if magic:
            self.sock.sendall(magic)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by server")
            data += chunk
        return data

    def closed_by_server(self, wait: float = 3.0) -> bool:
        """True if the server closes the connection within ``wait`` seconds (data skipped)."""
        self.sock.settimeout(wait)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()


class RawClient(BlockingSocket):
    """Blocking socket speaking V2; ``read()`` returns the next frame (heartbeats included)."""

    def __init__(self, address: str, timeout: float = 5.0, magic: bytes = b"  V2") -> None:
        super().__init__(address, timeout, magic)

    def send(self, *commands: Command | bytes) -> None:
        self.sock.sendall(
            b"".join(c if isinstance(c, bytes) else encode_command(c) for c in commands)
        )

    def identify(self, **fields: object) -> Frame:
        body = json.dumps({"feature_negotiation": True, **fields}).encode()
        self.sock.sendall(b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
        return self.read()

    def bodies_until_quiet(self) -> list[bytes]:
        """The bodies of the messages that come until none comes within the timeout
        (heartbeats skipped)."""
        bodies = []
        while True:
            try:
                bodies.append(self.read(skip_heartbeats=True).body)
            except TimeoutError:
                return bodies

    def read(self, skip_heartbeats: bool = False) -> Frame:
        while True:
            size, kind = _HEADER.unpack(self._exactly(8))
            frame = Frame(kind, self._exactly(size - 4))
            if not (skip_heartbeats and frame.data == b"_heartbeat_"):
                return frame
