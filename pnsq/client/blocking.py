"""The blocking client, for scripts, tools and Spark executors: :class:`Producer` (also known as
:class:`BlockingClient`: plain sockets, the sans-IO protocol, no Trio) and :class:`Consumer`
(:mod:`pnsq.client.blocking_consumer`: the Trio consumer in a background thread, imported on first
use, so ``import pnsq.client.blocking`` does not import Trio). Its connections are
:mod:`pnsq.client.blocking_connection`'s.

    with Producer("127.0.0.1:4150", "127.0.0.1:4151") as nsq:
        nsq.publish("events", b"body", key="user-42")
        nsq.mpublish("events", bodies, keys=keys)
        batch = nsq.read_range("events", partition=0, offset=0, max_records=1000)

    with Consumer("127.0.0.1:4150", "events", "audit", http_address="127.0.0.1:4151") as c:
        for message in c:
            message.finish()

Publishing routes like the Trio :class:`pnsq.client.producer.Producer` (murmur3 key hash,
round-robin, explicit partition), retries the same errors and is idempotent the same way
(:mod:`pnsq.client.numbering`: with ``http_address``, against pnsq, a retry is stored once;
``idempotent=False`` turns it off). One instance is not thread-safe; give each thread its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self, final

from protocol.commands import Command, Dpub, Mpub, MpubTrace, Pub, PubTrace
from protocol.message import MESSAGE_ID, partition_of
from protocol.range_read import RangeBatch
from protocol.tracing import TRACED_RESPONSE

from ._http import DEFAULT_TIMEOUT, HTTPNode, fetch_partitions_via_lookupd
from .blocking_connection import BlockingConnection
from .errors import (
    NsqHTTPError,
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
from .retry import RETRIED, attempt_delays, retryable
from .routing import (
    RoundRobin,
    TopicPartitions,
    choose_partition,
    chunk_bodies,
    chunk_traced,
    group_by_partition,
    partition_for_key,
)

if TYPE_CHECKING:
    from .blocking_consumer import Consumer as Consumer, Message as Message

_MAX_BATCH_BYTES: Final = 4 * 1024 * 1024
_log = logging.getLogger("pnsq.client")

Key = str | bytes


@final
class BlockingClient:
    """Publish and read ranges against one nsqd (its TCP and/or HTTP address).

    Args:
        tcp_address: nsqd's TCP ``host:port``, for publishing.
        http_address: nsqd's HTTP ``host:port``, for partitions, keyed publishing and range
            reads.
        lookupd_http_address: pnsq lookupd's HTTP ``host:port``: partitions are looked up
            across the cluster, each published to at its leader (a node's own
            ``/partitions`` lists only the partitions it leads), and looked up again after a
            failure (a failover, a move).
        max_attempts: tries per publish (the first included) on retryable errors, waiting
            ``retry_backoff`` seconds before the second, doubling (at most 2 s).
        idempotent: number the publishes (see the module doc), as ``producer_name`` (default:
            a fresh unique name; a writer re-run after a failure names itself the same).
        numbering: the numbers to use (shared by the clients of one writer, one per leader,
            so a partition whose leader moves keeps its numbers); overrides the two above.
    """

    def __init__(
        self,
        tcp_address: str | None = None,
        http_address: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = 3,
        retry_backoff: float = 0.05,
        idempotent: bool = True,
        producer_name: str | None = None,
        numbering: Numbering | None = None,
        http_auth_secret: str = "",
        lookupd_http_address: str | None = None,
    ) -> None:
        self.tcp_address = tcp_address
        self.http_address = http_address
        self.lookupd_http_address = lookupd_http_address
        #: the AUTH secret sent on nsqd's HTTP API (``Authorization: Bearer``), which an nsqd
        #: with ``--auth-http-address`` asks of range reads
        self.http_auth_secret = http_auth_secret
        self.timeout = timeout
        self.max_attempts = max(1, max_attempts)
        self.retry_backoff = retry_backoff
        self._conns: dict[str, BlockingConnection] = {}
        self._http: dict[str, HTTPNode] = {}
        self._routes: dict[str, TopicPartitions] = {}
        self._rr = RoundRobin()
        #: the numbers of an idempotent producer (None: its publishes are not numbered); a
        #: writer publishing through several clients (one per leader) shares one
        self.numbering = numbering or (Numbering(producer_name) if idempotent else None)
        #: messages acknowledged, tries after a failure, messages a retry found stored already
        self.stats = {"published": 0, "retries": 0, "duplicates": 0}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        for node in self._http.values():
            node.close()
        self._http.clear()

    # ------------------------------------------------------------------ HTTP

    def _node(self, address: str | None = None) -> HTTPNode:
        address = address or self.http_address
        if address is None:
            raise PartitionsUnknownError("this needs nsqd's HTTP address")
        node = self._http.get(address)
        if node is None:
            node = self._http[address] = HTTPNode(address, self.timeout, self.http_auth_secret)
        return node

    def partitions(self, topic: str) -> TopicPartitions:
        """``topic``'s partitions with their ``earliest``/``latest`` offsets, looked up now.

        Raises:
            NsqHTTPError: 404 ``TOPIC_NOT_FOUND``, ...
        """
        if self.lookupd_http_address is not None:
            found = fetch_partitions_via_lookupd(self.lookupd_http_address, topic, self.timeout)
            if found is None:
                raise NsqHTTPError(404, "TOPIC_NOT_FOUND")  # lookupd does not know it
            route = found
        else:
            route = self._node().partitions(topic, self.tcp_address)
        self._routes[topic] = route
        return route

    def read_range(
        self, topic: str, partition: int, offset: int, max_records: int = 1000
    ) -> RangeBatch:
        """Records of ``partition`` from ``offset`` (at most ``max_records``, and at most what
        nsqd's byte cap allows): the same records every time for the same range. Continue at
        ``batch.next_offset``; an empty batch means ``offset`` is the partition's ``latest``.

        Raises:
            NsqHTTPError: 400 ``OFFSET_OUT_OF_RANGE`` when ``offset`` is below ``earliest``
                (deleted by retention) or past ``latest``; 404 for an unknown topic/partition.
        """
        route = self._routes.get(topic)
        info = route.get(partition) if route is not None else None
        node = self._node(info.http_address if info is not None else None)
        return node.read_range(topic, partition, offset, max_records)

    # ------------------------------------------------------------------ publishing

    def publish(
        self, topic: str, body: bytes, *, key: Key | None = None, partition: int | None = None
    ) -> None:
        """``PUB`` one message (to ``key``'s partition, or ``partition``, or round-robin)."""
        _expect_ok(self._send(topic, key, partition, lambda p, s: Pub(topic, body, p, s)), "PUB")

    def mpublish(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        key: Key | None = None,
        keys: Sequence[Key] | None = None,
        partition: int | None = None,
        max_batch_bytes: int = _MAX_BATCH_BYTES,
    ) -> None:
        """``MPUB`` in batches; ``keys`` (one per body) splits by partition keeping per-key
        order, ``key`` sends all to one partition."""
        if not bodies:
            raise ValueError("mpublish needs at least one body")
        batches: list[tuple[int | None, list[bytes]]] = []
        if keys is not None:
            route = self._route(topic, required=True)
            assert route is not None
            for part, group in group_by_partition(bodies, keys, route.partition_num).items():
                batches += [(part, chunk) for chunk in chunk_bodies(group, max_batch_bytes)]
        else:
            batches = [(partition, chunk) for chunk in chunk_bodies(bodies, max_batch_bytes)]
        for number, chunk in batches:
            reply = self._send(topic, key, number, partial(_mpub, topic, chunk), len(chunk))
            _expect_ok(reply, "MPUB")

    def dpublish(self, topic: str, body: bytes, defer_ms: int) -> None:
        """``DPUB``: one message, delivered no sooner than ``defer_ms`` from now (nsqd picks
        among the partitions the node leads; an idempotent producer names one to number it)."""

        def make(partition: int | None, sequence: int | None) -> Command:
            if sequence is None:
                return Dpub(topic, defer_ms, body)
            return Dpub(topic, defer_ms, body, partition, sequence)

        _expect_ok(self._send(topic, None, None, make), "DPUB")

    def publish_traced(
        self,
        topic: str,
        body: bytes,
        trace_id: int,
        *,
        key: Key | None = None,
        partition: int | None = None,
    ) -> tuple[bytes, int]:
        """``PUB_TRACE``: returns ``(16-byte message id, log offset)``."""
        reply = self._send(
            topic, key, partition, lambda p, s: PubTrace(topic, trace_id, body, p, s)
        )
        if len(reply) != TRACED_RESPONSE.size or not reply.startswith(b"OK"):
            raise UnexpectedResponseError(f"PUB_TRACE: unexpected reply {reply[:64]!r}")
        _, internal_id, reply_trace_id, offset, _raw = TRACED_RESPONSE.unpack(reply)
        return MESSAGE_ID.pack(internal_id, reply_trace_id), offset

    def mpublish_traced(
        self,
        topic: str,
        messages: Sequence[tuple[int, bytes]],
        *,
        key: Key | None = None,
        keys: Sequence[Key] | None = None,
        partition: int | None = None,
        max_batch_bytes: int = _MAX_BATCH_BYTES,
    ) -> list[tuple[int, int, int]]:
        """``MPUB_TRACE`` in batches: each message is ``(trace id, body)``, routed as
        :meth:`mpublish` routes (``keys`` one per message, or ``key``, or ``partition``).

        Returns, per batch sent, ``(partition, offset of its first message, message count)``
        (each batch is atomic and contiguous in its partition).
        """
        if not messages:
            raise ValueError("mpublish_traced needs at least one message")
        groups: list[tuple[int | None, list[tuple[int, bytes]]]] = [(partition, list(messages))]
        if keys is not None:
            if len(keys) != len(messages):
                raise ValueError(f"{len(keys)} keys for {len(messages)} messages")
            route = self._route(topic, required=True)
            assert route is not None
            by_part: dict[int, list[tuple[int, bytes]]] = {}
            for message, k in zip(messages, keys, strict=True):
                by_part.setdefault(partition_for_key(k, route.partition_num), []).append(message)
            groups = [(part, group) for part, group in sorted(by_part.items())]
        out: list[tuple[int, int, int]] = []
        for number, group in groups:
            for chunk in chunk_traced(group, max_batch_bytes):
                make = partial(_mpub_trace, topic, chunk)
                reply = self._send(topic, key, number, make, len(chunk))
                if len(reply) != TRACED_RESPONSE.size or not reply.startswith(b"OK"):
                    raise UnexpectedResponseError(f"MPUB_TRACE: unexpected reply {reply[:64]!r}")
                _, internal_id, _trace, offset, _raw = TRACED_RESPONSE.unpack(reply)
                out.append((partition_of(internal_id), offset, len(chunk)))
        return out

    def _route(self, topic: str, *, required: bool = False) -> TopicPartitions | None:
        route = self._routes.get(topic)
        if route is not None or self._route_unknown:
            if route is None and required:
                raise PartitionsUnknownError("keyed publishing needs nsqd's HTTP address")
            return route
        try:
            return self.partitions(topic)
        except NsqHTTPError as exc:
            if exc.status not in (400, 404) or required:
                raise
            return None

    @property
    def _route_unknown(self) -> bool:
        return self.http_address is None and self.lookupd_http_address is None

    def _connection(self, address: str) -> BlockingConnection:
        conn = self._conns.get(address)
        if conn is None or conn.closed:
            name = self.numbering.name if self.numbering is not None else None
            conn = self._conns[address] = BlockingConnection(address, self.timeout, name)
        return conn

    def _send(
        self,
        topic: str,
        key: Key | None,
        partition: int | None,
        make: Callable[[int | None, int | None], Command],
        count: int = 1,
    ) -> bytes:
        """Send ``make(partition, number)`` to the partition's leader, with retries; an
        idempotent producer numbers it at its first try and keeps partition and numbers for
        every retry (one publish at a time: a refusal out of turn only means earlier numbers
        were given up, or forgotten by the leader: renumbered, sent again at once)."""
        if key is not None and partition is None and self._route_unknown:
            raise PartitionsUnknownError("keyed publishing needs nsqd's HTTP address")
        numbering = self.numbering
        ticket: Ticket | None = None
        kept = partition
        error: Exception | None = None
        delays = attempt_delays(self.max_attempts, self.retry_backoff)
        delay: float | None = next(delays)
        acknowledged = False
        hole: tuple[Ticket, Make] | None = None  # a given-up publish to send again first
        sends = 0  # of this publish's numbers
        try:
            while delay is not None:
                if error is not None:
                    self.stats["retries"] += 1
                    self._routes.pop(topic, None)
                    time.sleep(delay)
                acked = 0
                try:
                    route = self._route(topic, required=key is not None and kept is None)
                    number = choose_partition(route, topic, self._rr, key=key, partition=kept)
                    info = route.get(number) if route is not None and number is not None else None
                    address = info.tcp_address if info is not None else self.tcp_address
                    if address is None:
                        raise ValueError("publishing needs nsqd's TCP address")
                    conn = self._connection(address)
                    numbers = numbering is not None and "pnsq_producer" in conn.features
                    if numbering is not None and numbers and ticket is None and number is not None:
                        ticket, kept = numbering.take(topic, number, count), number
                    sequence = None
                    if numbering is not None and ticket is not None:
                        if hole is not None:  # the leader asked for its numbers: sent first
                            acked = numbering.acknowledged(ticket)  # (its refusal: as of now)
                            given_up, resend = hole
                            again = conn.command(
                                resend(given_up.partition, numbering.number(given_up))
                            )
                            if is_acknowledgement(again):
                                numbering.filled(given_up)
                            hole = None
                        sequence = numbering.number(ticket)
                        acked = numbering.acknowledged(ticket)
                        sends += 1
                    reply = conn.command(make(number, sequence))
                except RETRIED as exc:
                    expected = refusal(exc)
                    if numbering is not None and ticket is not None and expected is not None:
                        hole = numbering.given_up(ticket, expected)
                        if hole is not None or numbering.rebase(ticket, expected, acked):
                            error = None  # sent again at once
                            continue
                    if not retryable(exc):
                        raise
                    error = exc
                    delay = next(delays, None)
                    continue
                self.stats["published"] += count
                stored = already_stored(reply, count)
                self.stats["duplicates"] += stored
                first_try = stored and sends == 1 and sequence is not None
                if first_try and numbering is not None and ticket is not None:
                    assert sequence is not None
                    if numbering.stored_before_sent(ticket):  # said once per partition
                        _log.warning(stored_before_text(numbering.name, ticket, sequence))
                acknowledged = True
                return reply
        finally:
            if numbering is not None and ticket is not None:
                numbering.done(
                    ticket, acknowledged=acknowledged, resend=None if acknowledged else make
                )
        assert error is not None
        raise error


#: The user-facing name: the blocking twin of :class:`pnsq.client.producer.Producer`.
Producer = BlockingClient


def __getattr__(name: str) -> object:
    """``Consumer`` and its ``Message``, imported (with Trio) on first use."""
    if name in ("Consumer", "Message"):
        from . import blocking_consumer

        value = getattr(blocking_consumer, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _mpub(topic: str, bodies: list[bytes], partition: int | None, sequence: int | None) -> Mpub:
    return Mpub(topic, bodies, partition, sequence)


def _mpub_trace(
    topic: str, messages: list[tuple[int, bytes]], partition: int | None, sequence: int | None
) -> MpubTrace:
    return MpubTrace(topic, messages, partition, sequence)


def _expect_ok(reply: bytes, what: str) -> None:
    if not is_acknowledgement(reply):
        raise UnexpectedResponseError(f"{what}: expected OK, got {reply[:64]!r}")
