"""HTTP consume on the broker: batches of one partition leased to a token, acked durably.

The leases themselves are pure (:mod:`nsqd.core.leases`); this module takes the messages from
the channel's cursors, waits for them (long poll), and makes an ack durable before it is
answered: the FINs are in the channel's cursor on disk (its partition's checkpoint or cursor
journal, :mod:`.journaling`) and, with followers, every in-sync follower applied a state of the
channel's cursor built after the FINs (:mod:`nsqd.core.cursor_frames`): it holds them whether
or not the confirmed offset passed them. See ``docs/http-api.md``.

A partition gives several batches at once (the acks of concurrent consumers share one sync
pass), except where a batch must be its partition's only one (:func:`exclusive`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from ..core import offset_runs
from ..core.cursor import PartitionCursor
from ..core.errors import (
    BrokerError,
    ExitingError,
    NotInFlightError,
    NotLeaderError,
    NotOwnerError,
)
from ..core.inflight import Message
from ..core.leases import Lease, LeaseEndedError, LeaseState, LeaseTable
from .broker import Broker
from .channel import Channel
from .partition import Partition
from .topic import Topic

log = logging.getLogger("nsqd.broker")


class AckNotDurableError(BrokerError):
    """The FINs of an acked batch could not be written to disk (the disk error says why)."""


class LeaderMovedError(BrokerError):
    """This node does not (or no longer) lead the partition of the batch acked."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"not the leader of a partition of {topic}")
        self.topic = topic


@dataclass(frozen=True, slots=True)
class Batch:
    """What one ``/consume`` request gets: its lease and its messages, in offset order."""

    lease: Lease
    messages: Sequence[Message]


class Puller:
    """The leases of a node's HTTP consumers and the operations on them."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.leases = LeaseTable()
        self._rr = 0
        #: shutdown has begun (:meth:`stop`): parked polls answer empty, new ones are refused
        self.stopping = False

    def stop(self) -> None:
        """Shutdown begins: every parked long poll returns at once with nothing, and
        :meth:`wait` refuses new polls (:class:`~nsqd.core.errors.ExitingError`)."""
        self.stopping = True
        for topic in self.broker.list_topics():
            for channel in topic.channels.values():
                channel.pollers.unpark_all()

    # ------------------------------------------------------------------ taking

    def take(
        self, topic: Topic, channel: Channel, max_messages: int, lease_ns: int
    ) -> Batch | None:
        """Up to ``max_messages`` of ONE partition of ``channel`` that its open leases leave
        room for (:func:`exclusive`), in flight until ``now + lease_ns``; None if no
        partition has a message to give now. Partitions with fewer open leases are tried
        first (round robin among equals), so concurrent consumers spread over partitions."""
        if not channel.delivering:
            return None
        now_ns = self.broker.clock.now_ns()
        leases = self.leases
        leases.sweep(now_ns)
        names = topic.name, channel.name
        served = [
            (partition, cursor)
            for partition, cursor in channel.iter_cursors()
            if channel.releasable(partition, cursor)
            and not leases.locked(*names, partition.number, now_ns, exclusive=exclusive(cursor))
        ]
        self._rr += 1
        count = len(served)
        turn = [served[(self._rr + i) % count] for i in range(count)]
        turn.sort(key=lambda pair: leases.open_count(*names, pair[0].number))
        for partition, cursor in turn:
            batch = self._take_from(
                topic, channel, partition, cursor, max_messages, now_ns, lease_ns
            )
            if batch is not None:
                return batch
        return None

    def _take_from(
        self,
        topic: Topic,
        channel: Channel,
        partition: Partition,
        cursor: PartitionCursor,
        max_messages: int,
        now_ns: int,
        lease_ns: int,
    ) -> Batch | None:
        if channel.expire(partition, cursor, now_ns):  # a lease past its deadline, before its timer
            channel.notify()
        readable = partition.state.high_watermark
        if not cursor.has_ready(readable):
            return None
        guard = partition.read_guard  # storage errors and damage held for a repair: contained
        read = guard.fetch(partition.read_for_delivery, now_ns)
        got = cursor.take(read, max_messages, now_ns, readable, batch=True)
        if guard.retry_ns > now_ns:  # a read failed or waits: look again then
            channel.wake_at(guard.retry_ns)
        if cursor.deferred:
            channel.arm_timer(cursor.deferred[0].due_ns)
        if not got:
            return None
        got.sort(key=lambda m: m.offset)  # requeued ones first from the cursor; order them
        token = secrets.token_urlsafe(18)
        lease = Lease(
            token,
            topic.name,
            channel.name,
            partition.number,
            now_ns + lease_ns,
            exclusive=exclusive(cursor),
        )
        cursor.start_flights(got, lease, lease.deadline_ns, now_ns)
        lease.offsets = tuple(m.offset for m in got)
        self.leases.add(lease)
        channel.arm_timer(lease.deadline_ns)
        return Batch(lease, got)

    async def wait(
        self, topic: Topic, channel: Channel, max_messages: int, lease_ns: int, wait_s: float
    ) -> Batch | None:
        """:meth:`take`, waiting up to ``wait_s`` seconds for messages (a long poll); None at
        once when shutdown begins meanwhile (:meth:`stop`). Raises
        :class:`~nsqd.core.errors.ExitingError` once it has begun."""
        if self.stopping or self.broker.exiting:
            raise ExitingError
        with trio.move_on_after(wait_s):
            while not self.stopping:
                batch = self.take(topic, channel, max_messages, lease_ns)
                if batch is not None or channel.deleted or topic.deleted:
                    return batch
                # woken by new messages, requeues, unpause; leases ending by time end with
                # a requeue, which wakes the channel too
                await channel.pollers.park()
        return None

    # ------------------------------------------------------------------ ack / nack

    def _locate(self, lease: Lease) -> tuple[Topic, Channel, Partition, PartitionCursor]:
        topic = self.broker.find_topic(lease.topic)
        channel = None if topic is None else topic.channels.get(lease.channel)
        if topic is None or channel is None or topic.deleted or channel.deleted:
            raise LeaseEndedError(lease.token)
        cursor = channel.cursors.get(lease.partition)
        if cursor is None:
            raise LeaseEndedError(lease.token)
        partition = topic.partition(lease.partition)
        return topic, channel, partition, cursor

    async def ack(self, token: str) -> Lease:
        """FIN the batch of ``token`` and return once that is durable (see the module doc).
        Raises :class:`~nsqd.core.leases.LeaseEndedError` /
        :class:`~nsqd.core.leases.UnknownTokenError`,
        :class:`LeaderMovedError` when this node does not lead the partition (any more),
        :class:`AckNotDurableError` on a disk error."""
        lease = self.leases.claim(token, self.broker.clock.now_ns())
        _topic, channel, partition, cursor = self._locate(lease)
        if not partition.state.leads:
            raise LeaderMovedError(lease.topic)
        observe = self.broker.acking.observe_e2e if self.broker.config.e2e_percentiles else None
        stamps: list[int] | None = [] if observe is not None else None
        _, refused = cursor.finish_run(_as_run(lease.offsets), lease, stamps)
        if refused:  # NotInFlightError / NotOwnerError: the batch is no longer this lease's
            raise LeaseEndedError(token)
        if observe is not None and stamps is not None:
            for stamp in stamps:
                observe(channel, stamp)
        lease.state = LeaseState.ACKED
        partition.dirty = True
        channel.notify()  # an ordered partition's next messages, and the unlocked partition
        replicated = partition.state.cursor_frames.mark(channel.name)  # a state with the FINs
        await self.broker.wait_durable()
        if not _checkpointed(partition, channel, lease.offsets):
            raise AckNotDurableError(self.broker.health_problem or "checkpoint not written")
        if partition.state.followers and not channel.ephemeral:
            wait = self.broker.replication.wait_cursor
            try:
                if not await wait(partition, channel.name, replicated, lambda: channel.deleted):
                    raise LeaseEndedError(token)  # the channel was deleted meanwhile
            except NotLeaderError:
                raise LeaderMovedError(lease.topic) from None
        return lease

    def nack(self, token: str, delay_ms: int) -> Lease:
        """Requeue the batch of ``token`` (attempts + 1 at its next delivery) after
        ``delay_ms`` (clamped to ``--max-req-timeout``); ordered partitions get it back at
        once, at the head."""
        lease = self.leases.claim(token, self.broker.clock.now_ns())
        _topic, channel, _partition, cursor = self._locate(lease)
        broker = self.broker
        delay_ms = max(0, min(delay_ms, int(broker.config.max_req_timeout * 1000)))
        now_ns = broker.clock.now_ns()
        try:
            # highest first: ordered requeues go to the head one by one, so order is kept
            for offset in sorted(lease.offsets, reverse=True):
                cursor.requeue(offset, lease, delay_ms * 1_000_000, now_ns)
        except (NotInFlightError, NotOwnerError):
            raise LeaseEndedError(token) from None
        lease.state = LeaseState.NACKED
        if delay_ms and not cursor.ordered:
            channel.arm_timer(now_ns + delay_ms * 1_000_000)
        channel.notify()
        return lease


def exclusive(cursor: PartitionCursor) -> bool:
    """Whether a batch of ``cursor`` must be its partition's only open one: on an ordered
    channel (one run at a time, in order). A partition with in-sync followers gives several
    at once too: an ack waits for them to hold its FINs, whatever is still out before it."""
    return cursor.ordered


def _as_run(offsets: tuple[int, ...]) -> Sequence[int]:
    """``offsets`` (ascending) as a ``range`` when they are one (a batch read in one piece),
    which :meth:`~nsqd.core.cursor.PartitionCursor.finish_run` finishes flight by flight."""
    if offsets and offsets[-1] - offsets[0] + 1 == len(offsets):
        return range(offsets[0], offsets[-1] + 1)
    return offsets


def _checkpointed(partition: Partition, channel: Channel, offsets: Sequence[int]) -> bool:
    """Whether the partition's state saved last (checkpoint or cursor journal) has every
    offset of ``offsets`` FINed in ``channel`` (always true where nothing is checkpointed:
    #ephemeral)."""
    if partition.directory is None or channel.ephemeral:
        return True
    saved = partition.saved_state or {}
    channels = saved.get("channels")
    state = channels.get(channel.name) if isinstance(channels, dict) else None
    if not isinstance(state, dict):
        return False
    confirmed = state.get("confirmed")
    if not isinstance(confirmed, int):
        return False
    ahead = [o for o in offsets if o >= confirmed]
    if not ahead:
        return True
    acked = set(state.get("acked") or ())
    runs = state.get("runs") or []
    assert isinstance(runs, list)
    return all(o in acked or offset_runs.contains(runs, o) for o in ahead)
