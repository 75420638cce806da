"""A blocking protocol V2 client that can upgrade like go-nsq and pynsq: TLS (stdlib ssl),
snappy (python-snappy, the library pynsq uses) and deflate (zlib), for tests that check the
exact frames of an upgrade against pnsq and the real nsqd.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import zlib
from collections.abc import Callable

import snappy

MAGIC = b"  V2"
RESPONSE, ERROR, MESSAGE = 0, 1, 2
OK = (RESPONSE, b"OK")


def command(line: bytes, body: bytes | None = None) -> bytes:
    """``line`` + ``\\n``, then ``[u32 size][body]`` when there is a body."""
    return line + b"\n" + (b"" if body is None else struct.pack(">I", len(body)) + body)


def identify(**fields: object) -> bytes:
    return command(b"IDENTIFY", json.dumps({"feature_negotiation": True, **fields}).encode())


class _SnappyReader:
    """python-snappy's StreamDecompressor fed whole chunks only (it mis-parses a chunk header
    split across two reads)."""

    def __init__(self) -> None:
        self._pending = b""
        self._decompressor = snappy.StreamDecompressor()

    def __call__(self, data: bytes) -> bytes:
        buf = self._pending + data
        pos = 0
        while len(buf) - pos >= 4:
            length = int.from_bytes(buf[pos + 1 : pos + 4], "little")
            if pos + 4 + length > len(buf):
                break
            pos += 4 + length
        self._pending = buf[pos:]
        return bytes(self._decompressor.decompress(buf[:pos])) if pos else b""


class UpgradingClient:
    """Blocking socket speaking V2, with ``start_tls`` / ``start_snappy`` / ``start_deflate``."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock: socket.socket = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(MAGIC)
        self._encode: Callable[[bytes], bytes] = lambda data: data
        self._decode: Callable[[bytes], bytes] = lambda data: data
        self._buf = b""
        self.raw_received = b""  # every byte read off the socket since the last upgrade

    def __enter__(self) -> UpgradingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(self._encode(data))

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            chunk = b""
        if not chunk:
            raise EOFError(f"connection closed; unread {self._buf!r}")
        self.raw_received += chunk
        self._buf += self._decode(chunk)

    def read_frame(self) -> tuple[int, bytes]:
        """(frame type, data) of the next frame, heartbeats included."""
        while len(self._buf) < 8:
            self._fill()
        size, kind = struct.unpack(">Ii", self._buf[:8])
        while len(self._buf) < 4 + size:
            self._fill()
        data = self._buf[8 : 4 + size]
        self._buf = self._buf[4 + size :]
        return kind, data

    def wait_raw_suffix(self, suffix: bytes) -> None:
        """Read until the raw bytes received end with ``suffix`` (a peer may write one flush
        in several pieces)."""
        while not self.raw_received.endswith(suffix):
            self._fill()

    def closed_by_server(self, wait: float = 3.0) -> bool:
        self.sock.settimeout(wait)
        try:
            while True:
                self._fill()
        except EOFError:
            return True
        except TimeoutError:
            return False

    def _compressed(
        self, encode: Callable[[bytes], bytes], decode: Callable[[bytes], bytes]
    ) -> None:
        """Switch both directions; bytes already read belong to the new stream (pynsq's
        "bootstrap")."""
        leftover, self._buf = self._buf, b""
        self._encode, self._decode = encode, decode
        self.raw_received = leftover
        self._buf = decode(leftover) if leftover else b""

    def start_tls(self, certfile: str = "", keyfile: str = "", cafile: str = "") -> None:
        """Client-side handshake on the connection (the server certificate is verified only
        with ``cafile``)."""
        assert not self._buf, f"bytes left before the TLS handshake: {self._buf!r}"
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if cafile:
            context.load_verify_locations(cafile)
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if certfile:
            context.load_cert_chain(certfile, keyfile)
        self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")

    def start_snappy(self) -> None:
        """Like pynsq: a new StreamCompressor (so a new stream identifier) for every send."""
        self._compressed(
            lambda data: bytes(snappy.StreamCompressor().compress(data)), _SnappyReader()
        )

    def start_deflate(self, level: int = 6) -> None:
        compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
        self._compressed(
            lambda data: compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH),
            decompressor.decompress,
        )
