"""The cluster credential both daemons read at start: ``--cluster-secret-file``.

pnsq's links between its own processes (replication, lookupd's cluster-control endpoints) are
protected by a secret every node holds (docs/security.md). It is read once, at start: a file
that is missing, unreadable or empty is a start-up error, never a silently open cluster. A
daemon started with a client-facing protection (``--auth-http-address``, ``--tls-required``)
and no credential refuses to start: otherwise the replication protocol would be a way around
it. Without any of these the daemon runs as before and says once that its cluster links are
unauthenticated.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FLAG", "ClusterSecretError", "load_cluster_secret"]

FLAG = "--cluster-secret-file"


class ClusterSecretError(Exception):
    """The cluster credential cannot be had; the text names the flag and the path."""


def load_cluster_secret(
    path: str, required_by: Sequence[str], log: logging.Logger, *, links: bool = True
) -> bytes:
    """The secret in ``path`` (trailing whitespace and newlines stripped), or ``b""`` without
    a path, after one WARNING that cluster links are unauthenticated.

    ``required_by``: the flags given that need a credential (``--auth-http-address``, ...);
    ``links``: whether the daemon has cluster links at all (a standalone nsqd has none: no
    WARNING then).

    Raises:
        ClusterSecretError: ``required_by`` is not empty and no path was given; the file is
            missing or unreadable; it holds nothing but whitespace.
    """
    if not path:
        if required_by:
            given = " and ".join(required_by)
            raise ClusterSecretError(
                f"{given} needs {FLAG}: without a cluster credential any peer could replicate "
                "around it (docs/security.md)"
            )
        if links:
            log.warning(
                "cluster links are unauthenticated: no %s (docs/security.md); anyone who "
                "reaches this node's ports can act as a pnsq peer",
                FLAG,
            )
        return b""
    try:
        secret = Path(path).read_bytes().rstrip()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterSecretError(f"{FLAG}={path} unreadable - {reason}") from exc
    if not secret:
        raise ClusterSecretError(f"{FLAG}={path} is empty")
    return secret
