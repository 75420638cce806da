"""The SUB family's rules (youzan's ``internalSUB``) and where a channel starts consuming.

* ``SUB t c [p]``: plain; with ``p`` only that partition, else every partition on this node;
* ``SUB_ORDERED t c [p]``: flips the whole channel to ordered (youzan flips it for everyone);
* ``SUB_ADVANCED t c [p [start]]``: ``start`` moves the cursor(s) the client consumes, but only
  when no other client consumes them yet (youzan's first-client rule; pnsq counts the clients
  of each partition, as a youzan channel is per partition).

Refusals, in youzan's order: a partition the topic does not have; plain or advanced SUB on an
ordered topic; ext topic without ``extend_support`` and the reverse; SUB_ORDERED with a
``sample_rate``. Consume starts and ``/channel/setoffset`` share :func:`resolve_start`.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.consume import ConsumeStart, StartKind

from ..core.errors import (
    ChannelNotRegisteredError,
    ConsumeStartUnsupportedError,
    ExtendSupportForbiddenError,
    ExtendSupportNeededError,
    OrderedOnlyError,
    OrderedSampleRateError,
)
from .broker import Broker
from .channel import Channel
from .partition import Partition
from .reading import offset_for_timestamp
from .views import Subscriber


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """What a SUB asks for, with what the client IDENTIFYed."""

    topic: str
    channel: str
    partition: int | None = None  # None (or youzan's -1): every partition on this node
    ordered: bool = False  # SUB_ORDERED (plain SUB and SUB_ADVANCED are not)
    extend_support: bool = False
    sample_rate: int = 0
    start: ConsumeStart | None = None  # SUB_ADVANCED's consume start


@dataclass(frozen=True, slots=True)
class Subscription:
    """The outcome: the channel, the partition consumed, and whether the channel's saved
    metadata changed (it became ordered: the caller waits until that is on disk)."""

    channel: Channel
    partition: int | None
    metadata_changed: bool


def subscribe(broker: Broker, request: SubscribeRequest, client: Subscriber) -> Subscription:
    """Check ``request`` against the topic, then add ``client`` to the channel.

    Raises:
        BrokerError: PartitionNotFoundError, OrderedOnlyError, ExtendSupportNeededError,
            ExtendSupportForbiddenError, OrderedSampleRateError, ConsumeStartUnsupportedError,
            or the plain SUB refusals (ConsumerLimitError, ExitingError).
    """
    partition = None if request.partition == -1 else request.partition
    topic = broker.topics.get(request.topic) or broker.auto_create_topic(request.topic, partition)
    if partition is not None:
        topic.partition(partition).state.require_leader(
            f"partition {partition} of topic {request.topic}"
        )
    if topic.ordered and not request.ordered:
        raise OrderedOnlyError(request.topic)
    if topic.ext and not request.extend_support:
        raise ExtendSupportNeededError(request.topic)
    if not topic.ext and request.extend_support:
        raise ExtendSupportForbiddenError(request.topic)
    if request.ordered and request.sample_rate:
        raise OrderedSampleRateError(request.topic)
    if not topic.channel_auto_create and request.channel not in topic.channels:
        raise ChannelNotRegisteredError(f"{request.topic}:{request.channel}")
    targets = [topic.partition(partition)] if partition is not None else topic.led
    offsets = None
    if request.start is not None:
        offsets = [(p, resolve_start(p, request.start)) for p in targets]
    channel = broker.subscribe(request.topic, request.channel, client)
    changed = False
    if request.ordered and not channel.ordered:
        channel.ordered = True
        changed = not channel.ephemeral
        broker.syncs.request(metadata=True)
    if offsets is not None and not any(c is not client for c in channel.clients_of(partition)):
        for target, offset in offsets:
            channel.seek(target, channel.cursors[target.number], offset)
        broker.syncs.request()
    return Subscription(channel, partition, changed)


def resolve_start(partition: Partition, start: ConsumeStart) -> int:
    """The offset in ``partition`` that ``start`` names, clamped to the log's kept range.

    ``timestamp``: first message published at or after it (unix seconds); ``msgcount:n``:
    ``start_offset + n``; ``virtual_queue``: a log offset; ``special:-1``: the end.
    """
    log = partition.log
    low, high = log.start_offset, log.end_offset
    match start.kind:
        case StartKind.TIMESTAMP:
            offset = offset_for_timestamp(log, start.value * 1_000_000_000)
        case StartKind.MSGCOUNT:
            offset = low + start.value
        case StartKind.VIRTUAL_QUEUE:
            offset = start.value
        case StartKind.SPECIAL:
            if start.value != -1:
                raise ConsumeStartUnsupportedError(str(start))
            offset = high
    return min(max(offset, low), high)


def set_channel_offset(
    broker: Broker, channel: Channel, partition: int | None, start: ConsumeStart
) -> None:
    """``/channel/setoffset``: seek the channel in ``partition`` (None: every partition)."""
    topic = channel.topic
    targets = [topic.partition(partition)] if partition is not None else topic.partitions
    offsets = [(p, resolve_start(p, start)) for p in targets]  # every error before any change
    for target, offset in offsets:
        channel.seek(target, channel.cursors[target.number], offset)
    broker.syncs.request()
