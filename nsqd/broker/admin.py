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
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.consume import ConsumeStart

from ..core.errors import ChannelNotFoundError, TopicConflictError
from . import subscriptions
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


def create_channel(broker: Broker, topic_name: str, channel_name: str) -> Channel:
    """The channel, created if needed; the topic must exist (``/channel/create``)."""
    return broker.get_or_create_channel(broker.get_topic(topic_name), channel_name)


async def delete_topic(broker: Broker, name: str) -> None:
    """Delete a topic with its channels and its data on disk; disconnect its consumers."""
    topic = broker.get_topic(name)
    clients = [client for channel in topic.channels.values() for client in channel.clients]
    await broker.delete_topic(name)
    _disconnect(clients)


def delete_channel(broker: Broker, topic_name: str, channel_name: str) -> None:
    """Delete a channel and its cursors; disconnect its consumers."""
    channel = get_channel(broker, topic_name, channel_name)
    clients = list(channel.clients)
    broker.delete_channel(broker.get_topic(topic_name), channel_name)
    _disconnect(clients)


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


def empty_channel(broker: Broker, topic_name: str, channel_name: str) -> None:
    """Drop the channel's depth, in-flight and deferred messages."""
    get_channel(broker, topic_name, channel_name).empty()
    broker.syncs.request()


async def pause_topic(broker: Broker, name: str, paused: bool) -> None:
    """Pause or unpause delivery on every channel of a topic; saved before returning."""
    topic = broker.get_topic(name)
    topic.paused = paused
    if not paused:
        for channel in topic.channels.values():
            channel.notify()
    await _save_metadata(broker)


async def pause_channel(broker: Broker, topic_name: str, channel_name: str, paused: bool) -> None:
    """Pause or unpause delivery on one channel; saved before returning."""
    channel = get_channel(broker, topic_name, channel_name)
    channel.paused = paused
    if not paused:
        channel.notify()
    await _save_metadata(broker)


async def _save_metadata(broker: Broker) -> None:
    broker.syncs.request(metadata=True)
    await broker.wait_durable()


def _disconnect(clients: Iterable[object]) -> None:
    """Close each client's connection (a session has ``close()``)."""
    for client in clients:
        close = getattr(client, "close", None)
        if callable(close):
            close()
