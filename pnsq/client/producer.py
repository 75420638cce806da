"""Publishing: PUB, MPUB, DPUB and youzan's PUB_TRACE, partition-aware when given nsqd's HTTP
address.

With ``http_address`` the producer learns each topic's partitions from ``GET /partitions`` and
picks one per publish as youzan go-nsq does (:mod:`pnsq.client.routing`): ``key=`` hashes to a fixed
partition (murmur3), no key round-robins, ``partition=`` is explicit. Without it, a publish
names no partition and nsqd picks (stock nsqd works that way).

Failures youzan's clients retry are retried here too, up to ``max_attempts`` with exponential
backoff: ``E_FAILED_ON_NOT_LEADER``, ``E_FAILED_ON_NOT_WRITABLE``, ``E_TOPIC_NOT_EXIST`` and a
lost connection; each retry looks the partitions up again and reconnects. Other errors
(``E_BAD_TOPIC``, ``E_BAD_MESSAGE``...) are raised at once.

Idempotent by default (``idempotent=True``) against pnsq: the producer names itself in
IDENTIFY and numbers its messages per partition (:mod:`pnsq.client.numbering`), and a retry
goes to the partition of the first try with the same numbers, so however often a publish is
retried — after a lost reply, a reconnect, a leader's kill -9, a failover — it is stored once;
the leader answers a retry of stored numbers ``DUPLICATE`` (counted in :attr:`Producer.stats`).
This needs the partitions (``http_address`` or ``lookupd_http_address``) and a pnsq nsqd;
otherwise, and with ``idempotent=False``, a retry after a lost reply may store a message twice
(at-least-once), as with any NSQ client.

Publishes pipeline: any number of tasks may publish at once; commands to one nsqd share its
connection and leave in one write, and the replies are matched in order.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Final, Unpack, final

import trio
from trio.lowlevel import ParkingLot

from protocol.commands import Command, Dpub, Mpub, Pub, PubTrace
from protocol.message import MESSAGE_ID
from protocol.tracing import TRACED_RESPONSE

from .connection import Connection, ConnectOptions, _raise_single
from .errors import (
    ConnectionClosedError,
    PartitionsUnknownError,
    UnexpectedResponseError,
)
from .numbering import (
    Make,
    Numbering,
    Ticket,
    already_stored,
    is_acknowledgement,
    refusal,
    stored_before_text,
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
_log = logging.getLogger("pnsq.client")

Key = str | bytes


def _mpub(topic: str, bodies: list[bytes], partition: int | None, sequence: int | None) -> Mpub:
    return Mpub(topic, bodies, partition, sequence)


def _expect_ok(reply: bytes, what: str) -> None:
    if not is_acknowledgement(reply):
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
        numbering: Numbering | None = None,
    ) -> None:
        self.address = address
        self.max_attempts = max(1, max_attempts)
        self.retry_backoff = retry_backoff
        self._pool = pool
        self._routes = routes
        self._rr = RoundRobin()
        #: the numbers of an idempotent producer (None: its publishes are not numbered)
        self.numbering = numbering
        self._lots: dict[tuple[str, int], ParkingLot] = {}  # publishes waiting for their turn
        #: messages acknowledged, tries after a failure, messages the leader told duplicates
        self.stats = {"published": 0, "retries": 0, "duplicates": 0}

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
        reply = await self._send(topic, key, partition, lambda p, s: Pub(topic, body, p, s))
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
            make = partial(_mpub, topic, chunk)
            reply = await self._send(topic, key, partition, make, len(chunk))
            _expect_ok(reply, "MPUB")

    async def dpublish(self, topic: str, body: bytes, defer_ms: int) -> None:
        """``DPUB``: one message, delivered no sooner than ``defer_ms`` from now (nsqd picks
        the partition; an idempotent producer names one, round-robin, to number it)."""

        def make(partition: int | None, sequence: int | None) -> Command:
            if sequence is None:
                return Dpub(topic, defer_ms, body)
            return Dpub(topic, defer_ms, body, partition, sequence)

        reply = await self._send(topic, None, None, make)
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
            topic, key, partition, lambda p, s: PubTrace(topic, trace_id, body, p, s)
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
        make: Make,
        count: int = 1,
    ) -> bytes:
        """Send the command ``make(partition, number)`` to the partition's leader, with
        retries; an idempotent producer numbers it at its first try and keeps partition and
        numbers for every retry."""
        if key is not None and partition is None and not self._routes.known:
            raise PartitionsUnknownError("keyed publishing needs nsqd's or lookupd's HTTP address")
        ticket: Ticket | None = None
        kept = partition  # the partition of the first try, once numbered
        error: BaseException | None = None
        delays = attempt_delays(self.max_attempts, self.retry_backoff)
        delay: float | None = next(delays)
        acknowledged = False
        hole: tuple[Ticket, Make] | None = None  # a given-up publish to send again first
        sends = 0  # of this publish's numbers
        try:
            while delay is not None:
                if error is not None:
                    self.stats["retries"] += 1
                    self._routes.invalidate(topic)
                    await trio.sleep(delay)
                try:
                    route = await self._routes.get(topic)
                    number = choose_partition(route, topic, self._rr, key=key, partition=kept)
                    info = route.get(number) if route is not None and number is not None else None
                    conn = await self._pool.get(info.tcp_address if info else self.address)
                    if ticket is None and number is not None and self._numbers(conn):
                        assert self.numbering is not None
                        ticket, kept = self.numbering.take(topic, number, count), number
                    sequence = acked = None
                    if ticket is not None:
                        assert self.numbering is not None
                        if hole is not None:  # (its refusal is judged as of its sending)
                            acked = self.numbering.acknowledged(ticket)
                            await self._send_again(conn, *hole)
                            hole = None
                        await self._turn(ticket)  # after the earlier ones, when resending
                        sequence = self.numbering.number(ticket)
                        acked = self.numbering.acknowledged(ticket)
                        self.numbering.sending(ticket)  # queued below without a pause
                        self._turns(ticket).unpark_all()
                        sends += 1
                    reply = await conn.command(make(number, sequence))
                except RETRIED as exc:
                    expected = refusal(exc)
                    if ticket is not None and expected is not None:  # not an attempt: again
                        assert self.numbering is not None
                        hole = self.numbering.given_up(ticket, expected)
                        if hole is None:
                            assert acked is not None
                            self.numbering.rebase(ticket, expected, acked)
                            self.numbering.out_of_turn(ticket)
                        error = None
                        continue
                    if not retryable(exc):
                        raise
                    error = exc
                    delay = next(delays, None)
                    continue
                self.stats["published"] += count
                stored = already_stored(reply, count)
                self.stats["duplicates"] += stored
                if stored and sends == 1 and ticket is not None:
                    self._stored_before(ticket, sequence)
                acknowledged = True
                return reply
        finally:
            if ticket is not None:
                assert self.numbering is not None
                self.numbering.done(
                    ticket, acknowledged=acknowledged, resend=None if acknowledged else make
                )
                self._turns(ticket).unpark_all()
        assert error is not None
        raise error

    def _stored_before(self, ticket: Ticket, number: int | None) -> None:
        """Say once per partition that a first try was answered DUPLICATE (a name used by
        two producers, or a re-run: :meth:`Numbering.stored_before_sent`)."""
        assert self.numbering is not None
        if number is not None and self.numbering.stored_before_sent(ticket):
            _log.warning(stored_before_text(self.numbering.name, ticket, number))

    async def _send_again(self, conn: Connection, hole: Ticket, make: Make) -> None:
        """Send the given-up publish ``hole`` again, with its numbers (the leader asked for
        them: :meth:`Numbering.given_up`)."""
        assert self.numbering is not None
        reply = await conn.command(make(hole.partition, self.numbering.number(hole)))
        if is_acknowledgement(reply):
            self.numbering.filled(hole)

    def _numbers(self, conn: Connection) -> bool:
        """Whether publishes on ``conn`` are numbered (idempotent, and a pnsq nsqd)."""
        return self.numbering is not None and "pnsq_producer" in conn.features

    def _turns(self, ticket: Ticket) -> ParkingLot:
        return self._lots.setdefault((ticket.topic, ticket.partition), ParkingLot())

    async def _turn(self, ticket: Ticket) -> None:
        """Return once ``ticket``'s publish may be sent (:meth:`Numbering.may_send`)."""
        assert self.numbering is not None
        while not self.numbering.may_send(ticket):
            await self._turns(ticket).park()


@asynccontextmanager
async def open_producer(
    address: str,
    *,
    http_address: str | None = None,
    lookupd_http_address: str | None = None,
    max_attempts: int = 3,
    retry_backoff: float = 0.05,
    route_ttl: float = DEFAULT_ROUTE_TTL,
    idempotent: bool = True,
    producer_name: str | None = None,
    **options: Unpack[ConnectOptions],
) -> AsyncIterator[Producer]:
    """A :class:`Producer` connected to nsqd at ``address`` (``host:port`` of its TCP port).

    ``http_address`` (nsqd's HTTP ``host:port``) makes it partition-aware; in a cluster,
    ``lookupd_http_address`` (pnsq nsqlookupd's) sends each partition's publishes to its
    leader, wherever that is. ``max_attempts``
    counts the first try; ``retry_backoff`` seconds doubles per retry (at most 2 s); a topic's
    partitions are looked up again after ``route_ttl`` seconds or a retryable error.
    ``idempotent`` numbers the publishes (see the module doc), under ``producer_name`` (default:
    a fresh unique name; a writer re-run after a crash that must not store again what it
    stored names itself the same each time). Connection options as for
    :func:`~pnsq.client.connection.open_connection`.

    Raises:
        OSError: the first connection failed.
        NsqError: nsqd refused IDENTIFY.
    """
    routes = Routes(http_address, address, ttl=route_ttl, lookupd_http_address=lookupd_http_address)
    numbering = Numbering(producer_name) if idempotent else None
    if numbering is not None:
        extra = dict(options.get("identify_extra") or {})
        options["identify_extra"] = {**extra, "pnsq_producer": numbering.name}
    try:
        async with trio.open_nursery() as nursery:
            pool = ConnectionPool(nursery, options)
            try:
                await pool.get(address)
                yield Producer(
                    pool,
                    routes,
                    address,
                    max_attempts=max_attempts,
                    retry_backoff=retry_backoff,
                    numbering=numbering,
                )
            finally:
                with trio.CancelScope(shield=True):
                    await pool.aclose()
    except BaseExceptionGroup as group:
        _raise_single(group)
        raise
