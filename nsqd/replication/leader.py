"""The leader's end of an ``"  R1"`` connection: one follower of one partition.

The follower says who it is, which epoch it follows and where its log ends (``Hello``). A
leader of that partition under an epoch at least the follower's answers with where the
follower's log must be cut back to (its end for the follower's last epoch) and the
high-watermark (``Welcome``), then streams ``Append`` batches from there, pipelined: it does
not wait for an ``Ack`` before sending the next batch. Each ``Ack`` records the follower's
progress in the partition state (moving the high-watermark when the follower is in sync).
Idle, the leader sends the high-watermark when it changed, and as a heartbeat when nothing went
to the follower for :data:`HEARTBEAT` seconds: to the follower's node on any of its streams
when the follower counts silence per leader node (``FEATURE_NODE_BEAT``, :mod:`.follower`),
else on this stream. It looks at the channels' state every :data:`CURSOR_INTERVAL` seconds, and
a stream of a topic with no channel sleeps until the next heartbeat unless woken (records, a
role change, a channel created, an administrative change). The broker's one timer wakes idle
streams (:class:`~nsqd.broker.waiters.ReplicationWaiters`): no stream keeps a timeout of its
own. A follower whose Hello carries ``FEATURE_ADMIN`` also gets the topic's administrative
state (``Admin``) at the start and on every change, and its ``AdminAck`` is recorded in
``Partition.admin_acks`` (an administrative change waits for it:
:mod:`nsqd.broker.admin_state`). The stream ends when this node stops leading the partition,
or its epoch moves on: a deposed leader has nothing to send.

With a cluster secret (:class:`~pnsq._netio.cluster_link.ClusterLinks`) the follower proves it
holds the secret, and which node it is, before anything else; the leader then takes its
``Hello`` only for a partition lookupd placed that node on (:mod:`.auth`).
"""

from __future__ import annotations

import logging

import trio

from pnsq._netio.cluster_link import ClusterLinks, LinkFailed
from protocol.replication import (
    FEATURE_ADMIN,
    FEATURE_NODE_BEAT,
    FEATURE_REPAIR,
    MAGIC,
    Ack,
    Admin,
    AdminAck,
    Cursors,
    CursorsAck,
    Error,
    FollowerFrame,
    Hello,
    HighWatermark,
    Refuse,
    RepairRecords,
    RepairRequest,
    ReplicationErrorCode,
    ReplicationProtocolError,
    Welcome,
)
from protocol.replication_decoder import FollowerFrameDecoder
from protocol.replication_encoder import encode, encode_append_header

from ..broker import Broker, StorageError, Topic
from ..broker.admin_state import admin_frame
from ..broker.copying import (
    Batch,
    end_for_epoch,
    follower_acked,
    held_regions,
    read_for_follower,
    repair_from_replica,
)
from ..broker.partition import Partition
from ..broker.waiters import BEAT_TICKS, STREAM_TICK
from ..core.errors import BrokerError
from .auth import replica_refusal
from .frames import FrameReader, PeerClosed

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
HELLO_TIMEOUT = 10.0


class FollowerGone(Exception):
    """The follower refused the stream or went away."""


async def serve_follower(
    broker: Broker,
    stream: trio.abc.Stream,
    remote: str,
    initial: bytes,
    *,
    links: ClusterLinks,
    catchup_rate: float = CATCHUP_RATE,
) -> None:
    """Run one follower's stream until it or this node's leadership ends; with a cluster
    secret, only after the follower proved it holds it (see the module doc). A follower
    outside the in-sync set is fed at most ``catchup_rate`` bytes per second."""
    try:
        proved, initial = await links.accept(stream, remote, MAGIC, initial)
    except LinkFailed:
        return  # refused and logged (at most once a minute per peer): nothing more to say
    reader = FrameReader(stream, FollowerFrameDecoder(), initial)
    try:
        await _serve(broker, stream, reader, proved, catchup_rate)
    except* (ReplicationProtocolError, BrokerError) as broken:
        for exc in broken.exceptions:
            log.warning("REPLICATION[%s]: %s", remote, exc)
        await _try_send(stream, encode(Error(ReplicationErrorCode.BAD_FRAME, str(broken))))
    except* (FollowerGone, PeerClosed, trio.BrokenResourceError, trio.TooSlowError) as gone:
        for reason in gone.exceptions:
            log.info("REPLICATION[%s]: follower gone: %s", remote, reason)


async def _serve(
    broker: Broker,
    stream: trio.abc.Stream,
    reader: FrameReader[FollowerFrame],
    proved: str | None,
    catchup_rate: float,
) -> None:
    with trio.fail_after(HELLO_TIMEOUT):
        hello = await reader.next()
    if not isinstance(hello, Hello):
        raise ReplicationProtocolError(f"expected HELLO, got {type(hello).__name__}")
    topic, partition = _led_partition(broker, hello)
    if topic is None or partition is None:
        await stream.send_all(encode(Error(ReplicationErrorCode.NOT_LEADER, "not the leader")))
        return
    state = partition.state
    refusal = None if proved is None else replica_refusal(hello, proved, state.placement)
    if refusal is not None:
        log.warning("REPLICATION(%s/%d): refused: %s", hello.topic, hello.partition, refusal)
        await stream.send_all(encode(Error(ReplicationErrorCode.NOT_REPLICA, refusal)))
        return
    if hello.epoch > state.epoch:  # the follower already follows a newer leader
        text = f"this node leads epoch {state.epoch}, the follower follows {hello.epoch}"
        await stream.send_all(encode(Error(ReplicationErrorCode.STALE_EPOCH, text)))
        return
    start = min(hello.log_end, end_for_epoch(partition, hello.last_epoch))
    start = max(start, partition.log.start_offset)
    await stream.send_all(encode(Welcome(state.epoch, start, state.high_watermark)))
    log.info(
        "REPLICATION(%s/%d): follower %s from offset %d (epoch %d)",
        hello.topic,
        hello.partition,
        hello.node,
        start,
        state.epoch,
    )
    admin = bool(hello.features & FEATURE_ADMIN)
    if admin:
        partition.admin_acks[hello.node] = -1
    number = state.cursor_frames.start(hello.node)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_acks, broker, reader, topic, partition, hello.node, number)
            await _stream(
                broker,
                stream,
                topic,
                partition,
                start,
                (hello.node, number),
                admin=admin,
                repair=bool(hello.features & FEATURE_REPAIR),
                node_beat=bool(hello.features & FEATURE_NODE_BEAT),
                catchup_rate=catchup_rate,
            )
            nursery.cancel_scope.cancel()
    finally:
        if admin:
            partition.admin_acks.pop(hello.node, None)


def _led_partition(broker: Broker, hello: Hello) -> tuple[Topic | None, Partition | None]:
    topic = broker.find_topic(hello.topic)
    if topic is None or topic.deleted:
        return None, None
    try:
        partition = topic.partition(hello.partition)
    except BrokerError:
        return None, None
    return (topic, partition) if partition.state.leads else (None, None)


async def _stream(
    broker: Broker,
    stream: trio.abc.Stream,
    topic: Topic,
    partition: Partition,
    at: int,
    to: tuple[str, int],
    *,
    admin: bool = False,
    repair: bool = False,
    node_beat: bool = False,
    catchup_rate: float = CATCHUP_RATE,
) -> None:
    """Send what the follower lacks, as it comes, and the channels' state in the partition
    (every :data:`CURSOR_INTERVAL` seconds when it changed), while this node leads under
    one epoch and the topic is not deleted (its logs are closed then). With ``admin`` (the
    follower takes Admin frames) the topic's administrative state follows the channels'
    whenever it changed; an administrative change sends both at once, the cursors first, so
    the follower's AdminAck covers them. With ``repair`` (the follower answers RepairRequest)
    it is asked for its copy of the leader's damaged records. With ``node_beat`` (the follower
    counts silence per leader node) the heartbeat goes only when nothing went to its node.
    ``to`` is the follower's node and the stream's number (:class:`~nsqd.core.cursor_frames.
    CursorFrames`)."""
    node = to[0]
    state = partition.state
    epoch = state.epoch
    clock = broker.clock
    sent_to = broker.replication.sent_to  # the last frame to each follower node, any stream
    sent_hw, sent_at = -1, clock.monotonic()  # this stream's last frame
    cursors: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}
    next_cursors = 0.0
    sent_admin: Admin | None = None
    budget = CatchUpBudget(catchup_rate, clock.monotonic())
    asked: set[int] = set()  # damaged regions this follower was asked for (first offsets)
    first_batch = True
    while state.leads and state.epoch == epoch and not topic.deleted:
        for first, count in held_regions(partition) if repair else ():
            if first not in asked and first + count <= at:  # sent to it: it may hold them
                asked.add(first)
                await stream.send_all(encode(RepairRequest(epoch, first, count)))
        catching_up = node not in state.placement.isr
        # catching up: batches of a tenth of a second's budget, so the rate holds for a log
        # shorter than one full batch too
        size = max(MIN_CATCHUP_BATCH, int(catchup_rate / 10)) if catching_up else BATCH_BYTES
        batch = read_for_follower(
            partition, at, min(size, BATCH_BYTES), as_written=not (first_batch or catching_up)
        )
        if batch.count:
            first_batch = False
            header = encode_append_header(
                epoch, batch.base_offset, state.high_watermark, batch.count, len(batch.data)
            )
            await stream.send_all(header + batch.data)
            at += batch.count
            if at >= partition.log.end_offset:
                state.sent_to_end(node, at)
            sent_hw = state.high_watermark
            sent_at = sent_to[node] = clock.monotonic()
            if catching_up:  # at a bounded rate
                await trio.sleep(budget.spend(len(batch.data), sent_at))
            continue
        now = clock.monotonic()
        # the heartbeat: when nothing went to the follower's node, on any stream, for a
        # heartbeat interval (a node following thousands of partitions from here gets one,
        # not one per partition), or on this stream, to a follower that counts silence per
        # stream; woken by the ticks, each wake-up a little late, the next one on time
        last = sent_to.get(node, sent_at) if node_beat else sent_at
        if state.high_watermark != sent_hw or now - last >= HEARTBEAT - CURSOR_INTERVAL:
            sent_hw, sent_at = state.high_watermark, now
            sent_to[node] = now
            await stream.send_all(encode(HighWatermark(epoch, sent_hw)))
        changed = admin and (sent_admin is None or sent_admin.version != topic.admin_version)
        every = now >= next_cursors or changed  # ordered channels: at once, others every interval
        if every:
            next_cursors = now + CURSOR_INTERVAL / 2
        for frame in _cursor_changes(topic, partition, epoch, to, cursors, every):
            await stream.send_all(encode(frame))
        if admin and every:
            state_now = admin_frame(topic, epoch)
            if state_now != sent_admin:
                sent_admin = state_now
                await stream.send_all(encode(state_now))
        # nothing but the heartbeat to send until woken (records, a role change, a channel
        # created, an admin change) while the topic has no channel and none was sent: a
        # node holding thousands of such partitions wakes each once a heartbeat, not every tick
        quiet = not topic.channels and not cursors and not (repair and held_regions(partition))
        await broker.replication.wait_data(partition, at, look=not quiet)
    log.info(
        "REPLICATION(%s/%d): %s: stream ends",
        topic.name,
        partition.number,
        "topic deleted" if topic.deleted else f"no longer leading under epoch {epoch}",
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


def _cursor_changes(
    topic: Topic,
    partition: Partition,
    epoch: int,
    to: tuple[str, int],
    sent: dict[str, tuple[int, tuple[tuple[int, int], ...]]],
    every: bool,
) -> list[Cursors]:
    """Cursors frames for the channels whose state in ``partition`` changed since ``sent``
    (updated), and for the channels deleted since; unless ``every``, only the ordered channels
    and those pushed (:attr:`Partition.cursor_push`). Each state frame is counted as built
    for the follower and stream ``to``, the moment it is built."""
    frames = []
    pushed, partition.cursor_push = partition.cursor_push, set()
    for name, channel in topic.channels.items():
        cursor = channel.cursors.get(partition.number)
        urgent = cursor is not None and (cursor.ordered or name in pushed)
        if channel.ephemeral or cursor is None or not (every or urgent):
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


async def _read_acks(
    broker: Broker,
    reader: FrameReader[FollowerFrame],
    topic: Topic,
    partition: Partition,
    node: str,
    number: int,
) -> None:
    """Take the follower's answers on stream ``number`` to ``node`` (see :func:`_stream`)."""
    while True:
        frame = await reader.next()
        if isinstance(frame, Refuse):
            raise FollowerGone(f"{node} refused epoch {partition.state.epoch}: {frame.reason}")
        if isinstance(frame, AdminAck):
            if frame.epoch == partition.state.epoch and node in partition.admin_acks:
                partition.admin_acks[node] = max(partition.admin_acks[node], frame.version)
                broker.replication.wake(partition, streams=False)  # admin changes look
            continue
        if isinstance(frame, RepairRecords):
            if frame.epoch == partition.state.epoch:
                await _repair(partition, node, frame)
                for consumed in topic.channels.values():  # its consumers may read at once
                    consumed.notify()
            continue
        if isinstance(frame, CursorsAck):
            if frame.epoch == partition.state.epoch:
                partition.state.cursor_acked(node, frame.channel, frame.confirmed)
                partition.state.cursor_frames.acked(node, frame.channel, number)
                broker.replication.wake(partition, streams=False)  # HTTP consume acks look
                channel = topic.channels.get(frame.channel)
                if channel is not None and channel.ordered:
                    channel.notify()  # its next message may go now
            continue
        if not isinstance(frame, Ack):
            raise ReplicationProtocolError(f"unexpected {type(frame).__name__} from {node}")
        if frame.epoch == partition.state.epoch:
            follower_acked(broker, topic, partition, node, frame.log_end)


async def _repair(partition: Partition, node: str, frame: RepairRecords) -> None:
    """Write ``node``'s copy of damaged records over this log's (or give up on them), in a
    worker thread (the write is fsynced), then let delivery read the partition at once."""
    batch = Batch(frame.base_offset, frame.count, frame.records)
    try:
        repaired = await trio.to_thread.run_sync(repair_from_replica, partition, batch)
    except StorageError as exc:
        log.error("REPLICATION(%d): repair from %s failed: %s", partition.number, node, exc)
        return
    finally:
        partition.read_guard.repaired()
    if not repaired:
        log.warning(
            "REPLICATION(%d): %s has no intact copy of offsets %d-%d either",
            partition.number,
            node,
            frame.base_offset,
            frame.base_offset + max(frame.count, 1) - 1,
        )


async def _try_send(stream: trio.abc.Stream, data: bytes) -> None:
    """A last word to a peer that may be gone already (then there is no one to tell)."""
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.debug("REPLICATION: could not send the error: %s", exc)
