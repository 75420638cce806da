"""The broker: the one place that joins pure state (``nsqd.core``) with the partition logs
(``nsqd.storage``). Publishing is synchronous (the append lands in the page cache before the
ack, so ``kill -9`` loses nothing); fsync, checkpoints and retention run in background tasks,
with fsync in a worker thread (DESIGN.md §4, §6).

On-disk layout under ``data_path``::

    pnsq.dat                          topics, partitions, channels, their flags (JSON)
    topics/t-<topic>/<partition>/     segments + index files of one partition log
    topics/t-<topic>/<partition>/state.json   channel cursors and the first-channel start
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from protocol.lookup import TopicAssignment
from protocol.message import SEQUENCE_MASK, partition_of
from protocol.names import is_ephemeral

from ..core.cursor import Message
from ..core.errors import (
    BrokerError,
    ChannelNotFoundError,
    ConsumerLimitError,
    ExitingError,
    NotEnoughReplicasError,
    NotInFlightError,
    NotOwnerError,
    NotWritableError,
    PartitionNotFoundError,
    TopicNotFoundError,
)
from ..core.latency import LatencyWindow
from ..core.ownership import Plan
from ..storage.cache import CacheBudget
from ..storage.disk import is_out_of_space
from ..storage.errors import StorageError
from ..storage.handles import HandleCache
from ..storage.record import NewRecord, Record
from .assignments import apply_assignments
from .changes import Changes
from .channel import Channel, Subscriber
from .clock import Clock
from .config import BrokerConfig
from .diskguard import DiskGuard
from .latency import Discard, Observer
from .opening import LogOpener
from .partition import Partition
from .persistence import (
    SyncSchedule,
    topic_directory,
)
from .reading import skipped_records
from .replication import ReplicationWaiters
from .restore import restore_broker
from .retention import apply_retention
from .syncing import Syncer
from .topic import Topic

log = logging.getLogger("nsqd.broker")


class Broker:
    """Topics, channels and their logs on this node. Create with :func:`open_broker`."""

    def __init__(
        self, config: BrokerConfig, nursery: trio.Nursery, clock: Clock | None = None
    ) -> None:
        #: the one clock every time reading of the broker and the shells goes through
        self.clock = clock or Clock()
        #: topics, channels or placements changed (the lookupd client registers at once)
        self.changes = Changes()
        self.config = config
        self.topics: dict[str, Topic] = {}
        self.start_time = int(self.clock.now())
        self.exiting = False
        self._nursery = nursery
        self.syncs = SyncSchedule()
        #: the byte budget every partition log's tail cache shares (``--read-cache-bytes``)
        self.read_cache = CacheBudget(config.read_cache_bytes)
        #: fsync and checkpoints (and the last disk error, which /ping reports)
        self.syncer = Syncer()
        #: the disk high-water mark (--max-disk-usage-percent): past it, writes are refused
        self.disk = DiskGuard(config.data_path, config.max_disk_usage_percent)
        self._timer_scopes: dict[Channel, trio.CancelScope] = {}
        self.publish_latency: Observer = Discard()  # seconds per append (nsqd.metrics)
        self.fsync_latency: Observer = Discard()  # seconds per partition fsync
        #: the bound on open segment files over every partition (--max-segment-fds)
        self.handles = HandleCache(config.max_segment_fds)
        #: opens partition logs with the shared cache budget and descriptor bound
        self.logs = LogOpener(config, self.read_cache, self.handles)
        #: publishers waiting for followers, streams to followers waiting for records
        self.replication = ReplicationWaiters()
        self.role_changes = 0  # partitions whose role here changed by lookupd's word

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
        if self.exiting:
            raise ExitingError
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

    def retire(self, partition: Partition) -> None:
        """A partition no longer held here: its log is synced and closed at the next sync
        (never under a worker thread's fsync); its files stay on disk."""
        self.syncer.retired.append(partition)
        self.syncs.request()

    def skipped_records(self) -> Iterator[tuple[str, int, int, int]]:
        """``(topic, partition, records, bytes)`` that reads skipped as damaged (metrics)."""
        return skipped_records(list(self.topics.values()))

    def apply_assignments(self, node: str, assignments: Sequence[TopicAssignment]) -> Plan:
        """Hold what pnsq's lookupd placed on ``node`` (this node), in the roles it gave."""
        return apply_assignments(self, node, assignments)

    # ------------------------------------------------------------------ channels

    def get_or_create_channel(self, topic: Topic, name: str) -> Channel:
        """The channel ``name`` of ``topic``, created on first use."""
        channel = topic.channels.get(name)
        if channel is not None:
            return channel
        if self.exiting:
            raise ExitingError
        channel = Channel(topic, name, ephemeral=is_ephemeral(name) or topic.ephemeral)
        channel.ordered = topic.ordered  # an ordered topic has only ordered channels
        for partition in topic.partitions:
            channel.add_partition(partition, topic.first_channel_start(partition), [])
            partition.dirty = True
        topic.channels[name] = channel
        if channel.ordered:  # its first message waits for the followers to hold its state
            for partition in topic.led:
                self.replication.appended(partition)
        self.start_timer(channel)
        self.syncs.request(metadata=True)
        self.changes.notify()
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        return channel

    def start_timer(self, channel: Channel) -> None:
        """Run the channel's timer task (until the channel is deleted)."""
        channel.clock = self.clock
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
            self.delete_channel(channel.topic, channel.name)

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
        self.syncs.metadata_dirty = True
        self.changes.notify()

    async def delete_topic(self, name: str) -> None:
        """Delete a topic, its channels and its data on disk."""
        topic = self.get_topic(name)
        async with self.syncer.lock:
            self._drop_topic(topic)
            if not topic.ephemeral:
                await trio.to_thread.run_sync(shutil.rmtree, self._topic_dir(name), True)
        self.syncs.request()

    # ------------------------------------------------------------------ publish

    def publish(
        self, topic_name: str, entries: list[NewRecord], partition: int | None = None
    ) -> list[Record]:
        """Append ``entries`` atomically to one partition of the topic (created on first use).

        On return the records are in the OS page cache; with ``--sync-every=1`` the caller
        must also ``await wait_durable()`` before acknowledging.
        """
        if self.exiting:
            raise ExitingError
        self.disk.require_writable()
        topic = self.topics.get(topic_name) or self.auto_create_topic(topic_name, partition)
        target = topic.pick_partition(partition)
        if topic.min_isr > 1 and len(target.state.followers) + 1 < topic.min_isr:
            raise NotEnoughReplicasError(
                f"{len(target.state.followers) + 1} cop(ies) in sync, min_isr {topic.min_isr}"
            )
        started = self.clock.perf()
        try:
            records = topic.append(target, entries)
        except StorageError as exc:
            if not is_out_of_space(exc):
                raise
            self.disk.out_of_space(exc)  # a prefix of the batch may be stored, never acked
            raise NotWritableError(str(exc)) from exc
        self.replication.appended(target)
        self.publish_latency.observe(self.clock.perf() - started)
        if target.directory is not None:
            self.disk.appended(sum(len(entry.body) for entry in entries))
        sync_every = topic.sync_every or self.config.sync_every
        if target.unsynced >= sync_every:
            self.syncs.request()
        return records

    async def wait_replicated(
        self, topic_name: str, records: Sequence[Record], *, durable: bool = True
    ) -> None:
        """Return once every in-sync follower of the partition holds ``records`` (at once
        when the leader is alone in sync); then, with ``--sync-every=1`` (unless ``durable``
        is False: the caller waits once for several batches), once they are fsynced here.
        Raises NotLeaderError if the partition's leadership moves first."""
        if records:
            topic = self.topics.get(topic_name)
            last = records[-1]
            if topic is not None:
                partition = topic.partition(partition_of(last.internal_id))
                if partition.state.followers:
                    await self.replication.wait(partition, last.offset + 1)
        if durable and self.durable_acks:
            await self.wait_durable()

    @property
    def health_problem(self) -> str | None:
        """Why ``/ping`` is not ``OK``: the last disk error, or the disk past its mark."""
        return self.syncer.health_error or self.disk.reason

    @property
    def durable_acks(self) -> bool:
        """True when acks wait for fsync (``--sync-every=1``)."""
        return self.config.sync_every <= 1

    async def wait_durable(self) -> None:
        """Wait for an fsync that started after this call (group commit: waiters share one)."""
        await self.syncs.wait_durable()

    # ------------------------------------------------------------------ FIN / REQ / TOUCH

    @staticmethod
    def locate(message_id: bytes) -> tuple[int, int]:
        """(partition, offset) of a 16-byte message id."""
        internal_id = int.from_bytes(message_id[:8], "big")
        return partition_of(internal_id), (internal_id & SEQUENCE_MASK) - 1

    def finish(self, channel: Channel, message_id: bytes, client: object) -> None:
        """FIN one message (:meth:`finish_many` of one); raises its refusal: NotInFlightError,
        NotOwnerError, NotLeaderError."""
        _, failed = self.finish_many(channel, [message_id], client)
        if failed:
            raise failed[0][1]

    def finish_many(
        self, channel: Channel, message_ids: Sequence[bytes], client: object
    ) -> tuple[int, list[tuple[bytes, BrokerError]]]:
        """FIN each of ``message_ids`` in order (a consumer's run of FINs): how many were
        finished, and the refusals ``(id, error)`` in order, as :meth:`finish` would raise
        them one by one; a refusal other than "not in flight" / "not the owner" ends the run
        (it ends the connection too)."""
        done = 0
        failed: list[tuple[bytes, BrokerError]] = []
        touched: set[int] = set()
        cursors = channel.cursors
        observe = self.observe_e2e if self.config.e2e_percentiles else None
        for message_id in message_ids:
            internal_id = int.from_bytes(message_id[:8], "big")
            number = partition_of(internal_id)
            cursor = cursors.get(number)
            try:
                if cursor is None:
                    raise NotInFlightError
                if number not in touched:
                    channel.topic.partition(number).state.require_leader("FIN")
                    touched.add(number)
                message = cursor.finish((internal_id & SEQUENCE_MASK) - 1, client)
            except (NotInFlightError, NotOwnerError) as exc:
                failed.append((message_id, exc))
                continue
            except BrokerError as exc:  # not the leader: the rest is refused the same way
                failed.append((message_id, exc))
                break
            done += 1
            if observe is not None:
                observe(channel, message)
        for number in touched:
            partition = channel.topic.partition(number)
            partition.dirty = True
            if cursors[number].ordered:
                self.replication.appended(partition)
                channel.notify()
        return done, failed

    def observe_e2e(self, channel: Channel, message: Message) -> None:
        """nsqd's end-to-end processing latency: FIN time minus the publish timestamp."""
        now_ns = self.clock.now_ns()
        window = channel.e2e_latency
        if window is None:
            window_ns = int(self.config.e2e_window * 1e9)
            window = LatencyWindow(self.config.e2e_percentiles, window_ns, now_ns)
            channel.e2e_latency = window
        window.insert(now_ns - message.record.timestamp_ns, now_ns)

    def requeue(self, channel: Channel, message_id: bytes, client: object, delay_ms: int) -> None:
        """REQ with the delay clamped to [0, --max-req-timeout]."""
        delay_ms = max(0, min(delay_ms, int(self.config.max_req_timeout * 1000)))
        partition, offset = self.locate(message_id)
        now_ns = self.clock.now_ns()
        cursor = channel.cursor_for(partition)
        cursor.requeue(offset, client, delay_ms * 1_000_000, now_ns)
        if delay_ms and not cursor.ordered:  # ordered: redelivered now, at the head
            channel.arm_timer(now_ns + delay_ms * 1_000_000)
        else:
            channel.notify()

    def touch(
        self,
        channel: Channel,
        message_id: bytes,
        client: object,
        msg_timeout_ns: int,
        max_msg_timeout_ns: int,
    ) -> None:
        """TOUCH: deadline = now + msg timeout, capped at delivery + --max-msg-timeout."""
        partition, offset = self.locate(message_id)
        cursor = channel.cursor_for(partition)
        message = cursor.in_flight.get(offset)
        now_ns = self.clock.now_ns()
        deadline = now_ns + msg_timeout_ns
        if message is not None:
            deadline = min(deadline, message.delivered_ns + max_msg_timeout_ns)
        cursor.touch(offset, client, deadline)

    # ------------------------------------------------------------------ persistence

    def restore(self) -> None:
        """Load topics and channels from ``pnsq.dat`` and the partition directories (startup)."""
        restore_broker(self)

    async def sync_once(self) -> None:
        """fsync, checkpoint and save metadata now (:class:`~nsqd.broker.syncing.Syncer`)."""
        await self.syncer.sync(self)

    async def run_syncer(self) -> None:
        """Sync every ``--sync-timeout``, or at once when ``--sync-every`` records are pending."""
        while True:
            await self.syncs.wait_requested(self.config.sync_timeout)
            await self.sync_once()

    async def run_retention(self) -> None:
        """Delete segments every channel has consumed once they are older than the retention."""
        while True:
            await trio.sleep(self.config.retention_check_interval)
            self.apply_retention(self.clock.now_ns())

    def apply_retention(self, now_ns: int) -> int:
        """One retention pass; returns the number of segments deleted."""
        return apply_retention(self.topics.values(), self.config.retention, now_ns)

    async def close(self) -> None:
        """Stop taking writes, checkpoint everything and close the logs."""
        self.exiting = True
        self.syncs.metadata_dirty = True
        for topic in self.topics.values():
            for partition in topic.partitions:
                partition.dirty = True
        await self.sync_once()
        for topic in self.topics.values():
            for partition in topic.partitions:
                partition.log.close()


@asynccontextmanager
async def open_broker(config: BrokerConfig, clock: Clock | None = None) -> AsyncIterator[Broker]:
    """Restore the broker from ``config.data_path`` and run its background tasks; ``clock``
    is the one clock of the daemon (default: the system's).

    On exit (including cancellation) everything is checkpointed and the logs are closed.
    """
    config.data_path.mkdir(parents=True, exist_ok=True)
    async with trio.open_nursery() as nursery:
        broker = Broker(config, nursery, clock or Clock())
        broker.restore()
        nursery.start_soon(broker.run_syncer)
        nursery.start_soon(broker.run_retention)
        nursery.start_soon(broker.disk.run)
        try:
            yield broker
        finally:
            with trio.CancelScope(shield=True):
                await broker.close()
            nursery.cancel_scope.cancel()
