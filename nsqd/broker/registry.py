"""Topic and channel lifecycle on a node: finding, creating (as nsqd does on first use),
subscribing and deleting topics and channels, and each channel's timer task.

:class:`TopicRegistry` is a part the :class:`~nsqd.broker.broker.Broker` owns: it holds the
node's topic table, and callers keep asking the broker (DESIGN.md §2: the one gate).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import trio

from protocol.names import is_ephemeral

from ..core.errors import (
    ChannelNotFoundError,
    ConsumerLimitError,
    ExitingError,
    NotLeaderError,
    PartitionNotFoundError,
    TopicNotFoundError,
)
from .changes import Changes
from .channel import Channel
from .clock import Clock
from .config import BrokerConfig
from .logs import LogOpener
from .partition import Partition
from .persistence import SyncSchedule, topic_directory
from .restore import restore_topics
from .syncing import Syncer
from .topic import Topic
from .views import Subscriber
from .waiters import ReplicationWaiters

log = logging.getLogger("nsqd.broker")


class TopicRegistry:
    """The topics of a node and their channels."""

    def __init__(
        self,
        config: BrokerConfig,
        nursery: trio.Nursery,
        *,
        clock: Clock,
        changes: Changes,
        logs: LogOpener,
        syncs: SyncSchedule,
        syncer: Syncer,
        replication: ReplicationWaiters,
        exiting: Callable[[], bool],
    ) -> None:
        self.config = config
        self.topics: dict[str, Topic] = {}
        self._nursery = nursery  # the broker's: the channels' timer tasks run in it
        self._clock = clock
        #: the broker's parts this table shares (:mod:`.assignments` uses them too)
        self.changes = changes  # notified when topics or channels come and go
        self.logs = logs
        self.syncs = syncs
        #: a new ordered channel's first message waits until its followers hold its state
        self.replication = replication
        self._syncer = syncer  # a log is closed or deleted only under its lock
        self._exiting = exiting  # the broker is closing: nothing new is created
        self._timer_scopes: dict[Channel, trio.CancelScope] = {}
        #: topics whose partition logs a worker thread opens for lookupd's placement now
        #: (:meth:`opening_logs`): not created here meanwhile, not deleted under the thread
        self._opening: set[str] = set()
        self._opened = trio.Event()  # set when an opening ends (then replaced)

    @contextmanager
    def opening_logs(self, names: Iterable[str]) -> Iterator[None]:
        """While a worker thread opens partition logs of the topics ``names`` (their
        directories created, files fsynced), before they join the table: a topic among them
        that this node lacks is not created by a client meanwhile (the same directories
        opened twice), and none of them is deleted under the thread."""
        names = set(names) - self._opening
        self._opening |= names
        try:
            yield
        finally:
            self._opening -= names
            self._opened.set()
            self._opened = trio.Event()

    def is_opening(self, name: str) -> bool:
        """Whether lookupd placed ``name`` here and its partition logs are being opened."""
        return name in self._opening

    def restore(self) -> None:
        """Load topics and channels from ``pnsq.dat`` and the partition directories (startup),
        and start the channels' timers."""
        for topic in restore_topics(self.config.data_path, self.logs):
            self.topics[topic.name] = topic
            for channel in topic.channels.values():
                self.start_timer(channel)

    def retire(self, partition: Partition) -> None:
        """A partition no longer held here: its log is synced and closed at the next sync
        (never under a worker thread's fsync); its files stay on disk."""
        self._syncer.retired.append(partition)
        self.syncs.request()

    # ------------------------------------------------------------------ topics

    def find_topic(self, name: str) -> Topic | None:
        """The topic ``name`` if this node has it (nothing is created)."""
        return self.topics.get(name)

    def list_topics(self) -> list[Topic]:
        """Every topic this node has, by name."""
        return sorted(self.topics.values(), key=lambda t: t.name)

    def get_topic(self, name: str) -> Topic:
        """An existing topic, or TopicNotFoundError."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicNotFoundError(name)
        return topic

    def get_or_create_topic(
        self, name: str, partitions: int | None = None, *, ordered: bool = False, ext: bool = False
    ) -> Topic:
        """The topic ``name``, created (with ``--default-partitions`` unless ``partitions`` is
        given, and the youzan flags) on first use."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        if self._exiting():
            raise ExitingError
        if name in self._opening:  # placed here by lookupd: its logs are being opened
            raise NotLeaderError(f"topic {name}: not served here yet (its partitions are opening)")
        count = partitions or self.config.default_partitions
        topic = self.logs.build_topic(name, count, {}, ordered=ordered, ext=ext)
        self.topics[name] = topic
        self.syncs.request(metadata=True)
        self.changes.notify()
        flags = "".join(f", {f}" for f, on in (("ordered", ordered), ("ext", ext)) if on)
        log.info("TOPIC(%s): created with %d partition(s)%s", name, count, flags)
        return topic

    def auto_create_topic(self, name: str, partition: int | None) -> Topic:
        """The topic a PUB or SUB names, created as nsqd does unless it names a partition that
        a new topic would not have (PartitionNotFoundError, nothing created)."""
        if partition is None or partition == -1 or name in self.topics:
            return self.get_or_create_topic(name)
        if not 0 <= partition < self.config.default_partitions:
            raise PartitionNotFoundError(f"partition {partition} of topic {name}")
        return self.get_or_create_topic(name)

    def _topic_dir(self, name: str) -> Path:
        return topic_directory(self.config.data_path, name)

    # ------------------------------------------------------------------ channels

    def get_or_create_channel(self, topic: Topic, name: str) -> Channel:
        """The channel ``name`` of ``topic``, created on first use."""
        channel = topic.channels.get(name)
        if channel is not None:
            return channel
        if self._exiting():
            raise ExitingError
        # as nsqd: a channel is #ephemeral by its own name (a plain channel of an #ephemeral
        # topic stays when its last client leaves, and keeps the topic)
        channel = Channel(topic, name, ephemeral=is_ephemeral(name))
        channel.ordered = topic.ordered  # an ordered topic has only ordered channels
        for partition in topic.partitions:
            channel.add_partition(partition, _channel_start(topic, partition, name), [])
            partition.dirty = True
        topic.channels[name] = channel
        # the streams to the followers send its state now (an ordered channel's first
        # message waits for them to hold it; a topic without channels, its streams sleep)
        for partition in topic.led:
            self.replication.appended(partition)
        self.start_timer(channel)
        self.syncs.request(metadata=True)
        self.changes.notify()
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        return channel

    def start_timer(self, channel: Channel) -> None:
        """Run the channel's timer task (until the channel is deleted)."""
        channel.clock = self._clock
        scope = trio.CancelScope()
        self._timer_scopes[channel] = scope

        async def timer() -> None:
            with scope:
                await channel.run_timer()

        self._nursery.start_soon(timer)

    def subscribe(self, topic_name: str, channel_name: str, client: Subscriber) -> Channel:
        """Add ``client`` to the channel, creating topic and channel as nsqd does."""
        topic = self.get_or_create_topic(topic_name)
        channel = self.get_or_create_channel(topic, channel_name)
        limit = self.config.max_channel_consumers
        if limit and len(channel.clients) >= limit:
            raise ConsumerLimitError(
                f"consumers for {topic_name}:{channel_name} exceeds limit of {limit}"
            )
        channel.clients.add(client)
        return channel

    def unsubscribe(self, channel: Channel, client: Subscriber) -> None:
        """Remove ``client``; an #ephemeral channel goes with its last client.

        Its in-flight messages stay in flight until they time out, as in nsqd.
        """
        channel.clients.discard(client)
        if channel.ephemeral and not channel.clients and not channel.deleted:
            topic = self.topics.get(channel.topic.name)  # a live channel's topic is listed
            if topic is not None and topic.channels.get(channel.name) is channel:
                self.delete_channel(topic, channel.name)

    def delete_channel(self, topic: Topic, name: str) -> None:
        """Remove a channel and its cursors; an #ephemeral topic goes with its last channel."""
        channel = topic.channels.pop(name, None)
        if channel is None:
            raise ChannelNotFoundError(name)
        channel.deleted = True
        scope = self._timer_scopes.pop(channel, None)
        if scope is not None:
            scope.cancel()
        if not topic.channels:
            for partition in topic.partitions:
                partition.topic_start = partition.log.end_offset
        for partition in topic.partitions:
            partition.dirty = True
            self.replication.wake(partition, streams=False)  # its acks waiting for followers
        self.syncs.request(metadata=True)
        self.changes.notify()
        if topic.ephemeral and not topic.channels and not topic.deleted:
            self._drop_topic(topic)

    def _drop_topic(self, topic: Topic) -> None:
        topic.deleted = True
        self.topics.pop(topic.name, None)
        for channel in list(topic.channels.values()):
            channel.deleted = True
            scope = self._timer_scopes.pop(channel, None)
            if scope is not None:
                scope.cancel()
        for partition in topic.partitions:
            partition.log.close()
            self.replication.wake(partition, streams=False)  # its acks waiting for followers
        self.syncs.metadata_dirty = True
        self.changes.notify()

    async def delete_topic(self, name: str) -> None:
        """Delete a topic, its channels and its data on disk."""
        while name in self._opening:  # not under a worker thread creating its partitions
            await self._opened.wait()
        topic = self.get_topic(name)
        async with self._syncer.lock:
            self._drop_topic(topic)
            if not topic.ephemeral:
                await trio.to_thread.run_sync(shutil.rmtree, self._topic_dir(name), True)
        self.syncs.request()


def _channel_start(topic: Topic, partition: Partition, name: str) -> int:
    """Where a new channel ``name`` starts in ``partition``: where the ephemeral channel of that
    name was on the leader this node followed (its consumer is back, on this node now leading),
    else as nsqd starts a channel (:meth:`Topic.first_channel_start`)."""
    mark = partition.ephemeral_marks.pop(name, None)
    if mark is None:
        return topic.first_channel_start(partition)
    log_ = partition.log
    return min(max(mark, log_.start_offset), log_.end_offset)
