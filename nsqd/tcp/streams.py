"""Connection upgrades as Trio streams: snappy and deflate wrappers, and nsqd's TLS context.

:class:`SnappyStream` and :class:`DeflateStream` wrap whatever stream is below them (the raw
socket or a :class:`trio.SSLStream`): ``send_all`` compresses its whole argument once (the
session's output buffer sends whole batches, so that is one compress per flush) and
``receive_some`` returns decompressed bytes. :func:`tls_server_context` builds the
:class:`ssl.SSLContext` of nsqd's ``--tls-*`` flags once, at start-up.
"""

from __future__ import annotations

import logging
import ssl
from typing import Protocol

import trio

from ..config.options import OptionsError
from .compression import (
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)

log = logging.getLogger("nsqd.streams")

RECEIVE_SIZE = 64 * 1024
_TLS_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


class _Encoder(Protocol):
    def encode(self, data: bytes | bytearray | memoryview) -> bytes: ...


class _Decoder(Protocol):
    @property
    def pending(self) -> bool: ...
    def decode(self, data: bytes | bytearray) -> bytes: ...


class CompressedStream(trio.abc.Stream):
    """A stream whose bytes are compressed on the wire, in both directions."""

    name = "compressed"

    def __init__(self, inner: trio.abc.Stream, encoder: _Encoder, decoder: _Decoder) -> None:
        self.inner = inner
        self._encoder = encoder
        self._decoder = decoder
        self._decoded = b""  # decoded bytes beyond what the last receive_some asked for

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(self._encoder.encode(data))

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Decoded bytes (at least one unless the peer closed)."""
        data = self._decoded
        decoder = self._decoder
        raw: bytes | bytearray
        while not data:
            if decoder.pending:
                raw = b""  # decode more of what was read before reading again
            else:
                raw = await self.inner.receive_some(RECEIVE_SIZE)
                if not raw:
                    return b""
            try:
                data = decoder.decode(raw)
            except CompressionError as exc:
                log.info("closing: %s", exc)
                raise trio.BrokenResourceError(str(exc)) from exc
        if max_bytes is not None and len(data) > max_bytes:
            data, self._decoded = data[:max_bytes], data[max_bytes:]
        else:
            self._decoded = b""
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


class SnappyStream(CompressedStream):
    """The snappy framing format over ``inner``."""

    name = "snappy"

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner, SnappyEncoder(), SnappyDecoder())


class DeflateStream(CompressedStream):
    """Raw DEFLATE over ``inner``: ``level`` for what we send, any level accepted."""

    name = "deflate"

    def __init__(self, inner: trio.abc.Stream, level: int) -> None:
        super().__init__(inner, DeflateEncoder(level), DeflateDecoder())
        self.level = level


def tls_server_context(
    cert: str,
    key: str,
    root_ca_file: str = "",
    client_auth_policy: str = "",
    min_version: str = "tls1.0",
) -> ssl.SSLContext | None:
    """nsqd's ``buildTLSConfig``: None without ``--tls-cert``/``--tls-key``.

    ``--tls-client-auth-policy`` ``require`` and ``require-verify`` both ask for a client
    certificate verified against ``--tls-root-ca-file`` (or the system CAs): Python's ssl
    module cannot accept an unverified certificate as Go's ``RequireAnyClientCert`` does.

    Raises:
        OptionsError: the key pair or the CA file cannot be loaded (nsqd: ``failed to build TLS
            config - <err>``).
    """
    if not cert and not key:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.minimum_version = _TLS_VERSIONS[min_version]
        context.load_cert_chain(cert, key or None)
        if client_auth_policy in ("require", "require-verify"):
            context.verify_mode = ssl.CERT_REQUIRED
            if root_ca_file:
                context.load_verify_locations(root_ca_file)
            else:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        else:
            context.verify_mode = ssl.CERT_NONE  # nsqd: tls.NoClientCert
    except (OSError, ssl.SSLError, KeyError, ValueError) as exc:
        raise OptionsError(f"failed to build TLS config - {exc}") from exc
    return context


def peer_common_name(stream: trio.SSLStream[trio.abc.Stream]) -> str:
    """The subject CN of the client's certificate, "" when it sent none."""
    cert = stream.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return ""
