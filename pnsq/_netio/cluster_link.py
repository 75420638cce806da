"""Links between pnsq nodes on nsqd's TCP port, both ends: TLS, then the cluster credential.

Who may use a link: a peer that holds the cluster secret (when the node has one), over TLS with
a certificate the node's root CAs trust (when the node has a certificate). The magics and what
each link carries are in :mod:`protocol.cluster_links`; docs/security.md gives the rules.

* **Dialing** (:meth:`ClusterLinks.dial`): a node with a certificate sends
  :data:`~protocol.cluster_links.TLS`, starts TLS as client, verifying the listener's
  certificate against its root CAs and the host of the listener's node id (an IP address or a
  DNS name, matched against the certificate's subject alternative names), presenting its own
  certificate, and sends the link's magic inside TLS; a node without one sends the link's magic
  in plaintext. There is no fallback from TLS to plaintext: that would be a downgrade anyone on
  the path could force. Then, with a cluster secret, the handshake
  (:mod:`protocol.cluster_auth`), which also checks that the listener is the node dialed.
* **Listening**: a node with a certificate takes links over TLS only; a plaintext link gets one
  refusal (:meth:`ClusterLinks.refuse`) and a close. :meth:`ClusterLinks.open_tls` runs the
  server side of TLS (asking for and verifying the dialer's certificate when
  ``--tls-client-auth-policy`` says so; the server context is nsqd's) and reads the link's
  magic inside it; :meth:`ClusterLinks.accept` runs the handshake with a secret.

Every failure is logged at most once a minute per peer address (:class:`FailureLog`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from pnsq._goflag.addresses import split_host_port
from protocol import cluster_links
from protocol.cluster_auth import DIALER, LISTENER, Handshake, HandshakeError, encode_refusal

from .handshake import (
    HANDSHAKE_TIMEOUT,
    FailureLog,
    listen_handshake,
    peer_host,
    refuse,
    run_handshake,
)
from .plain_stream import PlainSocketStream

__all__ = ["ClusterLinks", "LinkFailed", "PrefixedStream", "client_tls_context"]

_TLS_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}
#: bytes of a link's first read inside TLS (the magic, and what the dialer sent after it)
_READ_SIZE = 4096
_TLS_ERRORS = (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError)


class LinkFailed(HandshakeError):
    """A link could not be opened or was turned away (TLS, the credential, or the listener's
    refusal); it was logged, at most once a minute per peer address."""


def client_tls_context(
    cert: str, key: str, root_ca_file: str = "", min_version: str = "tls1.2"
) -> ssl.SSLContext:
    """The context a node dials its links with: it verifies the listener's certificate against
    ``root_ca_file`` (the system CAs without one) and the host dialed, and presents ``cert``
    (for a listener that demands a client certificate). At least TLS 1.2, or ``min_version``
    when higher.

    Raises:
        OSError, ssl.SSLError: the files cannot be loaded.
    """
    context = ssl.create_default_context(cafile=root_ca_file or None)
    context.minimum_version = max(
        ssl.TLSVersion.TLSv1_2, _TLS_VERSIONS.get(min_version, ssl.TLSVersion.TLSv1_2)
    )
    context.load_cert_chain(cert, key or None)
    return context


class PrefixedStream(trio.abc.Stream):
    """``inner`` with ``prefix`` (bytes already read from it) returned first: the listener
    reads more than the magic when the dialer's TLS hello follows at once."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self._prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class ClusterLinks:
    """This node's side of its links with other pnsq nodes (see the module doc).

    Args:
        identity: this node's node id, ``host:tcp_port`` (asked when a link opens: it is known
            once the TCP port is).
        clock: a monotonic clock, for the failure log.
        log: where failures are reported.
        secret: the cluster secret; ``b""``: links are not authenticated.
        client_tls: with it, links this node dials run over TLS (:func:`client_tls_context`).
        server_tls: with it, this node takes links over TLS only (nsqd's server context).
    """

    identity: Callable[[], str]
    clock: Callable[[], float]
    log: logging.Logger
    secret: bytes = b""
    client_tls: ssl.SSLContext | None = None
    server_tls: ssl.SSLContext | None = None
    failures: FailureLog = field(init=False)

    def __post_init__(self) -> None:
        self.failures = FailureLog(self.log, self.clock)

    @property
    def tls_only(self) -> bool:
        """Whether this node takes links over TLS only (it has a certificate)."""
        return self.server_tls is not None

    # ------------------------------------------------------------------ dialing

    async def dial(
        self, peer: str, link: bytes, connect_timeout: float
    ) -> tuple[trio.abc.Stream, bytes]:
        """Open a ``link`` to the node ``peer`` (its node id): TLS when this node has a
        certificate, then the handshake with a secret. Returns the stream and the bytes the
        listener sent after the handshake (the link's protocol starts there).

        Raises:
            OSError, trio.TooSlowError: the TCP connection failed (``connect_timeout``).
            LinkFailed: TLS or the handshake failed, or the listener refused.
            trio.BrokenResourceError: the connection broke after TLS and the handshake.
        """
        host, port = split_host_port(peer)
        with trio.fail_after(connect_timeout):
            connected = await trio.open_tcp_stream(host, int(port))
        plain = PlainSocketStream(connected.socket)
        stream: trio.abc.Stream = plain
        try:
            if self.client_tls is None:
                await plain.send_all(link)
            else:
                await plain.send_all(cluster_links.TLS)
                stream = trio.SSLStream(plain, self.client_tls, server_hostname=host)
                try:
                    with trio.fail_after(HANDSHAKE_TIMEOUT):
                        await stream.do_handshake()
                except _TLS_ERRORS as exc:
                    raise self._failed(peer, f"TLS with {peer}: {_reason(exc)}") from exc
                await stream.send_all(link)
            rest = b""
            if self.secret:
                rest = await self._prove(stream, peer, link)
        except BaseException:
            await trio.aclose_forcefully(plain)
            raise
        return stream, rest

    async def _prove(self, stream: trio.abc.Stream, peer: str, link: bytes) -> bytes:
        shake = Handshake(self.secret, DIALER, link, self.identity())
        try:
            rest = await run_handshake(stream, shake)
        except (HandshakeError, trio.TooSlowError) as exc:
            raise self._failed(peer, str(exc) or "no handshake in time") from exc
        except trio.BrokenResourceError as exc:  # TLS 1.3: a refused certificate shows here
            raise self._failed(peer, f"{peer}: {_reason(exc)}") from exc
        if shake.peer_identity != peer:
            raise self._failed(peer, f"{peer} proved as {shake.peer_identity!r}")
        return rest

    # ------------------------------------------------------------------ listening

    async def open_tls(
        self, stream: trio.abc.Stream, remote: str, initial: bytes
    ) -> tuple[trio.SSLStream[trio.abc.Stream], bytes, bytes]:
        """After :data:`~protocol.cluster_links.TLS`: the server side of TLS, then the link's
        magic read inside it. Returns the TLS stream, the magic and the bytes after it.

        Raises:
            LinkFailed: TLS failed (a certificate the root CAs do not trust, none where one is
                required, a stranger that is not speaking TLS), or no magic came in time.
        """
        assert self.server_tls is not None
        prefixed: trio.abc.Stream = PrefixedStream(stream, initial)
        tls = trio.SSLStream(prefixed, self.server_tls, server_side=True)
        data = b""
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await tls.do_handshake()
                while len(data) < len(cluster_links.TLS):
                    chunk = await tls.receive_some(_READ_SIZE)
                    if not chunk:
                        raise trio.BrokenResourceError("closed before naming its link")
                    data += chunk
        except _TLS_ERRORS as exc:
            raise self._failed(peer_host(remote), f"TLS: {_reason(exc)}") from exc
        return tls, data[:4], data[4:]

    async def accept(
        self, stream: trio.abc.Stream, remote: str, link: bytes, initial: bytes
    ) -> tuple[str | None, bytes]:
        """The listener's side of the handshake, with a secret: the node id the dialer
        proved and the bytes after the handshake (without a secret: None and ``initial``).

        Raises:
            LinkFailed: the dialer failed; it got one refusal and nothing else.
        """
        if not self.secret:
            return None, initial
        shake = Handshake(self.secret, LISTENER, link, self.identity())
        try:
            return await listen_handshake(stream, shake, initial)
        except HandshakeError as exc:
            await self.refuse(stream, remote, str(exc))
            raise LinkFailed(str(exc)) from exc

    async def refuse(self, stream: trio.abc.Stream, remote: str, reason: str) -> None:
        """Log why a link from ``remote`` is turned away and send the one refusal frame (to a
        peer that may be gone already: then there is no one to tell), half-closing so that it reads
        the refusal before the close."""
        self.failures.failed(peer_host(remote), reason)
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            await refuse(stream, encode_refusal(reason))

    def _failed(self, peer: str, reason: str) -> LinkFailed:
        self.failures.failed(peer, reason)
        return LinkFailed(reason)


def _reason(exc: BaseException) -> str:
    """The most telling text of a TLS failure (Trio wraps the ssl error as the cause)."""
    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
    if isinstance(cause, ssl.SSLCertVerificationError) and cause.verify_message:
        return f"certificate verify failed: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        return str(cause.reason or cause)
    if isinstance(exc, trio.TooSlowError):
        return "no TLS handshake in time"
    return str(exc) or type(exc).__name__
