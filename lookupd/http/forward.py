"""HA mode: a write that reaches a follower lookupd is forwarded to the leader, and the
leader's answer (status, body, content type) is the follower's.

Which endpoints write: the admin ones that change the metadata (``/topic/create``,
``/topic/delete``, ``/topic/meta/update``, ``/topic/partition/expand``,
``/topic/partition/move``, ``/cluster/node/remove``) and pnsq's ``/pnsq/leaving``.
``/pnsq/progress`` is not forwarded: like registrations and heartbeats it is this lookupd's
own view of the nodes (every nsqd reports to every lookupd it registers with), which a
follower needs to take over with a current picture. Registry-only endpoints
(``/channel/create``, ``/topic/tombstone``, ...) stay per-lookupd, as on stock nsqlookupd.

A forwarded request carries :data:`FORWARDED_HEADER`; a lookupd that gets one while not leading
does not forward again: it answers youzan's ``400 E_FAILED_ON_NOT_LEADER`` (or ``503
E_ETCD_UNAVAILABLE`` when it cannot reach etcd either).

With the cluster credential, the lookupd-to-lookupd hop is authenticated: the forwarding lookupd
sends its own credential header (``X-Pnsq-Cluster-Auth``), never the client's, with every
forwarded request (it let through only what its own checks allowed), and a lookupd honours
:data:`FORWARDED_HEADER` only on a request that carries the credential: from anyone else the
header changes nothing (:meth:`lookupd.http.api.LookupHTTP._forward`).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from pnsq._netio.http import HTTPError
from protocol.cluster_auth import http_headers

from .base import Request

WRITE_PATHS = frozenset(
    {
        "/topic/create",
        "/topic/delete",
        "/topic/meta/update",
        "/topic/partition/expand",
        "/topic/partition/move",
        "/cluster/node/remove",
        "/cluster/balance",
        "/cluster/upgrade/begin",
        "/cluster/upgrade/done",
        "/pnsq/leaving",
    }
)
FORWARDED_HEADER = b"x-pnsq-forwarded"
FORWARD_TIMEOUT = 10.0  # seconds (a /topic/create waits up to 2 s for the nodes)
#: the error of a write while etcd cannot be reached (or no leader is known)
ETCD_UNAVAILABLE = "E_ETCD_UNAVAILABLE"
NOT_LEADER = "E_FAILED_ON_NOT_LEADER"


@dataclass(frozen=True, slots=True)
class Forwarded:
    """The leader's answer."""

    status: int
    body: bytes
    content_type: bytes | None


class Forwarder:
    """Sends requests on to the leader; :meth:`aclose` when done. ``secret``: the cluster
    credential, whose header goes with every forwarded request (none without one)."""

    def __init__(self, secret: bytes = b"") -> None:
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(FORWARD_TIMEOUT, connect=1.0))
        self._auth = http_headers(secret)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def forward(self, leader: str, request: Request) -> Forwarded:
        """``request`` sent to ``leader`` (``host:http_port``). Raises :class:`HTTPError` 503
        when the leader cannot be reached."""
        url = f"http://{leader}{request.path}"
        if request.raw_query:
            url += f"?{request.raw_query}"
        headers = {FORWARDED_HEADER.decode(): "1", **self._auth}
        for name in (b"accept", b"content-type"):
            values = request.header_values(name)
            if values:
                headers[name.decode()] = values[0]
        try:
            reply = await self._http.request(
                request.method, url, headers=headers, content=request.body or None
            )
        except httpx.HTTPError as exc:
            raise HTTPError(
                503,
                "E_LEADER_UNREACHABLE",
                {"leader": leader, "detail": str(exc) or type(exc).__name__},
            ) from exc
        content_type = reply.headers.get("content-type")
        return Forwarded(
            reply.status_code, reply.content, content_type.encode() if content_type else None
        )
