"""The forwarding links to partition leaders (``"  F2"``, :mod:`protocol.cluster_links`): one
connection per leader, opened on first use and kept, one publish command at a time on it.

:class:`~nsqd.cluster.forwarding.Forwarder` sends a stock publish through them; the link is
opened through :class:`~pnsq._netio.cluster_link.ClusterLinks` (TLS and the cluster handshake
when the node has them) and speaks protocol V2 after that.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from pnsq._netio.cluster_link import ClusterLinks
from protocol.client_frames import ErrorFrame, FrameDecoder, MessageFrame, Response
from protocol.cluster_links import FORWARDING
from protocol.parser import NEED_DATA

log = logging.getLogger("nsqd.forward")


@dataclass(slots=True)
class _Peer:
    stream: trio.abc.Stream
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    lock: trio.Lock = field(default_factory=trio.Lock)


class LeaderLinks:
    """The open links, by leader ``(host, tcp port)``; ``timeout`` bounds a link's opening."""

    def __init__(self, links: ClusterLinks, timeout: float) -> None:
        self._links = links
        self._timeout = timeout
        self._peers: dict[tuple[str, int], _Peer] = {}

    async def exchange(self, address: tuple[str, int], command: bytes) -> str | None:
        """Send one publish ``command`` to the leader at ``address`` and read its answer: None
        for ``OK``, else what the leader said instead (its error; a fatal one closes the
        link). Answers the leader's heartbeats meanwhile. Raises what the link raises
        (OSError, trio's stream errors, a ProtocolError of the handshake or the framing);
        the caller then drops the link."""
        peer = await self._peer(address)
        async with peer.lock:
            await peer.stream.send_all(command)
            while True:
                frame = peer.decoder.next_frame()
                if frame is NEED_DATA:
                    data = await peer.stream.receive_some(65536)
                    if not data:
                        raise trio.BrokenResourceError("leader closed the connection")
                    peer.decoder.receive_data(data)
                    continue
                if isinstance(frame, Response) and frame.data == b"_heartbeat_":
                    await peer.stream.send_all(b"NOP\n")
                    continue
                if isinstance(frame, Response) and frame.data == b"OK":
                    return None
                if isinstance(frame, ErrorFrame):
                    if frame.fatal:
                        await self.drop(address)
                    return frame.text
                assert not isinstance(frame, MessageFrame)  # nothing subscribes here
                return f"unexpected {frame!r}"

    async def send_all(
        self, address: tuple[str, int], commands: list[bytes]
    ) -> tuple[int, str | None]:
        """:meth:`exchange` ``commands`` one by one: how many the leader acknowledged, and its
        refusal of the next (None once all were). A kept link the leader closed while it was
        idle (it restarted, or dropped it) gets the command again once, on a new link. Raises
        what :meth:`exchange` raises."""
        sent = 0
        while sent < len(commands):
            kept = self.is_open(address)
            try:
                refused = await self.exchange(address, commands[sent])
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                if not kept:
                    raise
                await self.drop(address)
                log.info("FORWARD: link to %s:%d was closed: sending again", *address)
                refused = await self.exchange(address, commands[sent])
            if refused is not None:
                return sent, refused
            sent += 1
        return sent, None

    def is_open(self, address: tuple[str, int]) -> bool:
        """Whether a link to ``address`` is kept open (the next exchange reuses it)."""
        return address in self._peers

    async def drop(self, address: tuple[str, int]) -> None:
        """Close the link to ``address``, if open (the next exchange opens another)."""
        peer = self._peers.pop(address, None)
        if peer is not None:
            await peer.stream.aclose()

    async def aclose(self) -> None:
        """Close every link."""
        for address in list(self._peers):
            await self.drop(address)

    async def _peer(self, address: tuple[str, int]) -> _Peer:
        peer = self._peers.get(address)
        if peer is None:
            host, port = address
            node = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            stream, rest = await self._links.dial(node, FORWARDING, self._timeout)
            peer = self._peers[address] = _Peer(stream)
            peer.decoder.receive_data(rest)
            log.info("FORWARD: connected to leader %s:%d", *address)
        return peer
