"""The cluster credential on ``"  V1"`` links: who may register, proved before the first command.

Who may use the V1 port: with ``--cluster-secret-file``, only a pnsq nsqd holding the cluster
secret. Right after the magic such a node sends the cluster handshake's CHALLENGE
(:mod:`protocol.cluster_auth`, link kind ``"  V1"``); its first byte is 0, never the letter a
V1 command starts with (:func:`~protocol.cluster_auth.starts_handshake`), so the listener
knows from one byte which kind of peer it has, without reading a command:

* with a secret, a peer that opens with a command (a stock nsqd, or pnsq's without the secret)
  gets one ``E_CLUSTER_AUTH`` V1 error and a closed connection; a peer that fails the
  handshake, or stays silent for :data:`~pnsq._netio.handshake.HANDSHAKE_TIMEOUT` seconds,
  gets one refusal frame and a closed connection. Neither gets an IDENTIFY reply, nor is it
  registered. A peer that passes is served protocol V1 as before, and its IDENTIFY must name
  the node id it proved (:func:`identify_refusal`);
* without a secret, a peer that opens with a command is served exactly as before (as stock
  nsqlookupd serves it), and one that opens with the handshake is told in one refusal frame
  that this lookupd holds no secret.

Refused peers are logged at most once a minute per peer host (a stranger retrying in a loop
must not flood the log).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from pnsq._netio.handshake import (
    HANDSHAKE_TIMEOUT,
    FailureLog,
    listen_handshake,
    peer_host,
    refuse,
)
from protocol.cluster_auth import (
    LISTENER,
    REFUSED_CODE,
    Handshake,
    HandshakeError,
    encode_refusal,
    starts_handshake,
)
from protocol.lookup_v1 import MAGIC_V1, LookupV1Error, PeerIdentity

log = logging.getLogger("nsqlookupd.tcp")

#: what a lookupd without a secret answers to a peer that opens with the handshake
NO_SECRET = "this nsqlookupd holds no cluster secret (--cluster-secret-file)"  # noqa: S105  # a message
#: what a lookupd with a secret answers to a peer that opens with a V1 command
REQUIRED = "cluster handshake required (docs/security.md)"


@dataclass(frozen=True, slots=True)
class Opened:
    """A connection let through to protocol V1.

    Attributes:
        data: what was read of it so far (the magic, maybe more), for the V1 parser.
        eof: the peer closed its side after ``data``.
        proved: the node id the peer proved with, or None on a link without the credential.
    """

    data: bytes
    eof: bool = False
    proved: str | None = None


async def read_opening(stream: trio.abc.ReceiveStream) -> tuple[bytes, bool]:
    """The magic and, after ``"  V1"``, one byte more (never more than that, so the rest stays
    for the handshake or the V1 parser); and whether the peer closed before them."""
    data = b""
    while len(data) < len(MAGIC_V1) or (data.startswith(MAGIC_V1) and len(data) == 4):
        chunk = await stream.receive_some(len(MAGIC_V1) + 1 - len(data))
        if not chunk:
            return data, True
        data += chunk
    return data, False


@dataclass
class LinkAuth:
    """This lookupd's credential on V1 links (see the module doc).

    Args:
        secret: the cluster secret; ``b""``: none (links are not authenticated).
        identity: this lookupd's identity in handshakes (``broadcast_address:tcp_port``),
            awaited: it is known once both listeners are bound.
        clock: the lookupd's monotonic clock (for the failure log).
    """

    secret: bytes
    identity: Callable[[], Awaitable[str]]
    clock: Callable[[], float]
    failures: FailureLog = field(init=False)

    def __post_init__(self) -> None:
        self.failures = FailureLog(log, self.clock)

    async def open(self, stream: trio.abc.Stream, remote: str) -> Opened | None:
        """Read the opening of a connection and, with a secret, run the handshake; None when
        the peer was refused (it got its one error; the caller closes)."""
        if not self.secret:
            data, eof = await read_opening(stream)
            opened = len(data) > len(MAGIC_V1) and data.startswith(MAGIC_V1)
            if opened and starts_handshake(data[len(MAGIC_V1)]):
                await self._refuse(stream, remote, NO_SECRET, None)
                return None
            return Opened(data, eof)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                data, eof = await read_opening(stream)
                identity = await self.identity()
        except trio.TooSlowError:
            await self._refuse(stream, remote, "no handshake in time", None)
            return None
        if not data.startswith(MAGIC_V1) or len(data) == len(MAGIC_V1):
            return Opened(data, eof)  # a wrong magic or a close: the V1 parser says so
        if not starts_handshake(data[len(MAGIC_V1)]):
            refusal = LookupV1Error(REFUSED_CODE, REQUIRED).reply
            await self._refuse(stream, remote, "a V1 command without the handshake", refusal)
            return None
        shake = Handshake(self.secret, LISTENER, MAGIC_V1, identity)
        try:
            proved, rest = await listen_handshake(stream, shake, data[len(MAGIC_V1) :])
        except HandshakeError as exc:
            await self._refuse(stream, remote, str(exc), None)
            return None
        log.info("CLIENT(%s): proved the cluster credential as %s", remote, proved)
        return Opened(MAGIC_V1 + rest, proved=proved)

    async def _refuse(
        self, stream: trio.abc.Stream, remote: str, reason: str, reply: bytes | None
    ) -> None:
        self.failures.failed(peer_host(remote), reason)
        await refuse(stream, encode_refusal(reason) if reply is None else reply)


def identify_refusal(peer: PeerIdentity, proved: str | None) -> LookupV1Error | None:
    """The error for an IDENTIFY on an authenticated link that names another node than the one
    the link proved (None: it names that node, or the link has no credential): a holder of the
    secret registers as itself, so a registration cannot claim another node's placements."""
    if proved is None or peer.node_id == proved:
        return None
    return LookupV1Error(REFUSED_CODE, f"IDENTIFY names {peer.node_id}, the link proved {proved}")
