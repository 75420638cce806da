"""The Trio plumbing a partition-aware producer needs: connections by address, opened on demand
and replaced when lost (:class:`ConnectionPool`), and topics' partitions looked up over HTTP and
cached (:class:`Routes`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from typing import Final, final

import trio

from ._http import DEFAULT_TIMEOUT, fetch_partitions, fetch_partitions_via_lookupd
from .connection import Connection, ConnectOptions, open_connection
from .errors import ConnectionClosedError, NsqError, UnexpectedResponseError
from .routing import TopicPartitions

_log = logging.getLogger("pnsq.client")

DEFAULT_ROUTE_TTL: Final = 60.0


@final
class ConnectionPool:
    """One connection per nsqd address, each held open by a task in ``nursery``.

    :meth:`get` returns the live connection to an address, connecting (once, however many tasks
    ask) when there is none or the last one was closed. :meth:`aclose` closes them all; each
    flushes what was queued on it first (at most 2 s).
    """

    def __init__(self, nursery: trio.Nursery, options: ConnectOptions) -> None:
        self._nursery = nursery
        self._options = options
        self._conns: dict[str, Connection] = {}
        self._scopes: dict[Connection, trio.CancelScope] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._closed = False

    def peek(self, address: str) -> Connection | None:
        """The current connection to ``address`` (possibly closed), without connecting."""
        return self._conns.get(address)

    async def get(self, address: str) -> Connection:
        """A live connection to ``address``.

        Raises:
            OSError: connecting failed.
            NsqError: nsqd refused IDENTIFY.
            ConnectionClosedError: the pool is closed.
        """
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        lock = self._locks.setdefault(address, trio.Lock())
        async with lock:
            if self._closed:
                raise ConnectionClosedError("the client is closed")
            conn = self._conns.get(address)
            if conn is not None and not conn.closed:
                return conn
            if conn is not None:
                self.discard(conn)
            conn = await self._nursery.start(self._hold, address)
            assert isinstance(conn, Connection)
            self._conns[address] = conn
            return conn

    def discard(self, conn: Connection) -> None:
        """Close ``conn`` (its task ends); the next :meth:`get` of its address reconnects."""
        if self._conns.get(conn.address) is conn:
            del self._conns[conn.address]
        scope = self._scopes.pop(conn, None)
        if scope is not None:
            scope.cancel()

    async def aclose(self) -> None:
        """Close every connection, each after flushing what was queued on it."""
        self._closed = True
        for conn in list(self._conns.values()):
            await conn.aclose()
            self.discard(conn)

    async def _hold(
        self, address: str, *, task_status: trio.TaskStatus[Connection] = trio.TASK_STATUS_IGNORED
    ) -> None:
        started = False
        with trio.CancelScope() as scope:
            try:
                async with open_connection(address, **self._options) as conn:
                    self._scopes[conn] = scope
                    task_status.started(conn)
                    started = True
                    await trio.sleep_forever()
            except (OSError, ConnectionClosedError, NsqError, UnexpectedResponseError) as exc:
                if not started:
                    raise
                _log.debug("connection to %s ended: %s", address, exc)


def _with_last(found: TopicPartitions, last: TopicPartitions | None) -> TopicPartitions:
    """``found``, with the partitions it lacks (a leader that did not answer, a lookupd that
    just restarted and knows only some) as ``last`` described them."""
    if last is None or len(found.partitions) >= found.partition_num:
        return found
    have = {info.partition for info in found.partitions}
    kept = [info for info in last.partitions if info.partition not in have]
    merged = sorted((*found.partitions, *kept), key=lambda info: info.partition)
    return replace(found, partitions=tuple(merged))


@final
class Routes:
    """Topics' partitions from ``GET /partitions`` on ``http_address`` (one nsqd), or across
    a cluster through pnsq lookupd at ``lookupd_http_address``, cached for ``ttl`` seconds or
    until :meth:`invalidate`. With neither address every topic is unknown."""

    def __init__(
        self,
        http_address: str | None,
        tcp_address: str | None,
        *,
        ttl: float = DEFAULT_ROUTE_TTL,
        timeout: float = DEFAULT_TIMEOUT,
        lookupd_http_address: str | None = None,
    ) -> None:
        self.http_address = http_address
        self.lookupd_http_address = lookupd_http_address
        self.tcp_address = tcp_address
        self.ttl = ttl
        self.timeout = timeout
        self._cache: dict[str, tuple[float, TopicPartitions]] = {}
        self._last: dict[str, TopicPartitions] = {}  # kept while lookups fail
        self._locks: dict[str, trio.Lock] = {}

    async def get(self, topic: str, *, refresh: bool = False) -> TopicPartitions | None:
        """The partitions of ``topic``, or None if they cannot be known (no HTTP address, or
        nsqd does not have the topic: nothing is cached then, the next call asks again).
        While the address (nsqd's or lookupd's) is unreachable, the last partitions found are
        used: a lookupd restart does not stop publishing to the leaders it named.

        Raises:
            OSError: the address is unreachable and the topic was never looked up.
            NsqHTTPError: nsqd answered with an unexpected error status.
        """
        if not self.known:
            return None
        if not refresh and (route := self._fresh(topic)) is not None:
            return route
        async with self._locks.setdefault(topic, trio.Lock()):
            if not refresh and (route := self._fresh(topic)) is not None:
                return route
            if self.lookupd_http_address is not None:
                lookup = partial(
                    fetch_partitions_via_lookupd, self.lookupd_http_address, topic, self.timeout
                )
            else:
                assert self.http_address is not None
                lookup = partial(
                    fetch_partitions, self.http_address, topic, self.tcp_address, self.timeout
                )
            try:
                found = await trio.to_thread.run_sync(lookup, abandon_on_cancel=True)
            except OSError:
                if topic in self._last:
                    return self._last[topic]
                raise
            if found is not None:
                found = _with_last(found, self._last.get(topic))
                self._cache[topic] = (trio.current_time(), found)
                self._last[topic] = found
            return found

    @property
    def known(self) -> bool:
        """Whether partitions can be looked up at all (an HTTP or a lookupd address)."""
        return self.http_address is not None or self.lookupd_http_address is not None

    def _fresh(self, topic: str) -> TopicPartitions | None:
        cached = self._cache.get(topic)
        if cached is None or trio.current_time() - cached[0] > self.ttl:
            return None
        return cached[1]

    def invalidate(self, topic: str) -> None:
        """Forget ``topic``'s partitions: the next :meth:`get` looks them up again."""
        self._cache.pop(topic, None)
