"""AUTH for the HTTP endpoints that hand out messages or move a channel's position.

nsqd's HTTP API reads no messages, so nsqd asks no AUTH over HTTP (publishing, ``/stats`` and
the admin endpoints stay open, as in nsqd). pnsq's HTTP API does read them; with
``--auth-http-address`` these endpoints ask the auth server, as a V2 connection's ``AUTH``
does, before anything else:

* ``/consume`` (``subscribe`` on its topic and channel), ``/message/finish`` and
  ``/channel/setoffset`` (the same: they move a channel's consumers);
* ``/partition/read`` and ``/message/get`` (a channel's worth of every message: ``subscribe``
  on the topic with a channel pattern that matches any channel,
  :meth:`~nsqd.auth.Authorization.allows_reading`).

``/consume/ack`` and ``/consume/nack`` need none: their token, 18 random bytes given only to an
authorized ``/consume``, is the capability.

The client sends its secret as ``Authorization: Bearer <secret>``. No secret: ``401
AUTH_REQUIRED``; one the auth servers refuse (or none answers): ``401 AUTH_FAILED``; a secret
whose authorizations do not cover the request: ``403 UNAUTHORIZED``. An auth server's answer
is kept for its ``ttl`` per secret, client address and scheme, as a connection keeps it.
"""

from __future__ import annotations

import logging
from typing import Final

from pnsq._netio.handshake import FailureLog, unlogged_since

from ..auth import AuthClient, AuthError, AuthState
from .base import HTTPError, Request

__all__ = ["HTTPAuth"]

log = logging.getLogger("nsqd.auth")

#: answers kept at most (secret, address, scheme); past it the expired ones go, then all
MAX_KEPT: Final = 10_000
_BEARER: Final = b"bearer "


class HTTPAuth:
    """The check (see the module doc); with no auth server (``client`` None) every request
    passes, as before."""

    def __init__(self, client: AuthClient | None) -> None:
        self.client = client
        self._kept: dict[tuple[str, str, bool], AuthState] = {}
        #: refusals logged at most once a minute per client address (a flood logs a line)
        self._failures = FailureLog(log, client.monotonic) if client is not None else None

    async def require(self, request: Request, topic: str, channel: str | None) -> None:
        """Raise :class:`HTTPError` unless the request's secret allows ``subscribe`` on
        ``topic`` and ``channel`` (None: reading the topic without a channel)."""
        if self.client is None:
            return
        state = await self._state(request)
        allowed = state.allows_reading(topic) if channel is None else state.allows(topic, channel)
        if not allowed:
            raise HTTPError(403, "UNAUTHORIZED")

    async def _state(self, request: Request) -> AuthState:
        assert self.client is not None
        secret = _bearer(request)
        if not secret:
            raise HTTPError(401, "AUTH_REQUIRED")
        key = (secret, request.remote_ip, request.tls)
        now = self.client.monotonic()
        state = self._kept.get(key)
        if state is not None and now < state.expires:
            return state
        try:
            state = await self.client.query(request.remote_ip, request.tls, "", secret)
        except AuthError as exc:
            assert self._failures is not None
            unlogged = self._failures.due(request.remote_ip)
            if unlogged is not None:
                more = unlogged_since(unlogged)
                log.warning("[%s] HTTP AUTH failed %s%s", request.remote_ip, exc, more)
            raise HTTPError(401, "AUTH_FAILED") from None
        if len(self._kept) >= MAX_KEPT:
            self._kept = {k: v for k, v in self._kept.items() if now < v.expires}
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
        self._kept[key] = state
        return state


def _bearer(request: Request) -> str:
    """The secret of an ``Authorization: Bearer <secret>`` header ("" without one)."""
    value = request.headers.get(b"authorization", b"")
    if value[: len(_BEARER)].lower() != _BEARER:
        return ""
    return value[len(_BEARER) :].strip().decode("utf-8", "surrogateescape")
