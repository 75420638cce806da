"""nsqd's auth-http protocol: asking an auth server what a secret may do.

With ``--auth-http-address`` (repeatable) nsqd asks an auth server what a client's secret may
do: ``GET http://<addr>/auth?common_name=&remote_ip=&secret=&tls=`` (an address containing
``://`` is the whole URL; ``--auth-http-request-method=post`` POSTs the same values as a JSON
body), header ``Accept: application/vnd.nsq; version=1.0``, the addresses tried in turn from a
random one. The reply::

    {"ttl": 3600, "identity": "...", "identity_url": "...",
     "authorizations": [{"topic": "regex", "channels": ["regex"],
                         "permissions": ["subscribe", "publish"]}]}

Regexes are unanchored (Go's ``MatchString``: :meth:`re.Pattern.search`). SUB needs
``subscribe``, a matching topic and a channel regex matching the channel; PUB/MPUB/DPUB need
``publish``, a matching topic and some channel regex matching ``""``. After ``ttl`` seconds the
next check asks the auth server again.

A V2 connection's AUTH is :class:`nsqd.tcp.auth.SessionAuth`; the HTTP endpoints that hand
out messages ask through :class:`nsqd.http.auth.HTTPAuth`. Why an auth server failed is only
logged, as in nsqd; the client sees nsqd's texts.
"""

from __future__ import annotations

import json
import random
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx
import trio

from protocol.gostr import go_quote

ACCEPT = "application/vnd.nsq; version=1.0"
PERMISSIONS = frozenset({"subscribe", "publish"})


class AuthError(Exception):
    """No auth server gave a usable answer (logged; the client sees ``E_AUTH_FAILED``)."""


@dataclass(frozen=True, slots=True)
class Authorization:
    """One entry of ``authorizations``."""

    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def allows(self, topic: str, channel: str) -> bool:
        """nsqd's ``Authorization.IsAllowed``: channel "" means publish."""
        if ("subscribe" if channel else "publish") not in self.permissions:
            return False
        if self.topic.search(topic) is None:
            return False
        return any(pattern.search(channel) is not None for pattern in self.channels)

    def allows_reading(self, topic: str) -> bool:
        """pnsq: reading ``topic``'s messages without a channel (an HTTP range read) reads what
        every channel gets: ``subscribe`` on the topic with a channel pattern that matches any
        name, which pnsq takes as one that matches the empty name (``.*`` does)."""
        return (
            "subscribe" in self.permissions
            and self.topic.search(topic) is not None
            and any(pattern.search("") is not None for pattern in self.channels)
        )


@dataclass(frozen=True, slots=True)
class AuthState:
    """A successful auth reply; ``expires`` is on Trio's clock."""

    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires: float

    def allows(self, topic: str, channel: str) -> bool:
        return any(a.allows(topic, channel) for a in self.authorizations)

    def allows_reading(self, topic: str) -> bool:
        """:meth:`Authorization.allows_reading` by one of them."""
        return any(a.allows_reading(topic) for a in self.authorizations)


def _value(obj: dict[str, object], key: str) -> object:
    """Go's json.Unmarshal into a struct: keys match case-insensitively (the last match wins)
    and null means absent."""
    value = None
    for name, item in obj.items():
        if name.lower() == key and item is not None:
            value = item
    return value


def _str(obj: dict[str, object], key: str) -> str:
    value = _value(obj, key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AuthError(f"json: cannot unmarshal {key} into a string")
    return value


def _strings(obj: dict[str, object], key: str) -> list[str]:
    value = _value(obj, key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AuthError(f"json: cannot unmarshal {key} into []string")
    return value


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise AuthError(f"unable to compile {what} {go_quote(pattern.encode())} {exc}") from exc


def parse_auth_reply(body: bytes, now: float) -> AuthState:
    """Decode and validate an auth server's 200 reply (nsqd's checks and messages).

    Raises:
        AuthError: not JSON of the expected shape, an unknown permission, a regex that does
            not compile, or ``ttl <= 0``.
    """
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as exc:  # too deep nesting: a decode error too
        raise AuthError(f"invalid JSON reply: {exc}") from exc
    if not isinstance(raw, dict):
        raise AuthError("json: cannot unmarshal the reply into an object")
    ttl = _value(raw, "ttl")
    ttl = 0 if ttl is None else ttl
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        raise AuthError("json: cannot unmarshal ttl into an int")
    entries = _value(raw, "authorizations")
    entries = [] if entries is None else entries
    if not isinstance(entries, list):
        raise AuthError("json: cannot unmarshal authorizations into a list")
    authorizations = []
    for item in entries:
        entry = {} if item is None else item
        if not isinstance(entry, dict):
            raise AuthError("json: cannot unmarshal authorizations")
        permissions = _strings(entry, "permissions")
        channels = _strings(entry, "channels")
        topic = _str(entry, "topic")
        for permission in permissions:
            if permission not in PERMISSIONS:
                raise AuthError(f"unknown permission {permission}")
        authorizations.append(
            Authorization(
                topic=_compile(topic, "topic"),
                channels=tuple(_compile(c, "channel") for c in channels),
                permissions=frozenset(permissions),
            )
        )
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    identity, identity_url = _str(raw, "identity"), _str(raw, "identity_url")
    return AuthState(identity, identity_url, tuple(authorizations), now + ttl)


class AuthClient:
    """The auth servers of one nsqd, shared by all its connections (one HTTP client pool)."""

    def __init__(
        self,
        addresses: tuple[str, ...],
        *,
        method: str = "get",
        connect_timeout: float = 2.0,
        request_timeout: float = 5.0,
        root_ca_file: str = "",
        monotonic: Callable[[], float] = trio.current_time,
    ) -> None:
        self.addresses = addresses
        #: the clock AUTH replies expire by (the broker's, so tests can drive virtual time)
        self.monotonic = monotonic
        self.method = method
        # nsqd's client TLS config for https auth URLs: --tls-root-ca-file, else the system CAs
        verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=root_ca_file) if root_ca_file else True
        )
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            verify=verify,
            trust_env=False,
        )

    async def query(self, remote_ip: str, tls: bool, common_name: str, secret: str) -> AuthState:
        """Ask the auth servers in turn (from a random one) until one answers usefully.

        Raises:
            AuthError: every server failed; the message lists each failure.
        """
        values = {
            "common_name": common_name,
            "remote_ip": remote_ip,
            "secret": secret,
            "tls": "true" if tls else "false",
        }
        errors = []
        start = random.randrange(len(self.addresses))  # noqa: S311 - load spreading, as nsqd
        for i in range(len(self.addresses)):
            address = self.addresses[(start + i) % len(self.addresses)]
            try:
                return await self._query_one(address, values)
            # InvalidURL: a request too long to make (a secret of tens of KB); not an HTTPError
            except (AuthError, httpx.HTTPError, httpx.InvalidURL) as exc:
                errors.append(f"failed to auth against {address} - {exc}")
        raise AuthError("; ".join(errors))

    async def _query_one(self, address: str, values: dict[str, str]) -> AuthState:
        url = address if "://" in address else f"http://{address}/auth"
        headers = {"Accept": ACCEPT}
        if self.method == "post":  # Go's JSON encoding: invalid UTF-8 as U+FFFD
            body = {
                k: v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                for k, v in values.items()
            }
            response = await self._http.post(url, json=body, headers=headers)
        else:  # the secret's bytes as they came, percent-encoded (Go's url.Values)
            query = urlencode({k: v.encode("utf-8", "surrogateescape") for k, v in values.items()})
            response = await self._http.get(f"{url}?{query}", headers=headers)
        if response.status_code != 200:
            raise AuthError(f"got response {response.status_code} {response.text!r}")
        return parse_auth_reply(response.content, self.monotonic())

    async def aclose(self) -> None:
        await self._http.aclose()
