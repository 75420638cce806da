"""A small etcd v3 client over the gRPC JSON gateway (``/v3/...``) with httpx on Trio: range,
transactions, leases and a streaming watch — what lookupd's HA mode needs, nothing more.

The request bodies and reply parsing are :mod:`lookupd.ha.leadership.codec`'s. Every failure (no
etcd at any endpoint, a timeout, an HTTP error, a reply that is not etcd's) is one
:class:`EtcdError`, which is a :class:`~lookupd.state.store.UnavailableError`: what the HTTP API
answers ``503`` for. Several endpoints: a request that cannot reach one tries the next.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import httpx

from ..state.store import UnavailableError
from . import codec

log = logging.getLogger("nsqlookupd.etcd")

REQUEST_TIMEOUT = 2.0  # seconds for one request (a keepalive must answer well within the TTL)


class EtcdError(UnavailableError):
    """etcd could not be reached, or answered something unexpected."""


class EtcdClient:
    """Requests to the etcd endpoints (``http://host:port``); :meth:`aclose` when done."""

    def __init__(self, endpoints: Sequence[str], timeout: float = REQUEST_TIMEOUT) -> None:
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._preferred = 0
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=1.0))
        self._watch_http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=1.0))
        httpx_log = logging.getLogger("httpx")
        if httpx_log.level == logging.NOTSET:  # not one INFO line per keepalive
            httpx_log.setLevel(logging.WARNING)

    def __str__(self) -> str:
        return ",".join(self.endpoints)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()
        await self._watch_http.aclose()

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the first endpoint that answers; its JSON reply."""
        errors = []
        count = len(self.endpoints)
        for step in range(count):
            index = (self._preferred + step) % count
            url = self.endpoints[index] + path
            try:
                response = await self._http.post(url, json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{url}: {str(exc) or type(exc).__name__}")
                continue
            if response.status_code != 200:
                raise EtcdError(f"etcd {url}: HTTP {response.status_code}: {response.text[:200]}")
            self._preferred = index
            try:
                document = response.json()
            except ValueError as exc:
                raise EtcdError(f"etcd {url}: not JSON: {exc}") from exc
            if not isinstance(document, dict):
                raise EtcdError(f"etcd {url}: unexpected reply {document!r}")
            return document
        raise EtcdError(f"etcd unreachable ({'; '.join(errors)})")

    async def range_prefix(self, prefix: str) -> tuple[list[codec.KeyValue], int]:
        """Every key under ``prefix`` and the revision read at."""
        reply = await self.call("/v3/kv/range", codec.range_request(prefix, prefix=True))
        return _parsed(codec.parse_range, reply)

    async def get(self, key: str) -> tuple[codec.KeyValue | None, int]:
        """One key (None if absent) and the revision read at."""
        kvs, revision = _parsed(
            codec.parse_range, await self.call("/v3/kv/range", codec.range_request(key))
        )
        return (kvs[0] if kvs else None), revision

    async def txn(self, body: dict[str, Any]) -> tuple[bool, int]:
        """A transaction: whether its compares held, and the revision after it."""
        return _parsed(codec.parse_txn, await self.call("/v3/kv/txn", body))

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        """An unconditional put (a lookupd's own registration)."""
        await self.call("/v3/kv/put", codec.put_op(key, value, lease)["request_put"])

    async def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: ``(id, ttl)``."""
        return _parsed(codec.parse_lease, await self.call("/v3/lease/grant", {"TTL": ttl}))

    async def keepalive(self, lease: int) -> int:
        """One keepalive; the lease's remaining TTL (0: etcd no longer has it)."""
        reply = await self.call("/v3/lease/keepalive", {"ID": str(lease)})
        return _parsed(codec.parse_lease, reply)[1]

    async def revoke(self, lease: int) -> None:
        """Drop a lease and every key attached to it."""
        await self.call("/v3/lease/revoke", {"ID": str(lease)})

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[int]:
        """Yield the revision of every batch of changes under ``prefix`` from
        ``start_revision`` on, until the stream ends or fails (:class:`EtcdError`)."""
        url = self.endpoints[self._preferred] + "/v3/watch"
        body = codec.watch_request(prefix, start_revision)
        try:
            async with self._watch_http.stream("POST", url, json=body) as response:
                if response.status_code != 200:
                    raise EtcdError(f"etcd {url}: HTTP {response.status_code}")
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    revision, events, ended = _parsed(codec.parse_watch_line, line)
                    if ended:
                        raise EtcdError(f"etcd {url}: watch cancelled")
                    if events:
                        yield revision
        except httpx.HTTPError as exc:
            raise EtcdError(f"etcd {url}: watch: {str(exc) or type(exc).__name__}") from exc


T = TypeVar("T")


def _parsed(parse: Callable[[Any], T], reply: Any) -> T:
    try:
        return parse(reply)
    except codec.EtcdReplyError as exc:
        raise EtcdError(f"etcd: {exc}") from exc
