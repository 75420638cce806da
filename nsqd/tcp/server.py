"""The TCP listener: read the 4-byte magic, then hand the connection to the protocol it names.

One port serves every protocol an nsqd speaks: ``"  V2"`` (clients) is always there. A cluster
node (one with lookupd or a cluster secret) also serves its links with other pnsq nodes
(:mod:`protocol.cluster_links`): replication (``"  R1"``, :mod:`nsqd.replication`, registered
with :meth:`TCPServer.add_link`) and forwarding (``"  F2"``, :meth:`TCPServer.serve_forwarded`),
in plaintext, or inside TLS (``"  S1"``) when the node has a certificate: then only inside TLS,
and a plaintext link gets one refusal and a close
(:class:`~pnsq._netio.cluster_link.ClusterLinks`).
An unknown magic gets nsqd's ``E_BAD_PROTOCOL`` and the connection is closed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

import trio

from pnsq._netio.cluster_link import ClusterLinks, LinkFailed
from pnsq._netio.plain_stream import PlainSocketStream
from pnsq._netio.tcp import serve_tcp
from protocol import cluster_links, frames

from ..broker import Broker
from .reactor import PublishReactor
from .session import Session
from .settings import SessionSettings

log = logging.getLogger("nsqd.tcp")

MAGIC_TIMEOUT = 60.0  # nsqd's ClientTimeout: how long a new connection may stay silent

#: a protocol's side of a connection: the stream, the peer, bytes read after the magic
ProtocolHandler = Callable[[trio.abc.Stream, str, bytes], Awaitable[None]]


class TCPServer:
    """Accepts connections and runs each under the protocol its 4-byte magic names; protocol
    V2 runs one :class:`Session` per client.

    ``links``: this node's side of its links with other pnsq nodes; None (a standalone nsqd
    without a cluster secret): no link is served, their magics are unknown ones. With links the
    forwarding link is served at once (:meth:`serve_forwarded`).
    """

    def __init__(
        self, broker: Broker, settings: SessionSettings, links: ClusterLinks | None = None
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.sessions: set[Session] = set()
        self.reactor = PublishReactor(broker, settings.busy_poll)
        self._protocols: dict[bytes, ProtocolHandler] = {frames.MAGIC_V2: self._serve_v2}
        self.links = links
        self._links: dict[bytes, ProtocolHandler] = {}
        # a forwarding node is trusted: the client's AUTH and TLS were checked where it
        # connected, and the link itself proved the credential (and runs over TLS if required)
        self._forwarded = replace(settings, auth=None, tls_required=False)
        if links is not None:
            self.add_link(cluster_links.FORWARDING, self.serve_forwarded)

    def add(self, magic: bytes, handler: ProtocolHandler) -> None:
        """Serve connections that start with ``magic`` (4 bytes) with ``handler``."""
        if len(magic) != 4 or magic in self._protocols:
            raise ValueError(f"magic {magic!r} is not 4 bytes or already served")
        self._protocols[magic] = handler

    def add_link(self, magic: bytes, handler: ProtocolHandler) -> None:
        """Serve the link with ``magic`` (one of :data:`protocol.cluster_links.LINKS`) with
        ``handler``: in plaintext unless this node takes links over TLS only, and inside
        ``"  S1"`` when it has a certificate."""
        if self.links is None or magic not in cluster_links.LINKS:
            raise ValueError(f"{magic!r} is not a cluster link, or no links are served")
        self._links[magic] = handler
        self.add(magic, partial(self._serve_plain_link, handler))
        if self.links.tls_only and cluster_links.TLS not in self._protocols:
            self.add(cluster_links.TLS, self._serve_tls_link)

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (port 0: any free port); reports the bound port when ready."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.reactor.run)
            await serve_tcp(self._handle, host, port, log=log, task_status=task_status)

    async def _handle(self, stream: trio.SocketStream, remote: str) -> None:
        """One connection (errors are logged and closed by :func:`pnsq._netio.tcp.serve_tcp`)."""
        magic = b""
        with trio.move_on_after(MAGIC_TIMEOUT):
            while len(magic) < 4:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                magic += chunk
        if len(magic) < 4:
            return
        handler = self._protocols.get(magic[:4])
        if handler is None:
            log.info("[%s] bad protocol magic %r", remote, magic[:4])
            await stream.send_all(frames.encode_error("E_BAD_PROTOCOL"))
            return
        # from here on each call goes straight to the socket (docs/benchmarks.md)
        await handler(PlainSocketStream(stream.socket), remote, magic[4:])

    async def _serve_v2(self, stream: trio.abc.Stream, remote: str, initial: bytes) -> None:
        session = Session(stream, self.broker, self.settings, remote, self.reactor)
        await self._run_session(session, initial)

    async def _serve_plain_link(
        self, handler: ProtocolHandler, stream: trio.abc.Stream, remote: str, initial: bytes
    ) -> None:
        """A link in plaintext: nobody, when this node has a certificate (one refusal);
        otherwise whoever passes the link's own checks."""
        links = self.links
        assert links is not None
        if links.tls_only:
            await links.refuse(stream, remote, "this node takes cluster links over TLS only")
            return
        await handler(stream, remote, initial)

    async def _serve_tls_link(self, stream: trio.abc.Stream, remote: str, initial: bytes) -> None:
        """``"  S1"``: TLS, then the link named inside it. Who may use it: a peer that
        completes TLS (with a certificate the root CAs trust, when the client-auth policy asks
        for one) and then passes the link's own checks."""
        links = self.links
        assert links is not None
        try:
            tls, magic, rest = await links.open_tls(stream, remote, initial)
        except LinkFailed:
            return  # logged (at most once a minute per peer)
        try:
            handler = self._links.get(magic)
            if handler is None:
                await links.refuse(tls, remote, f"no cluster link {magic!r}")
                return
            await handler(tls, remote, rest)
        finally:
            await _close_tls(tls)

    async def serve_forwarded(self, stream: trio.abc.Stream, remote: str, initial: bytes) -> None:
        """``"  F2"``: protocol V2 from a cluster node forwarding stock publishes. The session
        asks for no AUTH and no TLS upgrade: the publish was authorized where the client
        connected (docs/security.md).

        Who may use it: with a cluster secret, a peer that proved it (the handshake first; a
        stranger gets one refusal); with a certificate, only over TLS. Without a secret, any
        peer: but then this node runs without AUTH and without ``--tls-required`` (a cluster
        node refuses to start with them and no secret; a standalone one without a secret
        serves no link), so the link skips nothing a V2 client would be asked for."""
        links = self.links
        assert links is not None
        try:
            _, initial = await links.accept(stream, remote, cluster_links.FORWARDING, initial)
        except LinkFailed:
            return  # refused and logged
        await self._run_session(
            Session(stream, self.broker, self._forwarded, remote, self.reactor), initial
        )

    async def _run_session(self, session: Session, initial: bytes = b"") -> None:
        self.sessions.add(session)
        try:
            await session.run(initial=initial)
        finally:
            self.sessions.discard(session)


async def _close_tls(stream: trio.SSLStream[trio.abc.Stream]) -> None:
    """Close a link's TLS stream with its close_notify, unless the peer is gone already."""
    try:
        with trio.move_on_after(1):
            await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        await trio.aclose_forcefully(stream)
