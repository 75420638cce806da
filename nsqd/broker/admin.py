"""nsqd's administrative operations on topics and channels: what ``/topic/*`` and ``/channel/*``
of the HTTP API do. Policy stays in the broker; the HTTP layer only maps names and errors.

* pause: a paused channel delivers nothing; a paused topic stops delivery on all its channels
  (publishes are still appended). The paused flags are saved in ``pnsq.dat`` before the reply,
  as nsqd persists its metadata before answering.
* empty: a topic drops the backlog it keeps for a first channel; a channel drops its depth,
  in-flight and deferred messages (the cursors jump to the end of each partition log).
* delete: the clients of a deleted channel or topic are disconnected, as nsqd closes them; a
  deleted topic's data is removed from disk.
* create: with youzan's topic parameters (partitions, ordered, ext) when given.
* setoffset (youzan): a channel's cursor moves to a time, a message count, an offset or the end.

In a cluster each change also reaches the replicas of the partitions led here: it is counted
(:func:`~.admin_state.admin_changed`), the replication streams carry it, and the call returns
once the in-sync replicas hold it (:func:`~.admin_state.wait_replicated`, bounded). A channel
deleted here a moment ago may be deleted again without error: the same change arrives at a
node from nsqadmin, from the node it was sent to and from a leader's stream.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.consume import ConsumeStart

from ..core.errors import ChannelNotFoundError, TopicConflictError
from . import subscriptions
from .admin_state import admin_changed, wait_replicated
from .broker import Broker
from .channel import Channel
from .topic import Topic


async def create_topic(
    broker: Broker,
    name: str,
    partitions: int | None = None,
    ordered: bool | None = None,
    ext: bool | None = None,
) -> Topic:
    """The topic ``name``, created if needed (``/topic/create``), saved before returning.

    ``partitions`` (youzan ``partition_num``; default ``--default-partitions``), ``ordered``
    (``orderedmulti``) and ``ext`` (``extend``): None when not given. An existing topic is
    returned if every given value matches it, else TopicConflictError (nothing changes).
    """
    topic = broker.topics.get(name)
    if topic is not None:
        wanted = (partitions, ordered, ext)
        have = (topic.partition_num, topic.ordered, topic.ext)
        if any(w is not None and w != h for w, h in zip(wanted, have, strict=True)):
            raise TopicConflictError(
                f"topic {name} exists with partition_num={have[0]} orderedmulti={have[1]} "
                f"extend={have[2]}"
            )
        return topic
    topic = broker.get_or_create_topic(name, partitions, ordered=bool(ordered), ext=bool(ext))
    await _save_metadata(broker)
    return topic


def get_channel(broker: Broker, topic_name: str, channel_name: str) -> Channel:
    """An existing channel; TopicNotFoundError or ChannelNotFoundError."""
    channel = broker.get_topic(topic_name).channels.get(channel_name)
    if channel is None:
        raise ChannelNotFoundError(channel_name)
    return channel


#: seconds a deleted channel's name is remembered (a repeated delete is then not an error)
RECENTLY_DELETED = 30.0


async def create_channel(broker: Broker, topic_name: str, channel_name: str) -> Channel:
    """The channel, created if needed; the topic must exist (``/channel/create``). Saved and
    replicated before returning."""
    topic = broker.get_topic(topic_name)
    channel = broker.get_or_create_channel(topic, channel_name)
    await _save_metadata(broker)
    await replicated(broker, topic)
    return channel


async def replicated(broker: Broker, topic: Topic) -> None:
    """Count an administrative change of ``topic`` and wait (bounded) for the in-sync replicas
    of the partitions led here to hold it."""
    await wait_replicated(broker.replication, topic, admin_changed(broker.replication, topic))


async def delete_topic(broker: Broker, name: str) -> None:
    """Delete a topic with its channels and its data on disk; disconnect its consumers."""
    topic = broker.get_topic(name)
    clients = [client for channel in topic.channels.values() for client in channel.clients]
    await broker.delete_topic(name)
    _disconnect(clients)


async def delete_channel(broker: Broker, topic_name: str, channel_name: str) -> None:
    """Delete a channel and its cursors; disconnect its consumers. A channel deleted here
    within :data:`RECENTLY_DELETED` seconds is already done (no error)."""
    topic = broker.get_topic(topic_name)
    if channel_name not in topic.channels and recently_deleted(broker, topic, channel_name):
        return
    channel = get_channel(broker, topic_name, channel_name)
    clients = list(channel.clients)
    broker.delete_channel(topic, channel_name)
    topic.recently_deleted[channel_name] = broker.clock.monotonic()
    _disconnect(clients)
    await replicated(broker, topic)


def recently_deleted(broker: Broker, topic: Topic, channel_name: str) -> bool:
    """Whether ``channel_name`` was deleted here within :data:`RECENTLY_DELETED` seconds
    (older names are forgotten)."""
    now = broker.clock.monotonic()
    for name, at in list(topic.recently_deleted.items()):
        if now - at > RECENTLY_DELETED:
            del topic.recently_deleted[name]
    return channel_name in topic.recently_deleted


def empty_topic(broker: Broker, name: str) -> None:
    """Drop what the topic keeps for a first channel (nothing once channels exist: each channel
    holds its own depth, emptied by :func:`empty_channel`)."""
    topic = broker.get_topic(name)
    if topic.channels:
        return
    for partition in topic.partitions:
        partition.topic_start = partition.log.end_offset
        partition.dirty = True
    broker.syncs.request()


async def set_channel_offset(
    broker: Broker, topic_name: str, channel_name: str, partition: int | None, start: ConsumeStart
) -> None:
    """Move the channel's cursor in ``partition`` (None: in each partition) to where ``start``
    names (youzan ``/channel/setoffset``); saved before returning."""
    channel = get_channel(broker, topic_name, channel_name)
    subscriptions.set_channel_offset(broker, channel, partition, start)
    await broker.wait_durable()
    await replicated(broker, broker.get_topic(topic_name))


async def empty_channel(broker: Broker, topic_name: str, channel_name: str) -> None:
    """Drop the channel's depth, in-flight and deferred messages; replicated before
    returning."""
    channel = get_channel(broker, topic_name, channel_name)
    channel.empty()
    broker.syncs.request()
    await replicated(broker, broker.get_topic(topic_name))


async def pause_topic(broker: Broker, name: str, paused: bool) -> None:
    """Pause or unpause delivery on every channel of a topic; saved before returning."""
    topic = broker.get_topic(name)
    topic.paused = paused
    if not paused:
        for channel in topic.channels.values():
            channel.notify()
    await _save_metadata(broker)
    await replicated(broker, topic)


async def pause_channel(broker: Broker, topic_name: str, channel_name: str, paused: bool) -> None:
    """Pause or unpause delivery on one channel; saved before returning."""
    channel = get_channel(broker, topic_name, channel_name)
    channel.paused = paused
    if not paused:
        channel.notify()
    await _save_metadata(broker)
    await replicated(broker, broker.get_topic(topic_name))


async def _save_metadata(broker: Broker) -> None:
    broker.syncs.request(metadata=True)
    await broker.wait_durable()


def _disconnect(clients: Iterable[object]) -> None:
    """Close each client's connection (a session has ``close()``)."""
    for client in clients:
        close = getattr(client, "close", None)
        if callable(close):
            close()
