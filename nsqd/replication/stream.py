"""The leader's stream to one follower of one partition: what it sends, and when.

The stream sends what the follower lacks, as it comes (``Append`` batches, pipelined: it does not
wait for an ``Ack`` before the next), the high-watermark when it changed, and the channels'
state in the partition (``Cursors``) every :data:`CURSOR_INTERVAL` seconds when it changed (an
ordered channel's, or one an HTTP consume ack pushed, at once). Idle, it sends the
high-watermark as a heartbeat when nothing went to the follower for :data:`HEARTBEAT` seconds:
to the follower's node on any of its streams when the follower counts silence per leader node
(``FEATURE_NODE_BEAT``, :mod:`.follower`), else on this stream. A stream of a topic with no
channel sleeps until the next heartbeat unless woken (records, a role change, a channel created,
an administrative change). The broker's one timer wakes idle streams
(:class:`~nsqd.broker.waiters.ReplicationWaiters`): no stream keeps a timeout of its own. A
follower that takes ``Admin`` frames gets the topic's administrative state at the start and on
every change; one that answers ``RepairRequest`` is asked for its copy of the leader's damaged
records. A follower outside the in-sync set is fed at a bounded rate (:class:`CatchUpBudget`).

**Records appended while the stream waits** go from the appending task itself
(:meth:`FollowerStream.push_appended`, offered by the broker's waiters): when the stream is idle
at the end of the log, the follower in sync, and the socket takes the whole ``Append`` frame at
once, the stream's task is not woken at all; the follower gets the batch a scheduler turn
sooner and the leader saves a task switch per batch (docs/benchmarks.md). Whatever part of the
frame the socket did not take, the task sends first when it wakes; over TLS there is no such
push (the task sends everything).
"""

from __future__ import annotations

import logging

import trio

from pnsq._netio.plain_stream import PlainSocketStream
from protocol.replication import Admin, Cursors, HighWatermark, RepairRequest
from protocol.replication_encoder import encode, encode_append_header

from ..broker import Broker, StorageError, Topic
from ..broker.admin_state import admin_frame
from ..broker.copying import Batch, held_regions, read_for_follower
from ..broker.partition import Partition
from ..broker.waiters import BEAT_DUE, BEAT_TICKS, STREAM_TICK

__all__ = [
    "BATCH_BYTES",
    "CATCHUP_RATE",
    "CURSOR_INTERVAL",
    "HEARTBEAT",
    "CatchUpBudget",
    "FollowerStream",
]

log = logging.getLogger("nsqd.replication")

CURSOR_INTERVAL = STREAM_TICK  # seconds between looks at the channels' state
#: seconds without a frame to a follower node, on any of its streams, before a heartbeat
HEARTBEAT = STREAM_TICK * BEAT_TICKS
#: bytes per second a follower outside the in-sync set is fed by default (a new, moved or
#: returning replica catching up must not starve the partition's publishers and in-sync
#: followers); nsqd's ``--replica-move-rate``
CATCHUP_RATE = 32 << 20
BATCH_BYTES = 1 << 20  # about this much per Append
MIN_CATCHUP_BATCH = 4096  # bytes: the smallest Append to a follower catching up

#: a channel's state as last sent: (confirmed offset, (offset, 0 or deferred until) pairs)
_SentState = tuple[int, tuple[tuple[int, int], ...]]


class FollowerStream:
    """The stream of ``partition`` to follower ``node`` from log offset ``at``, while this
    node leads the partition under its current epoch and the topic is not deleted (its logs
    are closed then). ``number`` is the stream's number in the partition's
    :class:`~nsqd.core.cursor_frames.CursorFrames`. With ``admin`` the follower takes Admin
    frames (the topic's administrative state follows the channels' whenever it changed; an
    administrative change sends both at once, the cursors first, so the follower's AdminAck
    covers them); with ``repair`` it answers RepairRequest; with ``node_beat`` it counts
    silence per leader node (the heartbeat goes only when nothing went to its node)."""

    def __init__(
        self,
        broker: Broker,
        stream: trio.abc.Stream,
        topic: Topic,
        partition: Partition,
        at: int,
        node: str,
        number: int,
        *,
        admin: bool = False,
        repair: bool = False,
        node_beat: bool = False,
        ephemeral: bool = False,
        catchup_rate: float = CATCHUP_RATE,
    ) -> None:
        self._broker = broker
        self._stream = stream
        #: the same stream when records may be pushed to it from the appending task
        self._plain = stream if isinstance(stream, PlainSocketStream) else None
        self._topic = topic
        self._partition = partition
        self._epoch = partition.state.epoch
        self.at = at  #: the offset of the next record to send
        self._node = node
        self._number = number
        self._admin = admin
        self._repair = repair
        self._node_beat = node_beat
        self._ephemeral = ephemeral  # the follower takes #ephemeral channels' state as marks
        self._catchup_rate = catchup_rate
        self._first_batch = True  # read again from the log, not as written (see run)
        self._rest: memoryview | None = None  # an Append frame a push did not send whole
        self._sent_hw = -1  # the high-watermark the follower was last sent
        self._sent_at = broker.clock.monotonic()  # this stream's last frame
        self._cursors: dict[str, _SentState] = {}  # each channel's state as last sent
        self._next_cursors = 0.0  # when the next look at every channel is due
        self._sent_admin: Admin | None = None  # the administrative state last sent
        self._budget = CatchUpBudget(catchup_rate, broker.clock.monotonic())
        self._asked: set[int] = set()  # damaged regions asked for (their first offsets)

    def _current(self) -> bool:
        state = self._partition.state
        return state.leads and state.epoch == self._epoch and not self._topic.deleted

    async def run(self) -> None:
        """Send until this node no longer leads the partition under the stream's epoch."""
        partition, topic = self._partition, self._topic
        while self._current():
            if self._rest is not None:  # the part of a pushed Append the socket did not take
                rest, self._rest = self._rest, None
                await self._stream.send_all(rest)
            await self._ask_for_repairs()
            if await self._send_records():
                continue
            await self._send_state()
            # nothing but the heartbeat to send until woken (records, a role change, a channel
            # created, an admin change) while the topic has no channel and none was sent: a
            # node holding thousands of such partitions wakes each once a heartbeat, not every
            # tick
            quiet = (
                not topic.channels
                and not self._cursors
                and not (self._repair and held_regions(partition))
            )
            push = self.push_appended if self._plain is not None else None
            beats_for = self._node if self._node_beat else None
            await self._broker.replication.wait_data(
                partition, self.at, look=not quiet, push=push, beats_for=beats_for
            )
        log.info(
            "REPLICATION(%s/%d): %s: stream ends",
            topic.name,
            partition.number,
            "topic deleted" if topic.deleted else f"no longer leading under epoch {self._epoch}",
        )

    async def _ask_for_repairs(self) -> None:
        """Ask the follower for its copy of each damaged region of the log it may hold (one
        sent to it), once."""
        if not self._repair:
            return
        for first, count in held_regions(self._partition):
            if first not in self._asked and first + count <= self.at:
                self._asked.add(first)
                await self._stream.send_all(encode(RepairRequest(self._epoch, first, count)))

    async def _send_records(self) -> bool:
        """Send the next batch the follower lacks, if any (whether it did)."""
        partition = self._partition
        catching_up = self._node not in partition.state.placement.isr
        # catching up: batches of a tenth of a second's budget, so the rate holds for a log
        # shorter than one full batch too
        rate = self._catchup_rate
        size = max(MIN_CATCHUP_BATCH, int(rate / 10)) if catching_up else BATCH_BYTES
        # the first batch is read again from the log: bytes that rotted on disk, which the
        # follower refused before it reconnected, are not sent again as they are
        as_written = not (self._first_batch or catching_up)
        batch = read_for_follower(partition, self.at, min(size, BATCH_BYTES), as_written=as_written)
        if not batch.count:
            return False
        self._first_batch = False
        await self._stream.send_all(self._append_frame(batch))
        self._sent(batch)
        if catching_up:  # at a bounded rate
            await trio.sleep(self._budget.spend(len(batch.data), self._sent_at))
        return True

    async def _send_state(self) -> None:
        """With no records to send: the high-watermark (when it changed, or as the heartbeat),
        the channels' changed state, the topic's administrative state."""
        stream, epoch, topic, node = self._stream, self._epoch, self._topic, self._node
        high_watermark = self._partition.state.high_watermark
        sent_to = self._broker.replication.sent_to
        now = self._broker.clock.monotonic()
        # the heartbeat: when nothing went to the follower's node, on any stream, for a
        # heartbeat interval (a node following thousands of partitions from here gets one,
        # not one per partition), or on this stream, to a follower that counts silence per
        # stream; woken by the ticks, each wake-up a little late, the next one on time
        if self._node_beat:
            beat = self._broker.replication.beat_due(node, self._sent_at, now)
        else:
            beat = now - self._sent_at >= BEAT_DUE
        if high_watermark != self._sent_hw or beat:
            self._sent_hw, self._sent_at = high_watermark, now
            sent_to[node] = now
            await stream.send_all(encode(HighWatermark(epoch, high_watermark)))
        admin, sent_admin = self._admin, self._sent_admin
        changed = admin and (sent_admin is None or sent_admin.version != topic.admin_version)
        # ordered (and pushed) channels at once, the others every interval
        every = now >= self._next_cursors or changed
        if every:
            self._next_cursors = now + CURSOR_INTERVAL / 2
        to = (node, self._number)
        changes = _cursor_changes(
            topic, self._partition, epoch, to, self._cursors, every, self._ephemeral
        )
        for frame in changes:
            await stream.send_all(encode(frame))
        if admin and every:
            state_now = admin_frame(topic, epoch)
            if state_now != sent_admin:
                self._sent_admin = state_now
                await stream.send_all(encode(state_now))

    def push_appended(self) -> bool:
        """Send the records just appended from the calling (appending) task, while the stream's
        task waits: True when the socket took them all (the task need not wake), else False
        (the task sends, or finishes the frame, when woken). Only to a follower in sync, past
        the stream's first batch, with no damaged region to ask it for."""
        plain, partition = self._plain, self._partition
        if (
            plain is None
            or self._rest is not None
            or self._first_batch
            or not self._current()
            or self._node not in partition.state.placement.isr
            or (self._repair and held_regions(partition))
        ):
            return False
        try:
            batch = read_for_follower(partition, self.at, BATCH_BYTES, as_written=True)
        except StorageError:
            return False  # the task reads them again, and meets the error where it is handled
        if not batch.count:
            return False  # woken for something else than records (a channel's state)
        frame = self._append_frame(batch)
        try:
            taken = plain.send_nowait(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            return False  # the task meets the stream's end at its next send
        if not taken:
            return False
        self._sent(batch)
        if taken < len(frame):
            self._rest = memoryview(frame)[taken:]
            return False
        return True

    def _append_frame(self, batch: Batch) -> bytes:
        state = self._partition.state
        header = encode_append_header(
            self._epoch, batch.base_offset, state.high_watermark, batch.count, len(batch.data)
        )
        return header + batch.data

    def _sent(self, batch: Batch) -> None:
        """``batch`` went (or is going, whole) to the follower."""
        state = self._partition.state
        self.at += batch.count
        if self.at >= self._partition.log.end_offset:
            state.sent_to_end(self._node, self.at)
        self._sent_hw = state.high_watermark
        self._sent_at = self._broker.replication.sent_to[self._node] = (
            self._broker.clock.monotonic()
        )


class CatchUpBudget:
    """A token bucket of ``rate`` bytes per second (one second of burst)."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.at = now

    def spend(self, size: int, now: float) -> float:
        """Take ``size`` bytes; returns the seconds to wait before sending more."""
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate) - size
        self.at = now
        return max(0.0, -self.tokens / self.rate)


_NONE: frozenset[str] = frozenset()


def _cursor_changes(
    topic: Topic,
    partition: Partition,
    epoch: int,
    to: tuple[str, int],
    sent: dict[str, _SentState],
    every: bool,
    ephemeral: bool = False,
) -> list[Cursors]:
    """Cursors frames for the channels whose state in ``partition`` changed since ``sent``
    (updated), and for the channels deleted since; unless ``every``, only the ordered channels
    and those pushed to this follower (:attr:`Partition.cursor_push`); ``#ephemeral`` channels
    only with ``ephemeral`` (the follower's ``FEATURE_EPHEMERAL``). Each state frame is counted
    as built for the follower and stream ``to``, the moment it is built."""
    frames = []
    pushed = partition.cursor_push.pop(to[0], _NONE)
    for name, channel in topic.channels.items():
        cursor = channel.cursors.get(partition.number)
        urgent = cursor is not None and (cursor.ordered or name in pushed)
        if (channel.ephemeral and not ephemeral) or cursor is None or not (every or urgent):
            continue
        now = cursor.replica_state()
        if sent.get(name) != now:
            sent[name] = now
            frames.append(Cursors(epoch, name, now[0], now[1]))
            partition.state.cursor_frames.sent(to[0], name, to[1])
    for name in [n for n in sent if n not in topic.channels] if every else []:
        del sent[name]
        frames.append(Cursors(epoch, name, 0, (), deleted=True))
    return frames
