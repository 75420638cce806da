"""The magics of pnsq's links between its own nsqd nodes, on nsqd's TCP port (sans-IO).

A link is named by the 4-byte magic its dialer sends first; the cluster handshake
(:mod:`protocol.cluster_auth`) binds its proofs to that magic, so a proof for one kind of link
opens no other:

* :data:`REPLICATION` (``"  R1"``, :mod:`protocol.replication`): a follower of a partition
  dials the partition's leader;
* :data:`FORWARDING` (``"  F2"``): a node that leads no partition of a topic forwards a stock
  publish to a leader; after the handshake the link speaks protocol V2 (only the PUB family,
  NOP and heartbeats are used), and the leader takes it as a trusted cluster node's: the
  publish was authorized where the client connected (docs/security.md);
* :data:`TLS` (``"  S1"``): the dialer starts TLS right after it, as client; inside TLS it
  sends the magic of the link it wants (one of the two above), then the link runs as in
  plaintext, handshake first.

A listener that turns a link away sends one :func:`protocol.cluster_auth.encode_refusal`
frame and closes.
"""

from __future__ import annotations

from typing import Final

from .replication import MAGIC as REPLICATION

__all__ = ["FORWARDING", "LINKS", "REPLICATION", "TLS"]

FORWARDING: Final = b"  F2"
TLS: Final = b"  S1"
#: the links a dialer may ask for, in plaintext or inside :data:`TLS`
LINKS: Final = frozenset({REPLICATION, FORWARDING})
