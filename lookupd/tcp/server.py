"""The TCP listener: protocol V1 connections from nsqds (the Trio shell around
:class:`protocol.lookup_v1.LookupV1Parser`).

Who may use it: any nsqd, as on nsqlookupd; with ``--cluster-secret-file`` only a pnsq nsqd
that proves the cluster credential first, and registers as the node it proved
(:mod:`lookupd.tcp.auth`).

Resource handling: one task per connection; when it ends, however it ends, the peer leaves every
registration (the keys stay, as in nsqlookupd). Error handling: a protocol error is sent as a
size-prefixed reply and the connection closed (every V1 error is fatal); an I/O error just closes
it; an unexpected exception is logged and closes only that connection.
"""

from __future__ import annotations

import logging

import trio

from pnsq._netio.tcp import serve_tcp
from protocol.lookup_v1 import (
    EXT_PARTITIONS,
    NEED_DATA,
    Closed,
    Identify,
    LookupCommand,
    LookupV1Error,
    LookupV1Parser,
    Ping,
    Register,
    Unregister,
    encode_response,
    identify_reply,
)

from ..state.cluster import Cluster
from .auth import LinkAuth, identify_refusal

log = logging.getLogger("nsqlookupd.tcp")

RECEIVE_SIZE = 65536


class LookupTCPServer:
    """Serves protocol V1. The lookupd's own IDENTIFY reply fields come with
    :meth:`set_reply_info` once both listeners are bound; an IDENTIFY that arrives before waits
    for them (answered earlier, a node would keep an HTTP port of 0 for the connection's life,
    and with it the address it polls for assignments and creates topics through).
    ``secret``: the cluster credential every peer must prove first (``b""``: none)."""

    def __init__(self, cluster: Cluster, secret: bytes = b"") -> None:
        self.cluster = cluster
        self.reply_info: dict[str, str | int] = {}
        self._ready = trio.Event()
        self.auth = LinkAuth(secret, self._identity, cluster.clock)

    async def _identity(self) -> str:
        """This lookupd's identity in handshakes, once the listeners are bound."""
        await self._ready.wait()
        return f"{self.reply_info.get('broadcast_address', '')}:{self.reply_info.get('tcp_port')}"

    def set_reply_info(self, info: dict[str, str | int]) -> None:
        """``broadcast_address``, ``hostname``, ``http_port``, ``tcp_port`` and ``version``
        for the IDENTIFY replies."""
        self.reply_info = info
        self._ready.set()

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (port 0: any free port); reports the bound port when ready."""
        await serve_tcp(self._handle, host, port, log=log, task_status=task_status)

    async def _handle(self, stream: trio.abc.Stream, remote: str) -> None:
        log.info("TCP: new client(%s)", remote)
        parser = LookupV1Parser()
        try:  # errors are logged and the stream closed by pnsq._netio.tcp.serve_tcp
            opened = await self.auth.open(stream, remote)
            if opened is None:  # refused: it got its one error
                return
            parser.receive_data(opened.data)
            if opened.eof:
                parser.receive_data(b"")
            await self._serve(stream, parser, remote, opened.proved)
        finally:
            if parser.identified:
                self.cluster.disconnect(remote)
                log.info("CLIENT(%s): closed, registrations removed", remote)

    async def _serve(
        self, stream: trio.abc.Stream, parser: LookupV1Parser, remote: str, proved: str | None
    ) -> None:
        """Answer each command in order; the replies to the commands of one read go out in
        one send (a node registering thousands of partitions pipelines its REGISTERs: one
        send and one scheduler round each cost ~0.2 ms a REGISTER on a busy lookupd)."""
        replies: list[bytes] = []
        while True:
            try:
                event = parser.next_event()
            except LookupV1Error as exc:
                log.error("CLIENT(%s): %s", remote, exc)
                await stream.send_all(b"".join([*replies, exc.reply]))
                return
            waits = event is NEED_DATA or isinstance(event, (Closed, Identify))
            if waits and replies:  # sent before waiting on the peer, or on our own ports
                await stream.send_all(b"".join(replies))
                replies.clear()
            if event is NEED_DATA:
                parser.receive_data(await stream.receive_some(RECEIVE_SIZE))
                continue
            if isinstance(event, Closed):
                return
            if isinstance(event, Identify):
                await self._ready.wait()
            try:
                reply = self._execute(event, parser, remote, proved)
            except LookupV1Error as exc:
                log.error("CLIENT(%s): %s", remote, exc)
                await stream.send_all(b"".join([*replies, exc.reply]))
                return
            replies.append(encode_response(reply))

    def _execute(
        self, command: LookupCommand, parser: LookupV1Parser, remote: str, proved: str | None
    ) -> bytes:
        cluster = self.cluster
        if isinstance(command, Ping):
            cluster.ping(remote)
            return b"OK"
        if isinstance(command, Identify):
            ident = command.peer
            refusal = identify_refusal(ident, proved)
            if refusal is not None:
                parser.identified = False  # refused: nothing to remove when it closes
                raise refusal
            peer = cluster.identify(remote, ident)
            parser.partitioned = peer.partitioned
            granted = (EXT_PARTITIONS,) if EXT_PARTITIONS in ident.extensions else ()
            log.info(
                "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s%s",
                remote,
                ident.broadcast_address,
                ident.tcp_port,
                ident.http_port,
                ident.version,
                " (partitions)" if peer.partitioned else "",
            )
            info = self.reply_info
            return identify_reply(
                broadcast_address=str(info.get("broadcast_address", "")),
                hostname=str(info.get("hostname", "")),
                http_port=int(info.get("http_port", 0)),
                tcp_port=int(info.get("tcp_port", 0)),
                version=str(info.get("version", "")),
                extensions=granted,
            )
        if isinstance(command, Register):
            cluster.register(remote, command.topic, command.channel, command.partition)
            log.info(
                "DB: client(%s) REGISTER topic:%s partition:%s channel:%s",
                remote,
                command.topic,
                "" if command.partition is None else command.partition,
                command.channel or "",
            )
            return b"OK"
        assert isinstance(command, Unregister)
        cluster.unregister(remote, command.topic, command.channel, command.partition)
        log.info(
            "DB: client(%s) UNREGISTER topic:%s partition:%s channel:%s",
            remote,
            command.topic,
            "" if command.partition is None else command.partition,
            command.channel or "",
        )
        return b"OK"
