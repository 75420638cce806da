"""A V2 connection's AUTH: the secret it gave and what the auth server allowed it
(:mod:`nsqd.auth`: nsqd's auth-http protocol).

Errors reach the client as nsqd's texts; why an auth server failed is only logged, as in nsqd.
"""

from __future__ import annotations

import json
import logging

from protocol import ClientError, ErrorCode
from protocol.gostr import go_quote

from ..auth import AuthClient, AuthError, AuthState

log = logging.getLogger("nsqd.auth")

#: the publishes whose AUTH nsqd checks before reading their body (:meth:`SessionAuth.before_body`)
CHECKED_BEFORE_BODY = frozenset({b"MPUB", b"MPUB_TRACE", b"MPUB_EXT"})


class SessionAuth:
    """One connection's AUTH: the secret it gave and what the auth server allowed."""

    def __init__(self, client: AuthClient, remote_ip: str) -> None:
        self.client = client
        self.remote_ip = remote_ip
        self.tls = False
        self.common_name = ""
        self.secret = ""
        self.state: AuthState | None = None
        self._allowed: set[tuple[str, str]] = set()  # checks passed under the current state

    @property
    def authorized(self) -> bool:
        """nsqd's ``HasAuthorizations``."""
        return self.state is not None and bool(self.state.authorizations)

    async def authenticate(self, secret: bytes) -> bytes:
        """Handle ``AUTH``; returns the JSON reply.

        Raises:
            ClientError: ``E_INVALID AUTH already set``, ``E_AUTH_FAILED AUTH failed``,
                ``E_UNAUTHORIZED AUTH no authorizations found``.
        """
        if self.authorized:
            raise ClientError(ErrorCode.INVALID, "AUTH already set")
        self.secret = secret.decode("utf-8", "surrogateescape")
        await self._refresh()
        state = self.state
        assert state is not None
        if not state.authorizations:
            raise ClientError(ErrorCode.UNAUTHORIZED, "AUTH no authorizations found")
        reply = {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
        return json.dumps(reply, separators=(",", ":")).encode()

    def permits(self, topic: str, channel: str) -> bool:
        """Fast path: True when an unexpired state already allowed this (topic, channel)."""
        state = self.state
        return (
            state is not None
            and (topic, channel) in self._allowed
            and self.client.monotonic() < state.expires
        )

    async def check(self, command: str, topic: str, channel: str) -> None:
        """nsqd's ``CheckAuth`` (asks the auth server again once the TTL is over).

        Raises:
            ClientError: ``E_AUTH_FIRST``, ``E_AUTH_FAILED``, ``E_UNAUTHORIZED``.
        """
        if not self.authorized:
            raise ClientError(ErrorCode.AUTH_FIRST, f"AUTH required before {command}")
        state = self.state
        assert state is not None
        if self.client.monotonic() >= state.expires:
            await self._refresh()
            state = self.state
            assert state is not None
        if not state.allows(topic, channel):
            raise ClientError(
                ErrorCode.UNAUTHORIZED,
                f"AUTH failed for {command} on {_quote(topic)} {_quote(channel)}",
            )
        self._allowed.add((topic, channel))

    async def before_body(self, words: list[bytes]) -> None:
        """nsqd checks an MPUB's AUTH before it reads the body (a PUB's after): ``words``, the
        line of the command whose body is not read yet
        (:meth:`~protocol.parser.CommandParser.pending_line`), so that a client that may not
        publish there is refused before megabytes of its body are buffered.

        Raises:
            ClientError: as :meth:`check`.
        """
        if len(words) >= 2 and words[0] in CHECKED_BEFORE_BODY:
            topic = words[1].decode("utf-8", "surrogateescape")
            if not self.permits(topic, ""):
                await self.check(words[0].decode(), topic, "")

    async def _refresh(self) -> None:
        try:
            self.state = await self.client.query(
                self.remote_ip, self.tls, self.common_name, self.secret
            )
        except AuthError as exc:
            log.warning("[%s] AUTH failed %s", self.remote_ip, exc)
            raise ClientError(ErrorCode.AUTH_FAILED, "AUTH failed") from exc
        self._allowed.clear()


def _quote(text: str) -> str:
    return go_quote(text.encode("utf-8", "surrogateescape"))
