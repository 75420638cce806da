"""Who may follow, on ``"  R1"`` links that proved the cluster credential.

With ``--cluster-secret-file`` the leader runs the cluster handshake
(:class:`~pnsq._netio.cluster_link.ClusterLinks`, link kind ``"  R1"``, over TLS when the node
has a certificate) before it reads anything else: a peer that fails it gets one refusal frame
and a closed connection, never a ``Welcome`` nor a record. Each side proves with its node id
(``host:tcp_port``) as its identity; the follower takes a leader only under the node id lookupd
named, and the leader takes a follower's ``Hello`` only when it names the node id the follower
proved with and lookupd placed that node as a replica of the partition
(:func:`replica_refusal`). So only acks on a placed replica's authenticated stream count toward
the high-watermark and the in-sync set.
"""

from __future__ import annotations

from protocol.replication import Hello

from ..core.partition_state import Placement


def replica_refusal(hello: Hello, proved: str, placement: Placement) -> str | None:
    """Why an authenticated follower may not follow (None: it may): its ``Hello`` names
    another node than the one it proved, or lookupd did not place it as a replica."""
    if hello.node != proved:
        return f"HELLO names {hello.node!r}, the link proved {proved!r}"
    if hello.node not in placement.replicas:
        return f"{hello.node} is not a replica of {hello.topic}/{hello.partition}"
    return None
