"""The cluster credential on ``"  R1"`` links: who may follow, proved before ``Hello``.

With ``--cluster-secret-file`` the leader runs the cluster handshake
(:mod:`protocol.cluster_auth`, link kind ``"  R1"``) before it reads anything else: a peer that
fails it gets one refusal frame and a closed connection, never a ``Welcome`` nor a record. Each
side proves with its node id (``host:tcp_port``) as its identity; the follower takes a leader
only under the node id lookupd named, and the leader takes a follower's ``Hello`` only when it
names the node id the follower proved with and lookupd placed that node as a replica of the
partition (:func:`replica_refusal`). So only acks on a placed replica's authenticated stream
count toward the high-watermark and the in-sync set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from pnsq._netio.handshake import FailureLog, peer_host, refuse, run_handshake
from protocol.cluster_auth import DIALER, LISTENER, Handshake, HandshakeError, encode_refusal
from protocol.replication import MAGIC, Hello

from ..core.partition_state import Placement

log = logging.getLogger("nsqd.replication")


class LinkAuthFailed(HandshakeError):
    """A handshake failed; it was logged (at most once a minute per peer) and refused."""


@dataclass
class LinkAuth:
    """This node's credential on replication links.

    Args:
        secret: the cluster secret.
        node_id: this node's node id (read when a link opens: it is known once the TCP port is).
        clock: the broker's monotonic clock (for :class:`~pnsq._netio.handshake.FailureLog`).
    """

    secret: bytes
    node_id: Callable[[], str]
    clock: Callable[[], float]
    failures: FailureLog = field(init=False)

    def __post_init__(self) -> None:
        self.failures = FailureLog(log, self.clock)

    async def accept(
        self, stream: trio.abc.Stream, remote: str, initial: bytes
    ) -> tuple[str, bytes]:
        """The leader's side: the follower's proved node id and the bytes after the handshake.

        Raises:
            LinkAuthFailed: the peer failed; it got one refusal and nothing else.
        """
        shake = Handshake(self.secret, LISTENER, MAGIC, self.node_id())
        try:
            rest = await run_handshake(stream, shake, initial)
        except (HandshakeError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            reason = str(exc) or "no handshake in time"
            self.failures.failed(peer_host(remote), reason)
            await refuse(stream, encode_refusal(reason))
            raise LinkAuthFailed(reason) from exc
        assert shake.peer_identity is not None
        return shake.peer_identity, rest

    async def dial(self, stream: trio.abc.Stream, leader: str) -> bytes:
        """The follower's side, after the magic: the bytes received after the handshake.

        Raises:
            LinkAuthFailed: the leader failed, refused, or proved as another node than
                ``leader``.
            trio.BrokenResourceError: the connection broke.
        """
        shake = Handshake(self.secret, DIALER, MAGIC, self.node_id())
        try:
            rest = await run_handshake(stream, shake)
        except (HandshakeError, trio.TooSlowError) as exc:
            reason = str(exc) or "no handshake in time"
            self.failures.failed(leader, reason)
            raise LinkAuthFailed(reason) from exc
        if shake.peer_identity != leader:
            reason = f"the leader proved as {shake.peer_identity!r}, not {leader!r}"
            self.failures.failed(leader, reason)
            raise LinkAuthFailed(reason)
        return rest


def replica_refusal(hello: Hello, proved: str, placement: Placement) -> str | None:
    """Why an authenticated follower may not follow (None: it may): its ``Hello`` names
    another node than the one it proved, or lookupd did not place it as a replica."""
    if hello.node != proved:
        return f"HELLO names {hello.node!r}, the link proved {proved!r}"
    if hello.node not in placement.replicas:
        return f"{hello.node} is not a replica of {hello.topic}/{hello.partition}"
    return None
