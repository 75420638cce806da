"""A connection's PUB family: group commit for PUB, MPUB and DPUB (youzan's traced and ext
publishes build on it in :mod:`nsqd.tcp.youzan_publishing`).

Consecutive PUBs are gathered and appended as one batch per (topic, partition) run, then
acknowledged together (DESIGN.md §6); so are consecutive stock MPUBs (a run of their own: a
refusal names its command), and a producer's numbered PUBs (a run of consecutive numbers) or
numbered MPUB. The session flushes them before any other command, so replies
stay in command order.

In a pnsq cluster a stock PUB/MPUB/DPUB (no partition) for a topic this node leads no
partition of goes to a leader through :class:`~nsqd.cluster.forwarding.Forwarder` and is
acknowledged once that leader acknowledged; so does one for a topic this node does not have but
lookupd knows. A topic lookupd does not know is created here (lookupd adopts it, led here); with no
lookupd reachable it is refused rather than created behind the cluster's back. Both steps
(forward or append, then wait for the in-sync replicas) are
:class:`~nsqd.cluster.publishing.PublishPath`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from protocol import ClientError, ErrorCode, Mpub, Pub, frames

from ..broker import BodyBatch, Broker, NewRecord, Record, join_batches, new_records
from ..cluster.forwarding import Forwarder
from ..cluster.publishing import PublishPath
from .errors import HANDLED_ERRORS, client_error_for
from .output import OutputBuffer
from .reactor_contract import Taken

#: the error code of a gathered publish's refusal, by its command
_FAILED = {"PUB": ErrorCode.PUB_FAILED, "MPUB": ErrorCode.MPUB_FAILED}


class _Gathered:
    """Publishes gathered for one append to one target: consecutive single PUBs (an OK each)
    or consecutive MPUBs (an OK each, for all its messages), never both: a refusal names its
    command."""

    __slots__ = ("batch", "key", "replies")

    def __init__(self, key: tuple[str, int | None, str], batch: BodyBatch) -> None:
        self.key = key  # topic, partition (None: the broker picks), PUB or MPUB
        self.batch = batch
        self.replies = 1


def acknowledged(already: int) -> bytes:
    """The reply to a numbered publish (pnsq) of which ``already`` messages were stored by an
    earlier try (left out this time): ``OK`` when none, else ``DUPLICATE <already>``. A
    traced one gets its traced reply (the stored message's when all were stored)."""
    return frames.encode_response(b"DUPLICATE %d" % already) if already else frames.OK


class Publisher:
    """Publishes for one connection and queues the acks on its output."""

    def __init__(
        self, broker: Broker, output: OutputBuffer, forwarder: Forwarder | None = None
    ) -> None:
        self.broker = broker
        self.output = output
        self.forwarder = forwarder
        self.path = PublishPath(broker, forwarder)
        #: PUBs and MPUBs not appended yet, in runs of one kind to one (topic, partition): their
        #: bodies and publish times (one batch: no object per message)
        self._gathered: list[_Gathered] = []
        self.pub_counts: dict[str, int] = {}  # messages published per topic (/stats producers)
        #: pnsq: the id of the producer this connection named in IDENTIFY (``pnsq_producer``):
        #: its numbered publishes are stored once however often they are retried
        self.producer: int | None = None
        #: numbered publishes not appended yet, appended as one numbered publish: a run of
        #: numbered PUBs (consecutive numbers to one (topic, partition): the group commit of a
        #: producer's pipelined PUBs), or one numbered MPUB: topic, partition, the first
        #: number, the bodies, PUB or MPUB
        self._run: tuple[str, int, int, BodyBatch, str] | None = None

    @property
    def gathering(self) -> bool:
        """Whether publishes are gathered and not yet flushed."""
        return bool(self._gathered) or self._run is not None

    @property
    def numbered_pending(self) -> bool:
        """Whether numbered publishes are gathered (plain ones must wait for them: reply
        order)."""
        return self._run is not None

    def gather_numbered(self, command: Pub | Mpub) -> bool:
        """A numbered PUB, added to the gathered run when it continues it (same topic and
        partition, the next number), or a numbered MPUB; either starts a run when nothing is
        gathered. False, nothing added, when other publishes are gathered (an MPUB is a run
        of its own): the caller flushes them first."""
        run = self._run
        if run is not None:
            topic, partition, first, batch, name = run
            bodies = batch.bodies
            if (
                isinstance(command, Mpub)
                or name != "PUB"
                or first + len(bodies) != command.sequence
                or partition != command.partition
                or topic != command.topic
            ):
                return False
            bodies.append(command.body)
            assert batch.timestamps is not None
            batch.timestamps.append(self.broker.clock.now_ns())
            return True
        if self._gathered:
            return False
        assert command.partition is not None  # the parser takes a number only after one
        assert command.sequence is not None
        now = self.broker.clock.now_ns()
        if isinstance(command, Mpub):
            batch, name = new_records(now, command.bodies), "MPUB"
        else:
            batch, name = BodyBatch(now, [command.body], 0, [now]), "PUB"
        self._run = (command.topic, command.partition, command.sequence, batch, name)
        return True

    async def _flush_run(self) -> None:
        """Append the gathered numbered publishes as one numbered publish. Each PUB of a run is
        answered ``OK``, or ``DUPLICATE 1`` when an earlier try stored it; an MPUB ``OK``, or
        ``DUPLICATE <n>`` when an earlier try stored n of its messages; or the refusal."""
        run, self._run = self._run, None
        if run is None:
            return
        topic, partition, first, batch, name = run
        count = len(batch.bodies)
        try:
            _, already = await self._numbered(topic, batch, partition, first, name)
        except HANDLED_ERRORS as exc:
            raise self.failed(exc, count if name == "PUB" else 1, name) from exc
        if name == "PUB":
            self.output.append(acknowledged(1) * already + frames.OK * (count - already))
        else:
            self.output.append(acknowledged(already))

    def gather(self, command: Pub | Mpub) -> None:
        """A stock PUB or MPUB (not numbered: :meth:`gather_numbered`), added to the gathered
        run when it continues it (same target, same command)."""
        if isinstance(command, Mpub):
            self._gather_mpub(command)
            return
        key = (command.topic, command.partition, "PUB")
        now = self.broker.clock.now_ns()
        gathered = self._gathered
        if gathered and gathered[-1].key == key:
            run = gathered[-1]
            run.batch.bodies.append(command.body)
            assert run.batch.timestamps is not None
            run.batch.timestamps.append(now)
            run.replies += 1
        else:
            gathered.append(_Gathered(key, BodyBatch(now, [command.body], 0, [now])))

    def _gather_mpub(self, command: Mpub) -> None:
        """An MPUB's share of :meth:`gather`: appended in one piece with the run it continues
        (same target, MPUBs), as atomically as alone."""
        key = (command.topic, command.partition, "MPUB")
        batch = new_records(self.broker.clock.now_ns(), command.bodies)
        gathered = self._gathered
        if gathered and gathered[-1].key == key:
            run = gathered[-1]
            run.batch = join_batches([run.batch, batch])
            run.replies += 1
        else:
            gathered.append(_Gathered(key, batch))

    async def flush(self) -> None:
        """Append the gathered publishes, one batch per run, and ack them once every run
        reached its in-sync replicas (the runs' waits overlap: one group commit); or the run
        of numbered PUBs (gathered alone: one kind waits for the other)."""
        await self._flush_run()
        if not self._gathered:
            return
        gathered, self._gathered = self._gathered, []
        stored: list[tuple[str, Sequence[Record]]] = []  # topic, records (none: forwarded)
        failure: Exception | None = None
        for run in gathered:
            topic, partition, name = run.key
            entries = run.batch
            append: Callable[[], Awaitable[Sequence[Record]]]
            if name == "PUB":  # with the other connections' PUBs of this turn (one append)
                append = partial(self.broker.commits.publish, topic, entries, partition)
            else:  # an MPUB is a batch already: appended at once
                append = partial(self._append_now, topic, entries, partition)
            try:
                records = await self.path.store(topic, partition, entries.bodies, append)
            except HANDLED_ERRORS as exc:
                failure = exc
                break
            stored.append((topic, () if records is None else records))
            self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(entries)
        acked = 0  # the runs acknowledged
        for topic, records in stored:  # the stored runs are acked once replicated
            try:
                await self.path.replicated(topic, records, durable=False)
            except HANDLED_ERRORS as exc:
                failure = exc
                break
            acked += 1
        if acked and self.broker.durable_acks:
            await self.broker.wait_durable()  # one fsync for every run
        self.output.append(frames.OK * sum(run.replies for run in gathered[:acked]))
        if failure is not None:
            raise self._refused(failure, gathered[acked:]) from failure

    async def _append_now(
        self, topic: str, entries: BodyBatch, partition: int | None
    ) -> Sequence[Record]:
        return self.broker.publish(topic, entries, partition)

    def _refused(self, failure: Exception, runs: Sequence[_Gathered]) -> ClientError:
        """The error for the gathered ``runs`` that ``failure`` stopped (:meth:`failed`, each
        run's replies naming its command)."""
        for run in runs[:-1]:
            name = run.key[2]
            error = client_error_for(failure, name, _FAILED[name])
            if error.fatal:
                return error
            self.output.append(frames.encode_error(error.text) * run.replies)
        last = runs[-1]
        return self.failed(failure, last.replies, last.key[2])

    def failed(self, failure: Exception, unanswered: int, name: str = "PUB") -> ClientError:
        """The error for ``unanswered`` gathered publishes (``name``: PUB or MPUB) that
        ``failure`` stopped; when it leaves the connection open, every one but the last (whose
        reply is the error raised) gets its error reply queued here."""
        error = client_error_for(failure, name, _FAILED[name])
        if not error.fatal:
            self.output.append(frames.encode_error(error.text) * (unanswered - 1))
        return error

    # ------------------------------------------------------------ the publish reactor's side

    def take_gathered(self) -> Taken | None:
        """The gathered publishes, taken, when they are one run to one (topic, partition) that
        this node appends and acknowledges without an fsync (:meth:`appends_here`); else None,
        leaving them for :meth:`flush` (more than one run, a forwarded topic, fsync to wait
        for). Numbered PUBs come with the producer and their first number."""
        run = self._run
        if run is not None:
            topic, partition, first, batch, name = run
            if self.producer is None or not self.appends_here(topic, partition):
                return None
            self._run = None
            replies = len(batch) if name == "PUB" else 1
            return Taken(topic, partition, batch, (self.producer, first), replies, name)
        gathered = self._gathered
        if len(gathered) != 1:
            return None
        only = gathered[0]
        topic, partition_, name = only.key
        if not self.appends_here(topic, partition_):
            return None
        self._gathered = []
        return Taken(topic, partition_, only.batch, None, only.replies, name)

    def put_back(self, taken: Taken) -> None:
        """Numbered publishes :meth:`take_gathered` gave that were not appended: gathered
        again, for :meth:`flush` to judge."""
        assert taken.partition is not None
        assert taken.numbering is not None
        assert not self.gathering
        self._run = (taken.topic, taken.partition, taken.numbering[1], taken.batch, taken.name)

    def keeps_waiting(self) -> bool:
        """After :meth:`take_gathered` left the PUBs: whether this connection's PUBs will go
        on waiting (for one topic held here, whose acks wait), rather than only this once
        (PUBs for several targets in one read, a topic this publish creates, or numbered
        PUBs with no producer named)."""
        if self._run is not None:
            return self.producer is not None and self.broker.find_topic(self._run[0]) is not None
        if len(self._gathered) != 1:
            return False
        return self.broker.find_topic(self._gathered[0].key[0]) is not None

    def appends_here(self, topic: str, partition: int | None) -> bool:
        """Whether a PUB of ``topic`` is appended here and acknowledged once its in-sync
        followers hold it (:meth:`~nsqd.broker.publish_acks.PublishAcks.when_replicated`, no
        fsync to wait for): not forwarded to a leader elsewhere (nor to be asked of lookupd,
        :meth:`~nsqd.cluster.forwarding.Forwarder.known_here`)."""
        forwarder = self.forwarder
        if (
            forwarder is not None
            and forwarder.known_here(self.broker, topic, partition) is not False
        ):
            return False
        return self.broker.publish_acks.without_fsync(topic)

    def acked(self, taken: Taken) -> None:
        """The publishes ``taken`` are appended (and held by the in-sync followers): queue
        their OKs."""
        topic = taken.topic
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(taken.batch)
        self.output.append(frames.OK * taken.replies)

    def refused(self, failure: Exception, taken: Taken) -> ClientError:
        """The error for the publishes ``taken`` that ``failure`` stopped (:meth:`failed`)."""
        return self.failed(failure, taken.replies, taken.name)

    async def acked_once_replicated(self, records: Sequence[Record], taken: Taken) -> None:
        """The publishes ``taken``, appended as (part of) ``records``, were handed back before
        the in-sync followers held them: queue their OKs once they do; raises the error for
        them if that cannot be (leadership moved)."""
        try:
            await self.path.replicated(taken.topic, records, durable=False)
        except HANDLED_ERRORS as exc:
            raise self.refused(exc, taken) from exc
        self.acked(taken)

    async def publish(
        self,
        topic: str,
        bodies: list[bytes],
        partition: int | None,
        name: str,
        code: ErrorCode,
        defer_ms: int = 0,
        sequence: int | None = None,
    ) -> None:
        now = self.broker.clock.now_ns()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        batch = new_records(now, bodies, deliver_at)
        try:
            if sequence is None:
                await self.path.publish_stock(
                    topic,
                    batch,
                    partition,
                    defer_ms=defer_ms,
                    on_appended=partial(self._count, topic),
                )
            else:
                _, already = await self._numbered(topic, batch, partition, sequence, name)
                self.output.append(acknowledged(already))
                return
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, name, code) from exc
        self.output.append(frames.OK)

    async def _numbered(
        self,
        topic: str,
        entries: Sequence[NewRecord],
        partition: int | None,
        sequence: int,
        name: str,
    ) -> tuple[Sequence[Record], int]:
        """A numbered publish (idempotent publishing): stored once, however often retried;
        with how many were stored already (all: the stored record holding the last)."""
        if self.producer is None:
            raise ClientError(
                ErrorCode.INVALID, f"{name} a numbered publish needs pnsq_producer in IDENTIFY"
            )
        assert partition is not None  # the parser takes a number only after a partition
        return await self.path.publish_numbered(
            topic,
            entries,
            partition,
            self.producer,
            sequence,
            on_appended=partial(self._count, topic),
        )

    async def publish_partitioned(
        self,
        topic: str,
        entries: Sequence[NewRecord],
        partition: int | None,
        sequence: int | None,
        name: str,
    ) -> tuple[Sequence[Record], int]:
        """A partition-aware publish (youzan's traced and ext,
        :mod:`nsqd.tcp.youzan_publishing`): numbered or not; with how many were stored by an
        earlier try."""
        if sequence is not None:
            return await self._numbered(topic, entries, partition, sequence, name)
        records = await self.path.publish(
            topic, entries, partition, on_appended=partial(self._count, topic)
        )
        return records, 0

    def _count(self, topic: str, records: Sequence[Record]) -> None:
        """``records`` of ``topic`` were appended here (/stats' ``pub_counts``)."""
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + len(records)
