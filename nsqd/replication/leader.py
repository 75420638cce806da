"""The leader's end of an ``"  R1"`` connection: one follower of one partition.

The follower says who it is, which epoch it follows and where its log ends (``Hello``). A
leader of that partition under an epoch at least the follower's answers with where the
follower's log must be cut back to (its end for the follower's last epoch) and the
high-watermark (``Welcome``), then streams ``Append`` batches from there, pipelined: it does
not wait for an ``Ack`` before sending the next batch. Each ``Ack`` records the follower's
progress in the partition state (moving the high-watermark when the follower is in sync).
Idle, the leader sends the high-watermark every :data:`HEARTBEAT` seconds. The stream ends
when this node stops leading the partition, or its epoch moves on: a deposed leader has
nothing to send.
"""

from __future__ import annotations

import logging

import trio

from protocol.replication import (
    Ack,
    Error,
    FollowerFrameDecoder,
    Hello,
    HighWatermark,
    Refuse,
    ReplicationErrorCode,
    ReplicationProtocolError,
    Welcome,
    encode,
    encode_append_header,
)

from ..broker import Broker, Topic
from ..broker.partition import Partition
from ..broker.replication import end_for_epoch, read_for_follower
from ..core.errors import BrokerError
from .frames import FrameReader, PeerClosed

log = logging.getLogger("nsqd.replication")

HEARTBEAT = 1.0  # seconds between high-watermark frames on an idle stream
BATCH_BYTES = 1 << 20  # about this much per Append
HELLO_TIMEOUT = 10.0


class FollowerGone(Exception):
    """The follower refused the stream or went away."""


async def serve_follower(
    broker: Broker, stream: trio.SocketStream, remote: str, initial: bytes
) -> None:
    """Run one follower's stream until it or this node's leadership ends."""
    reader = FrameReader(stream, FollowerFrameDecoder(), initial)
    try:
        await _serve(broker, stream, reader)
    except* (ReplicationProtocolError, BrokerError) as broken:
        for exc in broken.exceptions:
            log.warning("REPLICATION[%s]: %s", remote, exc)
        await _try_send(stream, encode(Error(ReplicationErrorCode.BAD_FRAME, str(broken))))
    except* (FollowerGone, PeerClosed, trio.BrokenResourceError, trio.TooSlowError) as gone:
        for reason in gone.exceptions:
            log.info("REPLICATION[%s]: follower gone: %s", remote, reason)


async def _serve(
    broker: Broker, stream: trio.SocketStream, reader: FrameReader[Hello | Ack | Refuse]
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
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_acks, broker, reader, topic, partition, hello.node)
        await _stream(broker, stream, partition, start, f"{hello.topic}/{hello.partition}")
        nursery.cancel_scope.cancel()


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
    broker: Broker, stream: trio.SocketStream, partition: Partition, at: int, label: str
) -> None:
    """Send what the follower lacks, as it comes, while this node leads under one epoch."""
    state = partition.state
    epoch = state.epoch
    sent_hw = -1
    while state.leads and state.epoch == epoch:
        batch = read_for_follower(partition, at, BATCH_BYTES)
        if batch.count:
            header = encode_append_header(
                epoch, batch.base_offset, state.high_watermark, batch.count, len(batch.data)
            )
            await stream.send_all(header + batch.data)
            at += batch.count
            sent_hw = state.high_watermark
            continue
        if state.high_watermark != sent_hw:
            sent_hw = state.high_watermark
            await stream.send_all(encode(HighWatermark(epoch, sent_hw)))
        with trio.move_on_after(HEARTBEAT) as idle:
            await broker.replication.wait_data(partition, at)
        if idle.cancelled_caught:
            sent_hw = -1  # heartbeat: the high-watermark again
    log.info("REPLICATION(%s): no longer leading under epoch %d: stream ends", label, epoch)


async def _read_acks(
    broker: Broker,
    reader: FrameReader[Hello | Ack | Refuse],
    topic: Topic,
    partition: Partition,
    node: str,
) -> None:
    while True:
        frame = await reader.next()
        if isinstance(frame, Refuse):
            raise FollowerGone(f"{node} refused epoch {partition.state.epoch}: {frame.reason}")
        if not isinstance(frame, Ack):
            raise ReplicationProtocolError(f"unexpected {type(frame).__name__} from {node}")
        if frame.epoch == partition.state.epoch:
            broker.follower_acked(topic, partition, node, frame.log_end)


async def _try_send(stream: trio.SocketStream, data: bytes) -> None:
    """A last word to a peer that may be gone already (then there is no one to tell)."""
    try:
        await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.debug("REPLICATION: could not send the error: %s", exc)
