"""Publishing: PUB, MPUB, DPUB and youzan's PUB_TRACE, partition-aware when given nsqd's HTTP
address.

With ``http_address`` the producer learns each topic's partitions from ``GET /partitions`` and
picks one per publish as youzan go-nsq does (:mod:`pnsq.client.routing`): ``key=`` hashes to a fixed
partition (murmur3), no key round-robins, ``partition=`` is explicit. Without it, a publish
names no partition and nsqd picks (stock nsqd works that way).

Failures youzan's clients retry are retried here too, up to ``max_attempts`` with exponential
backoff: ``E_FAILED_ON_NOT_LEADER``, ``E_FAILED_ON_NOT_WRITABLE``, ``E_TOPIC_NOT_EXIST`` and a
lost connection; each retry looks the partitions up again and reconnects. A retry after a lost
connection may publish a message twice (at-least-once). Other errors (``E_BAD_TOPIC``,
``E_BAD_MESSAGE``...) are raised at once.

Publishes pipeline: any number of tasks may publish at once; commands to one nsqd share its
connection and leave in one write, and the replies are matched in order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Final, Unpack, final

import trio

from protocol.commands import Command, Dpub, Mpub, Pub, PubTrace
from protocol.message import MESSAGE_ID
from protocol.tracing import TRACED_RESPONSE

from .connection import Connection, ConnectOptions, _raise_single
from .errors import (
    ConnectionClosedError,
    PartitionsUnknownError,
    UnexpectedResponseError,
)
from .pool import DEFAULT_ROUTE_TTL, ConnectionPool, Routes
from .retry import RETRIED, attempt_delays, retry_delay, retryable
from .routing import (
    RoundRobin,
    TopicPartitions,
    choose_partition,
    chunk_bodies,
    group_by_partition,
)

#: nsqd's default --max-body-size is 5 MiB; MPUB batches stay under it with room to spare.
DEFAULT_MAX_BATCH_BYTES: Final = 4 * 1024 * 1024

Key = str | bytes


def _mpub(topic: str, bodies: list[bytes], partition: int | None) -> Mpub:
    return Mpub(topic, bodies, partition)


def _expect_ok(reply: bytes, what: str) -> None:
    if reply != b"OK":
        raise UnexpectedResponseError(f"{what}: expected OK, got {reply[:64]!r}")


@final
class Producer:
    """Publishes to nsqd. Create it with :func:`open_producer`.

    Every method returns once nsqd acknowledged the publish, and raises
    :class:`~pnsq.client.errors.NsqError` with nsqd's text if it refused.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        routes: Routes,
        address: str,
        *,
        max_attempts: int,
        retry_backoff: float,
    ) -> None:
        self.address = address
        self.max_attempts = max(1, max_attempts)
        self.retry_backoff = retry_backoff
        self._pool = pool
        self._routes = routes
        self._rr = RoundRobin()

    @property
    def connection(self) -> Connection:
        """The connection to ``address`` (the seed nsqd): the latest one, possibly closed."""
        conn = self._pool.peek(self.address)
        if conn is None:
            raise ConnectionClosedError(f"no connection to {self.address}")
        return conn

    async def partitions(self, topic: str) -> TopicPartitions | None:
        """``topic``'s partitions, looked up now; None without an HTTP address or topic."""
        return await self._routes.get(topic, refresh=True)

    async def publish(
        self,
        topic: str,
        body: bytes,
        *,
        key: Key | None = None,
        partition: int | None = None,
    ) -> None:
        """``PUB``: one message (to ``key``'s partition, or ``partition``, or round-robin)."""
        reply = await self._send(topic, key, partition, lambda p: Pub(topic, body, p))
        _expect_ok(reply, "PUB")

    async def mpublish(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        key: Key | None = None,
        keys: Sequence[Key] | None = None,
        partition: int | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        """``MPUB``: several messages, in batches of at most ``max_batch_bytes``.

        ``keys`` (one per body) splits the messages by partition, keeping publish order within
        each; ``key`` sends all to one partition. Each batch is atomic; a failed call may have
        published earlier batches.
        """
        if not bodies:
            raise ValueError("mpublish needs at least one body")
        if keys is not None:
            route = await self._require_route(topic)
            groups = group_by_partition(bodies, keys, route.partition_num)
            for number, group in groups.items():
                await self._mpub_batches(topic, group, None, number, max_batch_bytes)
        else:
            await self._mpub_batches(topic, bodies, key, partition, max_batch_bytes)

    async def _mpub_batches(
        self,
        topic: str,
        bodies: Sequence[bytes],
        key: Key | None,
        partition: int | None,
        max_bytes: int,
    ) -> None:
        for chunk in chunk_bodies(bodies, max_bytes):
            reply = await self._send(topic, key, partition, partial(_mpub, topic, chunk))
            _expect_ok(reply, "MPUB")

    async def dpublish(self, topic: str, body: bytes, defer_ms: int) -> None:
        """``DPUB``: one message, delivered no sooner than ``defer_ms`` from now (DPUB names no
        partition: nsqd picks)."""
        reply = await self._send(topic, None, None, lambda _: Dpub(topic, defer_ms, body))
        _expect_ok(reply, "DPUB")

    async def publish_traced(
        self,
        topic: str,
        body: bytes,
        trace_id: int,
        *,
        key: Key | None = None,
        partition: int | None = None,
    ) -> tuple[bytes, int]:
        """``PUB_TRACE`` (pnsq / youzan nsqd): returns ``(16-byte message id, log offset)``.

        The id's second half is ``trace_id``; consumers see it as ``Message.trace_id``.
        """
        reply = await self._send(
            topic, key, partition, lambda p: PubTrace(topic, trace_id, body, p)
        )
        if len(reply) != TRACED_RESPONSE.size or not reply.startswith(b"OK"):
            raise UnexpectedResponseError(f"PUB_TRACE: unexpected reply {reply[:64]!r}")
        _, internal_id, reply_trace_id, offset, _raw_size = TRACED_RESPONSE.unpack(reply)
        return MESSAGE_ID.pack(internal_id, reply_trace_id), offset

    # ------------------------------------------------------------------ internals

    async def _require_route(self, topic: str) -> TopicPartitions:
        if not self._routes.known:
            raise PartitionsUnknownError("keyed publishing needs nsqd's or lookupd's HTTP address")
        for attempt in range(self.max_attempts):
            if attempt:
                await self._sleep_before(attempt)
            route = await self._routes.get(topic, refresh=attempt > 0)
            if route is not None:
                return route
        where = self._routes.lookupd_http_address or self._routes.http_address
        raise PartitionsUnknownError(f"topic {topic!r} not found on {where}")

    async def _sleep_before(self, attempt: int) -> None:
        await trio.sleep(retry_delay(self.retry_backoff, attempt))

    async def _send(
        self,
        topic: str,
        key: Key | None,
        partition: int | None,
        make: Callable[[int | None], Command],
    ) -> bytes:
        """Send the command ``make(partition)`` to the partition's leader, with retries."""
        if key is not None and partition is None and not self._routes.known:
            raise PartitionsUnknownError("keyed publishing needs nsqd's or lookupd's HTTP address")
        error: BaseException | None = None
        for attempt, delay in enumerate(attempt_delays(self.max_attempts, self.retry_backoff)):
            if attempt:
                self._routes.invalidate(topic)
                await trio.sleep(delay)
            try:
                route = await self._routes.get(topic)
                number = choose_partition(route, topic, self._rr, key=key, partition=partition)
                info = route.get(number) if route is not None and number is not None else None
                conn = await self._pool.get(info.tcp_address if info else self.address)
                return await conn.command(make(number))
            except RETRIED as exc:
                if not retryable(exc):
                    raise
                error = exc
        assert error is not None
        raise error


@asynccontextmanager
async def open_producer(
    address: str,
    *,
    http_address: str | None = None,
    lookupd_http_address: str | None = None,
    max_attempts: int = 3,
    retry_backoff: float = 0.05,
    route_ttl: float = DEFAULT_ROUTE_TTL,
    **options: Unpack[ConnectOptions],
) -> AsyncIterator[Producer]:
    """A :class:`Producer` connected to nsqd at ``address`` (``host:port`` of its TCP port).

    ``http_address`` (nsqd's HTTP ``host:port``) makes it partition-aware; in a cluster,
    ``lookupd_http_address`` (pnsq nsqlookupd's) sends each partition's publishes to its
    leader, wherever that is. ``max_attempts``
    counts the first try; ``retry_backoff`` seconds doubles per retry (at most 2 s); a topic's
    partitions are looked up again after ``route_ttl`` seconds or a retryable error. Connection
    options as for :func:`~pnsq.client.connection.open_connection`.

    Raises:
        OSError: the first connection failed.
        NsqError: nsqd refused IDENTIFY.
    """
    routes = Routes(http_address, address, ttl=route_ttl, lookupd_http_address=lookupd_http_address)
    try:
        async with trio.open_nursery() as nursery:
            pool = ConnectionPool(nursery, options)
            try:
                await pool.get(address)
                yield Producer(
                    pool, routes, address, max_attempts=max_attempts, retry_backoff=retry_backoff
                )
            finally:
                with trio.CancelScope(shield=True):
                    await pool.aclose()
    except BaseExceptionGroup as group:
        _raise_single(group)
        raise
