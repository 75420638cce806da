"""A channel at runtime: one cursor per partition, its subscribed sessions, its timer.

The pure bookkeeping is :class:`nsqd.core.cursor.PartitionCursor`; this class adds what needs
Trio: waking parked sessions when messages arrive, and one timer task per channel that sleeps
until the earliest in-flight or deferred deadline (DESIGN.md §6).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import trio
from trio.lowlevel import ParkingLot

from ..core.confirming import confirm_deferred, release_deferred
from ..core.cursor import PartitionCursor
from ..core.errors import NotInFlightError, NotLeaderError, PartitionNotConsumedError
from ..core.inflight import Deliveries
from ..core.latency import LatencyWindow
from ..core.leases import Lease
from ..core.taking import FetchFramed
from ..storage import FrameLayout, FrameRun
from .clock import Clock
from .dispatch import Dispatch
from .partition import Log, Partition
from .read_guard import ReadGuard
from .statistics import ChannelStatistics, channel_statistics
from .views import Subscriber, TimeoutAware, TopicView


class Channel:
    """A named channel of a topic, spanning every partition of that topic on this node."""

    def __init__(self, topic: TopicView, name: str, *, ephemeral: bool) -> None:
        self.topic = topic
        self.name = name
        self.ephemeral = ephemeral
        self.paused = False
        self.deleted = False
        #: FIN latencies (``--e2e-processing-latency-percentile``), made at the first FIN
        self.e2e_latency: LatencyWindow | None = None
        self.cursors: dict[int, PartitionCursor] = {}
        #: per partition, the offset from which messages count as put into this channel
        #: (nsqd's channel ``message_count``: since creation, or since this process started)
        self.counted_from: dict[int, int] = {}
        self.clients: set[Subscriber] = set()
        self._ordered = False
        #: youzan's /channel/skip (every message confirmed unsent) and /channel/skipZanTest
        self.skipped = False
        self.skip_zan_test = False
        #: messages held for a pool of consumers (youzan tags, filters; :mod:`.dispatch`)
        self.dispatch = Dispatch(self)
        self._rr = 0
        self._timer_scope: trio.CancelScope | None = None
        #: the broker's clock (set when the broker starts the channel's timer)
        self.clock = Clock()
        self._timer_deadline_ns: int | None = None
        self._retry_ns = 0  # the earliest retry of a partition whose read failed (0: none)
        #: HTTP consume requests long-polling this channel (woken by :meth:`notify`)
        self.pollers = ParkingLot()

    def add_partition(
        self, partition: Partition, start: int, acked: list[int], counted_from: int | None = None
    ) -> None:
        """Attach the cursor of ``partition`` (on creation and on restore). ``counted_from``:
        where the channel's ``message_count`` starts (default ``start``)."""
        cursor = PartitionCursor(partition.number, start, acked)
        cursor.ordered = self._ordered
        self.cursors[partition.number] = cursor
        self.counted_from[partition.number] = start if counted_from is None else counted_from

    @property
    def ordered(self) -> bool:
        """Ordered consumption (SUB_ORDERED, youzan): in every partition exactly one message
        in flight, redelivered at the head until FINed. Set for the whole channel, for every
        client, as youzan does; saved in ``pnsq.dat``."""
        return self._ordered

    @ordered.setter
    def ordered(self, value: bool) -> None:
        self._ordered = value
        for cursor in self.cursors.values():
            cursor.ordered = value

    def clients_of(self, partition: int | None) -> list[Subscriber]:
        """The subscribers that consume ``partition`` (None: any partition)."""
        return [
            c
            for c in self.clients
            if partition is None or c.partition is None or c.partition == partition
        ]

    # ------------------------------------------------------------------ delivery

    @property
    def delivering(self) -> bool:
        """False while the channel or its topic is paused, and once it is deleted."""
        return not (self.paused or self.topic.paused or self.deleted)

    def has_ready(self, only: int | None = None, client: object = None) -> bool:
        """True if a ready client (of partition ``only``, if given) would get a message now;
        with tags or filters (:mod:`nsqd.core.tags`), one ``client`` could."""
        if not self.delivering:
            return False
        if client is not None and self.dispatch.active and self.dispatch.has_for(client, only):
            return True
        return any(
            cursor.has_ready(partition.state.high_watermark)
            for partition, cursor in self.iter_cursors()
            if (only is None or partition.number == only) and self.releasable(partition, cursor)
        )

    def releasable(self, partition: Partition, cursor: PartitionCursor) -> bool:
        """Led here, and (ordered) the FIN of the previous message is on every in-sync
        follower: after a failover the new leader goes on exactly after it."""
        state = partition.state
        guard = partition.read_guard
        if guard.retry_ns and not guard.ready(self.clock.now_ns()):
            return False  # its reads fail: not before the retry time (:mod:`.read_guard`)
        return state.leads and (
            not cursor.ordered
            or not state.followers
            or state.cursor_replicated(self.name, cursor.confirmed)
        )

    def take(
        self,
        max_messages: int,
        owner: object,
        deadline_ns: int,
        now_ns: int,
        only: int | None = None,
        max_bytes: int | None = None,
        layout: FrameLayout | None = None,
    ) -> Deliveries:
        """Up to ``max_messages`` for ``owner``, each in flight until ``deadline_ns``.

        ``only`` restricts delivery to one partition (a partitioned SUB). ``max_bytes`` stops
        taking once the bodies taken add up to it (one message at least): the session's bound
        on what it queues for a socket. New records of a cursor with nothing to deliver again
        go out as one flight (:meth:`PartitionCursor.take_flight`); with ``layout`` (a plain
        consumer's message frame), those read from disk come with their frames written
        (:meth:`~nsqd.storage.PartitionLog.read_frames`, :attr:`Deliveries.framed`).
        """
        out = Deliveries()
        if max_messages <= 0 or not self.delivering:
            return out
        routed = self.dispatch.active
        if routed:  # messages held for this consumer's pool first
            for message in self.dispatch.take_held(owner, max_messages, only):
                self.cursors[message.partition].start_flight(message, owner, deadline_ns, now_ns)
                out.add_messages([message])
        served = [
            (partition, cursor)
            for partition, cursor in self.iter_cursors()
            if (only is None or partition.number == only) and self.releasable(partition, cursor)
        ]
        cursors = [cursor for _, cursor in served]
        count = len(served)
        for i in range(count):
            partition, cursor = served[(self._rr + i) % count]
            guard = partition.read_guard
            read = guard.fetch(partition.read_for_delivery, now_ns)
            readable = partition.state.high_watermark  # what every in-sync replica has
            room = max_messages - len(out)
            if not routed and cursor.only_new():
                framed = _framed_reader(partition.log, layout, guard, now_ns)
                records = cursor.take_flight(
                    read, room, now_ns, readable, owner, deadline_ns, max_bytes, framed
                )
                if isinstance(records, FrameRun):
                    out.add_framed(records)
                else:
                    out.add_first(records)
            else:
                got = cursor.take(read, room, now_ns, readable, max_bytes)
                if got and routed:
                    got = self.dispatch.route(partition.number, got, owner)
                cursor.start_flights(got, owner, deadline_ns, now_ns)
                out.add_messages(got)
            if guard.retry_ns > now_ns:  # a read failed: wake its consumers at the retry
                self.wake_at(guard.retry_ns)
            if len(out) >= max_messages:
                break
            if max_bytes is not None:
                max_bytes -= cursor.taken_bytes
                if max_bytes <= 0:
                    break
        self._rr += 1
        if out:
            self.arm_timer(deadline_ns)
        for cursor in cursors:
            if cursor.deferred:
                self.arm_timer(cursor.deferred[0].due_ns)
        return out

    def notify(self) -> None:
        """Wake every subscribed session (new messages, unpause, requeue) and every HTTP
        consume request waiting on the channel."""
        for client in self.clients:
            client.wake()
        if self.pollers:  # notify runs on every publish: most channels have no HTTP poller
            self.pollers.unpark_all()

    # ------------------------------------------------------------------ FIN / REQ / TOUCH

    def drop_partition(self, number: int) -> None:
        """Forget the cursor of a partition no longer held here (its messages in flight can no
        longer be FINed on this node; the new leader delivers them again)."""
        self.cursors.pop(number, None)
        self.counted_from.pop(number, None)
        self.dispatch.drop_partition(number)

    def cursor_for(self, partition: int) -> PartitionCursor:
        """The cursor of ``partition``, or NotInFlightError for an id this channel never sent."""
        cursor = self.cursors.get(partition)
        if cursor is None:
            raise NotInFlightError
        return cursor

    def led_cursor(self, number: int) -> tuple[Partition, PartitionCursor]:
        """The partition ``number`` and this channel's cursor in it, if this node leads it.

        Raises:
            PartitionNotConsumedError: no cursor of this channel in ``number`` here.
            NotLeaderError: the partition is held here but led elsewhere.
        """
        cursor = self.cursors.get(number)
        if cursor is None or not self.topic.holds(number):
            raise PartitionNotConsumedError(f"partition {number} is not consumed here")
        partition = self.topic.partition(number)
        if not partition.state.leads:
            raise NotLeaderError(f"partition {number} is not led here")
        return partition, cursor

    def release(self, owners: list[object]) -> None:
        """The holders of messages taken back from them (finished for them, dropped, timed
        out) get their RDY room back: one call per message."""
        for owner in owners:
            if isinstance(owner, TimeoutAware):
                owner.message_timed_out()

    def confirm_deferred(self) -> None:
        """Confirm unsent every deferred message of every partition (youzan's
        ``/channel/emptydelayed``)."""
        for partition, cursor in self.iter_cursors():
            confirm_deferred(cursor)
            partition.dirty = True
        self.notify()

    def release_deferred(self) -> None:
        """Deliver every deferred message now (youzan's ``/channel/requeuedelayed``)."""
        for cursor in self.cursors.values():
            release_deferred(cursor)
        self.notify()

    def set_skipped(self, skipped: bool) -> None:
        """youzan's ``/channel/skip`` (True: every message confirmed unsent from now on) and
        ``/channel/unskip``; both move the channel to the end first, as youzan does. Saved in
        ``pnsq.dat``."""
        self.skipped = skipped
        self.empty()

    def set_skip_zan_test(self, skip: bool) -> None:
        """youzan's ``/channel/skipZanTest`` (True: messages whose header has ``zan_test`` true
        are confirmed unsent) and ``/channel/unskipZanTest``. Saved in ``pnsq.dat``."""
        self.skip_zan_test = skip
        self.notify()

    def empty(self) -> None:
        """nsqd's channel empty: drop depth, in-flight and deferred messages in every partition.
        The owners of dropped in-flight messages get their RDY room back (one call each)."""
        for partition, cursor in self.iter_cursors():
            self.seek(partition, cursor, partition.log.end_offset)

    def seek(self, partition: Partition, cursor: PartitionCursor, offset: int) -> None:
        """Move ``cursor`` to ``offset``, dropping what is in flight, deferred or requeued; the
        owners of dropped in-flight messages get their RDY room back (one call each)."""
        self.dispatch.drop_partition(partition.number)
        self.release(cursor.seek(offset))
        partition.dirty = True
        self.notify()

    # ------------------------------------------------------------------ timer

    def next_deadline(self) -> int | None:
        """Earliest in-flight or deferred deadline over all partitions (ns)."""
        deadlines = [d for c in self.cursors.values() if (d := c.next_deadline()) is not None]
        if self._retry_ns:
            deadlines.append(self._retry_ns)
        return min(deadlines) if deadlines else None

    def wake_at(self, retry_ns: int) -> None:
        """Wake the channel's consumers at ``retry_ns``, when a partition's read is tried again."""
        self._retry_ns = min(self._retry_ns or retry_ns, retry_ns)
        self.arm_timer(self._retry_ns)

    def arm_timer(self, deadline_ns: int | None) -> None:
        """Make sure the timer wakes no later than ``deadline_ns``."""
        if deadline_ns is None or self._timer_scope is None:
            return
        if self._timer_deadline_ns is None or deadline_ns < self._timer_deadline_ns:
            self._timer_deadline_ns = deadline_ns
            self._timer_scope.deadline = self.clock.trio_deadline(deadline_ns)

    async def run_timer(self) -> None:
        """Requeue timed-out messages and release deferred ones when due. Runs until cancelled."""
        while True:
            deadline = self.next_deadline()
            with trio.CancelScope() as scope:
                self._timer_scope = scope
                self._timer_deadline_ns = deadline
                scope.deadline = (
                    math.inf if deadline is None else self.clock.trio_deadline(deadline)
                )
                await trio.sleep_forever()
            self._timer_scope = None
            now_ns = self.clock.now_ns()
            moved = sum(
                self.expire(partition, cursor, now_ns) for partition, cursor in self.iter_cursors()
            )
            retry = 0 < self._retry_ns <= now_ns  # a failed read may be tried again
            if retry:  # and a later retry of another take stays armed
                later = [p.read_guard.retry_ns for p, _ in self.iter_cursors()]
                self._retry_ns = min([r for r in later if r > now_ns], default=0)
            if moved or retry:
                self.notify()

    def expire(self, partition: Partition, cursor: PartitionCursor, now_ns: int) -> int:
        """Requeue ``cursor``'s in-flight messages past their deadline at ``now_ns`` and
        release its due deferred ones; returns how many moved. A TCP delivery goes behind what
        consumers can read now (nsqd's back of the queue); an HTTP batch back to the head (its
        partition's next batch starts at the committed offset)."""
        owners, released = cursor.expire(now_ns, partition.state.high_watermark, _is_lease)
        self.release(owners)
        return len(owners) + released

    # ------------------------------------------------------------------ stats

    def iter_cursors(self) -> Iterator[tuple[Partition, PartitionCursor]]:
        """(partition, cursor) pairs."""
        for number, cursor in self.cursors.items():
            yield self.topic.partition(number), cursor

    def partition_counts(self, partition: Partition, cursor: PartitionCursor) -> tuple[int, int]:
        """``(depth, deferred_count)`` in one partition as nsqd counts them: a DPUB is deferred
        from the moment it is published, read by a consumer or not; messages held for a pool
        of consumers (:mod:`.dispatch`) are in the depth."""
        end = partition.log.end_offset
        unread = cursor.unread_deferred(partition.delayed, end, self.clock.now_ns())
        held = self.dispatch.held_count(partition.number)
        return cursor.depth(end) - unread + held, len(cursor.deferred) + unread

    @property
    def depth(self) -> int:
        """Messages waiting for delivery over all partitions."""
        return sum(self.partition_counts(p, c)[0] for p, c in self.iter_cursors())

    @property
    def in_flight_count(self) -> int:
        """Messages delivered and not yet FINed / requeued / timed out."""
        return sum(len(c.in_flight) for c in self.cursors.values())

    @property
    def deferred_count(self) -> int:
        """Messages waiting for their delay."""
        return sum(self.partition_counts(p, c)[1] for p, c in self.iter_cursors())

    def partition_message_count(self, partition: Partition) -> int:
        """Messages put into this channel from ``partition`` (requeues not counted again)."""
        return max(0, partition.log.end_offset - self.counted_from.get(partition.number, 0))

    @property
    def message_count(self) -> int:
        """nsqd's channel ``message_count`` over all partitions."""
        return sum(self.partition_message_count(p) for p, _ in self.iter_cursors())

    def statistics(
        self, e2e_percentiles: Sequence[float] = (), now_ns: int = 0
    ) -> ChannelStatistics:
        """A frozen snapshot for ``/stats`` and ``/metrics`` (see :meth:`Topic.statistics`)."""
        return channel_statistics(self, e2e_percentiles, now_ns)


def _framed_reader(
    log: Log, layout: FrameLayout | None, guard: ReadGuard, now_ns: int
) -> FetchFramed | None:
    """The log's frame reads for :meth:`PartitionCursor.take_flight` (with ``layout``), their
    storage errors taken by ``guard``."""
    if layout is None:
        return None

    def fetch(
        offset: int, max_records: int, max_bytes: int, now_ns: int
    ) -> tuple[FrameRun, int] | None:
        run = log.read_frames(offset, max_records, max_bytes, now_ns, layout)
        return None if run is None else (run, run.body_bytes)

    return guard.framed(fetch, now_ns)


def _is_lease(owner: object) -> bool:
    return isinstance(owner, Lease)
