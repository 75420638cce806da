"""What a Spark write task does with its rows: publish them with MPUB (or MPUB_TRACE) batches
through :class:`pnsq.client.blocking.BlockingClient`. Plain Python, no pyspark.

The driver looks the topic up (:func:`plan_route`), creating it if no node has it, as a publish
would (through lookupd when the job names lookupd, with the ``partitions`` / ``replicator``
options; else on nsqd), and retrying unreachable nodes for ``retryTimeoutMs``; every task looks
it up again the same way and publishes each partition's messages to the partition's leader.
A row's partition is its ``partition`` column if given, else ``murmur3(key) % partition_num``
(youzan go-nsq's ``PublishOrdered``; :func:`pnsq.client.routing.partition_for_key`), else
round-robin. Rows of one partition keep their order.

Exactly once (``exactlyOnce``, the default): a task publishes as a producer named after the
write and its partition (:func:`producer_name`), numbering its rows per topic partition
(:mod:`pnsq.client.numbering`). A task run again — a retry after a failure, a speculative copy,
a lost executor, a streaming micro-batch re-run after a driver restart — sends the same rows in
the same order under the same name, so the leaders store what the first run stored only once
(``DUPLICATE``) and the rest once. That needs the same rows in the same order (a deterministic
input: a replayable source, no ``rand()``), and the re-run within nsqd's
``--producer-state-ttl`` (24 h). With ``exactlyOnce=false`` a re-run task publishes its rows
again (at-least-once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any, Final, Self

from pnsq.client.blocking import BlockingClient
from pnsq.client.numbering import Numbering
from pnsq.client.routing import partition_for_key

from .nodes import TopicLayout, create_topic, discover
from .options import WriteOptions
from .reading import unsigned64
from .retry import NoLeaderError, TopicNotFoundError, retrying

Key = str | bytes
#: The columns a write uses (``body`` required); any others are ignored.
WRITE_COLUMNS: Final = ("body", "key", "partition", "trace_id")


@dataclass(frozen=True, slots=True)
class Route:
    """The topic's partitions when the write was planned: ``leaders[p] = (tcp, http)``."""

    topic: str
    partition_num: int
    leaders: dict[int, tuple[str, str]]


def plan_route(opts: WriteOptions) -> Route:
    """Look the topic up, creating it if it does not exist; wait until every partition has a
    leader. Retries passing failures (:mod:`pnsq.spark.retry`) for ``retryTimeoutMs``.

    Raises:
        PlanningError: creating the topic was refused.
        UnavailableError: a node kept failing, or the partitions got no leader in time.
    """
    what = f"looking up topic {opts.topic!r} to write"
    layout = retrying(what, partial(_layout, opts), opts.endpoints.retry_timeout)
    leaders = {p: (lead.tcp_address, lead.http_address) for p, lead in layout.leaders.items()}
    return Route(opts.topic, layout.partition_num, leaders)


def _layout(opts: WriteOptions) -> TopicLayout:
    try:
        layout = discover(opts.endpoints, opts.topic)
    except TopicNotFoundError:
        where = create_topic(opts.endpoints, opts.topic, opts.partitions, opts.replicator)
        try:
            layout = discover(opts.endpoints, opts.topic)
        except TopicNotFoundError:
            msg = f"topic {opts.topic!r} created through {where}; not placed yet"
            raise NoLeaderError(msg) from None
    missing = sorted(set(range(layout.partition_num)) - set(layout.leaders))
    if missing:
        raise NoLeaderError(f"partitions {missing} of {opts.topic!r} have no leader now")
    return layout


@dataclass(slots=True)
class PublishReport:
    """What one task published: messages per partition, MPUB batches sent, and for MPUB_TRACE
    batches ``(partition, first offset, count)``."""

    messages: int = 0
    batches: int = 0
    duplicates: int = 0  # rows a re-run found stored by an earlier run (exactly once)
    per_partition: dict[int, int] = field(default_factory=dict)
    traced: list[tuple[int, int, int]] = field(default_factory=list)

    def merge(self, other: PublishReport) -> None:
        """Add ``other``'s counts to this one."""
        self.messages += other.messages
        self.batches += other.batches
        self.duplicates += other.duplicates
        for p, n in other.per_partition.items():
            self.per_partition[p] = self.per_partition.get(p, 0) + n
        self.traced += other.traced


def producer_name(write: str, partition: int) -> str:
    """The producer name of task ``partition`` of ``write`` (a batch write's id, or a stream's
    query id and micro-batch): the same for every run of that task."""
    return f"spark:{write}:{partition}"


class Publisher:
    """Buffers rows by partition and publishes a batch once ``batch_size`` rows or
    ``batch_bytes`` are waiting (and on :meth:`flush` / leaving the ``with`` block).

    ``traced``: send MPUB_TRACE (each message with its trace id) instead of MPUB.
    ``start``: where round-robin begins (the task's number, so tasks spread differently).
    ``producer``: the task's producer name (exactly once); None: unnumbered publishes.
    """

    def __init__(
        self,
        route: Route,
        opts: WriteOptions,
        *,
        traced: bool,
        start: int = 0,
        producer: str | None = None,
    ) -> None:
        self.route = route
        self.opts = opts
        self.traced = traced
        self.report = PublishReport()
        #: one numbering for every leader's client: a partition keeps its numbers
        self.numbering = Numbering(producer) if producer is not None else None
        self._rr = start
        self._pending: dict[int, list[tuple[int, bytes]]] = {}
        self._waiting = 0
        self._bytes = 0
        self._clients: dict[str, BlockingClient] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is None:
                self.flush()
        finally:
            self.close()

    def add(
        self,
        body: bytes | bytearray | str | None,
        *,
        key: Key | bytearray | None = None,
        partition: int | None = None,
        trace_id: int | None = None,
    ) -> None:
        """Queue one message (publishing a batch if the buffer is full)."""
        if body is None:
            raise ValueError(f"{self.route.topic}: a row has a null body")
        data = body.encode() if isinstance(body, str) else bytes(body)
        number = self._partition(key, partition)
        self._pending.setdefault(number, []).append((unsigned64(trace_id or 0), data))
        self._waiting += 1
        self._bytes += len(data) + 12
        if self._waiting >= self.opts.batch_size or self._bytes >= self.opts.batch_bytes:
            self.flush()

    def add_columns(self, columns: Mapping[str, Sequence[Any]]) -> None:
        """Queue the rows of a column batch (``body`` and any of ``key``, ``partition``,
        ``trace_id``), in order."""
        bodies = columns["body"]
        keys, parts, traces = (columns.get(name) for name in WRITE_COLUMNS[1:])
        for i, body in enumerate(bodies):
            self.add(
                body,
                key=keys[i] if keys is not None else None,
                partition=parts[i] if parts is not None else None,
                trace_id=traces[i] if traces is not None else None,
            )

    def _partition(self, key: Key | bytearray | None, partition: int | None) -> int:
        n = self.route.partition_num
        if partition is not None:
            if not 0 <= partition < n:
                raise ValueError(f"{self.route.topic}: partition {partition} not in 0..{n - 1}")
            return partition
        if key is not None:
            return partition_for_key(bytes(key) if isinstance(key, bytearray) else key, n)
        self._rr += 1
        return (self._rr - 1) % n

    def flush(self) -> None:
        """Publish everything waiting, one partition after another."""
        pending, self._pending = self._pending, {}
        self._waiting = self._bytes = 0
        for number, messages in sorted(pending.items()):
            nsq = self._client(number)
            topic, limit = self.route.topic, self.opts.batch_bytes
            if self.traced:
                sent = nsq.mpublish_traced(topic, messages, partition=number, max_batch_bytes=limit)
                self.report.traced += sent
                self.report.batches += len(sent)
            else:
                bodies = [body for _, body in messages]
                nsq.mpublish(topic, bodies, partition=number, max_batch_bytes=limit)
                self.report.batches += 1
            self.report.messages += len(messages)
            counts = self.report.per_partition
            counts[number] = counts.get(number, 0) + len(messages)

    def _client(self, number: int) -> BlockingClient:
        leader = self.route.leaders.get(number)
        if leader is None:
            raise ValueError(f"{self.route.topic}: partition {number} has no known leader")
        tcp, http = leader
        nsq = self._clients.get(http)
        if nsq is None:
            timeout = self.opts.endpoints.timeout
            numbering, idempotent = self.numbering, self.numbering is not None
            nsq = self._clients[http] = BlockingClient(
                tcp, http, timeout=timeout, idempotent=idempotent, numbering=numbering
            )
        return nsq

    def close(self) -> None:
        """Close every connection (what is still waiting is dropped)."""
        for nsq in self._clients.values():
            self.report.duplicates += nsq.stats["duplicates"]
            nsq.close()
        self._clients.clear()
