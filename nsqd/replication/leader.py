"""The leader's end of an ``"  R1"`` connection: one follower of one partition.

The follower says who it is, which epoch it follows and where its log ends (``Hello``). A
leader of that partition under an epoch at least the follower's answers with where the
follower's log must be cut back to (its end for the follower's last epoch) and the
high-watermark (``Welcome``), then streams from there (:mod:`.stream`: ``Append`` batches,
pipelined, the high-watermark, the channels' state). Each ``Ack`` records the follower's
progress in the partition state (moving the high-watermark when the follower is in sync); each
``CursorsAck`` the channel state it applied. A follower whose Hello carries ``FEATURE_ADMIN``
also gets the topic's administrative state (``Admin``), and its ``AdminAck`` is recorded in
``Partition.admin_acks`` (an administrative change waits for it:
:mod:`nsqd.broker.admin_state`). The stream ends when this node stops leading the partition,
or its epoch moves on: a deposed leader has nothing to send. A follower whose copy is of another
life of the topic (the topic id its Hello names with ``FEATURE_TOPIC_ID`` is not this topic's)
gets ``E_OTHER_LIFE``: its records are a deleted topic's, never to be counted as this one's.

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
    FEATURE_EPHEMERAL,
    FEATURE_NODE_BEAT,
    FEATURE_REPAIR,
    MAGIC,
    Ack,
    AdminAck,
    CursorsAck,
    Error,
    FollowerFrame,
    Hello,
    Refuse,
    RepairRecords,
    ReplicationErrorCode,
    ReplicationProtocolError,
    Welcome,
)
from protocol.replication_decoder import FollowerFrameDecoder
from protocol.replication_encoder import encode

from ..broker import Broker, StorageError, Topic
from ..broker.copying import (
    Batch,
    end_for_epoch,
    follower_acked,
    repair_from_replica,
)
from ..broker.partition import Partition
from ..core.errors import BrokerError
from .auth import replica_refusal
from .frames import FrameReader, PeerClosed
from .stream import CATCHUP_RATE, FollowerStream

log = logging.getLogger("nsqd.replication")

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
    if hello.topic_id and topic.topic_id and hello.topic_id != topic.topic_id:
        text = f"the copy is of topic id {hello.topic_id}, this leader's is {topic.topic_id}"
        log.warning(
            "REPLICATION(%s/%d): refused %s: %s", hello.topic, hello.partition, hello.node, text
        )
        await stream.send_all(encode(Error(ReplicationErrorCode.OTHER_LIFE, text)))
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
            await FollowerStream(
                broker,
                stream,
                topic,
                partition,
                start,
                hello.node,
                number,
                admin=admin,
                repair=bool(hello.features & FEATURE_REPAIR),
                node_beat=bool(hello.features & FEATURE_NODE_BEAT),
                ephemeral=bool(hello.features & FEATURE_EPHEMERAL),
                catchup_rate=catchup_rate,
            ).run()
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
