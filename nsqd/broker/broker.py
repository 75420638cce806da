"""The broker: the one place that joins pure state (``nsqd.core``) with the partition logs
(``nsqd.storage``). This module is its writing side and its life: publishing, the fsync an
ack may wait for, and the background tasks (sync, retention) from open to close. Publishing
is synchronous (the append lands in the page cache before the ack, so ``kill -9`` loses
nothing); fsync, checkpoints and retention run in background tasks, with fsync in a worker
thread (DESIGN.md §4, §6). Topic and channel lifecycle is
:mod:`nsqd.broker.registry`, FIN / REQ / TOUCH :mod:`nsqd.broker.acking`: parts the
:class:`Broker` owns and hands its calls to, so callers ask the broker for everything. The
waits between a publish's append and its ack are the part ``publish_acks``
(:mod:`nsqd.broker.publish_acks`), which callers use directly.

On-disk layout under ``data_path``::

    pnsq.dat                          topics, partitions, channels, their flags (JSON)
    topics/t-<topic>/<partition>/     segments + index files of one partition log
    topics/t-<topic>/<partition>/state.json   channel cursors and the first-channel start
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager

import trio

from protocol.lookup import TopicAssignment

from ..core.errors import (
    BrokerError,
    ExitingError,
    NotEnoughReplicasError,
    NotWritableError,
)
from ..core.ownership import Plan, TopicPlan
from ..storage.batch import BodyBatch
from ..storage.cache import CacheBudget
from ..storage.checkpoint import DAMAGED_CHECKPOINTS
from ..storage.disk import is_out_of_space
from ..storage.errors import StorageError
from ..storage.handles import HandleCache
from ..storage.record import NewRecord, Record
from . import idempotence
from .acking import Acking
from .assignments import apply_assignments, logs_to_open
from .changes import Changes
from .channel import Channel
from .clock import Clock
from .committing import GroupCommit
from .config import BrokerConfig
from .diskguard import DiskGuard
from .logs import LogOpener, Opened
from .observer import Discard, Observer
from .partition import Partition
from .persistence import SyncSchedule
from .publish_acks import PublishAcks
from .reading import skipped_records
from .registry import TopicRegistry
from .retention import apply_retention
from .syncing import Syncer
from .topic import Topic
from .views import Subscriber
from .waiters import ReplicationWaiters

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
        self.start_time = int(self.clock.now())
        self.exiting = False
        self.syncs = SyncSchedule()
        #: the byte budget every partition log's tail cache shares (``--read-cache-bytes``)
        self.read_cache = CacheBudget(config.read_cache_bytes)
        #: fsync and checkpoints (and the last disk error, which /ping reports)
        self.syncer = Syncer(config, self.clock, self.syncs)
        #: the disk high-water mark (--max-disk-usage-percent): past it, writes are refused
        self.disk = DiskGuard(config.data_path, config.max_disk_usage_percent)
        self.publish_latency: Observer = Discard()  # seconds per append (nsqd.observe.metrics)
        self.fsync_latency: Observer = Discard()  # seconds per partition fsync
        #: the bound on open segment files over every partition (--max-segment-fds)
        self.handles = HandleCache(config.max_segment_fds)
        #: opens partition logs with the shared cache budget and descriptor bound
        self.logs = LogOpener(config, self.read_cache, self.handles, self.clock.now)
        #: publishers waiting for followers, streams to followers waiting for records
        self.replication = ReplicationWaiters(self.clock.monotonic)
        self.role_changes = 0  # partitions whose role here changed by lookupd's word
        #: the topic names lookupd deleted, as its last assignments listed them (its tombstones)
        self.deleted_on_lookupd: frozenset[str] = frozenset()
        #: topics and channels: finding, creating, subscribing, deleting, channel timers
        self.registry = TopicRegistry(
            config,
            nursery,
            clock=self.clock,
            changes=self.changes,
            logs=self.logs,
            syncs=self.syncs,
            syncer=self.syncer,
            replication=self.replication,
            exiting=lambda: self.exiting,
        )
        #: FIN / REQ / TOUCH on the channels' cursors
        self.acking = Acking(config, self.clock, self.replication)
        #: single-message PUBs of one loop turn, from any connections, share one append
        self.commits = GroupCommit(self.publish)
        #: the waits of a publish before its acknowledgement (followers, fsync)
        self.publish_acks = PublishAcks(config, self.registry, self.replication, self.syncs)

    @property
    def topics(self) -> dict[str, Topic]:
        """The node's topic table (the registry's; only ``nsqd.broker`` reaches into it)."""
        return self.registry.topics

    # ------------------------------------------------------------------ placement and reads

    def skipped_records(self) -> Iterator[tuple[str, int, int, int, int]]:
        """``(topic, partition, records, bytes, healed)``: damaged records skipped and
        repaired from a replica (metrics)."""
        return skipped_records(list(self.topics.values()))

    @property
    def damaged_checkpoints(self) -> int:
        """Checkpoint files found damaged (and moved aside) since the process started."""
        return DAMAGED_CHECKPOINTS.count

    def apply_assignments(
        self,
        node: str,
        assignments: Sequence[TopicAssignment],
        max_opens: int | None = None,
        wanted: Sequence[TopicPlan] | None = None,
        opened: Opened | None = None,
    ) -> Plan:
        """Hold what pnsq's lookupd placed on ``node`` (this node), in the roles it gave;
        opening at most ``max_opens`` partition logs (``deferred`` in the plan: call again,
        with ``wanted``, :func:`~.assignments.wanted_topics` of the document, read once), or
        taking them from ``opened`` (opened ahead: :meth:`apply_placement`)."""
        steps, role_changes = apply_assignments(
            self.registry, node, assignments, max_opens, wanted, opened
        )
        self.role_changes += role_changes
        return steps

    async def apply_placement(
        self,
        node: str,
        assignments: Sequence[TopicAssignment],
        wanted: Sequence[TopicPlan],
        per_step: int,
    ) -> None:
        """:meth:`apply_assignments` with the partition logs opened by a worker thread: first
        every change of role and epoch and every drop, opening nothing (a failover is not held
        up by new partitions), then ``per_step`` logs at a time opened off the event loop
        (each new one's files created and fsynced: milliseconds apiece, which a topic of
        thousands of partitions kept the loop from its heartbeats and streams for) and joined
        to the topic table on it."""
        self.apply_assignments(node, assignments, 0, wanted)
        registry = self.registry
        while wanted_logs := logs_to_open(registry, wanted, per_step):
            with registry.opening_logs(name for name, _, _ in wanted_logs):
                opened = await trio.to_thread.run_sync(registry.logs.open_all, wanted_logs)
                self.apply_assignments(node, assignments, per_step, wanted, opened)

    # ------------------------------------------------------------------ topics and channels

    def find_topic(self, name: str) -> Topic | None:
        """The topic ``name`` if this node has it (nothing is created)."""
        return self.registry.find_topic(name)

    def is_opening(self, name: str) -> bool:
        """Whether lookupd placed the topic ``name`` here and its logs are being opened."""
        return self.registry.is_opening(name)

    def list_topics(self) -> list[Topic]:
        """Every topic this node has, by name."""
        return self.registry.list_topics()

    def get_topic(self, name: str) -> Topic:
        """An existing topic, or TopicNotFoundError."""
        return self.registry.get_topic(name)

    def get_or_create_topic(
        self, name: str, partitions: int | None = None, *, ordered: bool = False, ext: bool = False
    ) -> Topic:
        """The topic ``name``, created on first use (:meth:`TopicRegistry.get_or_create_topic`)."""
        return self.registry.get_or_create_topic(name, partitions, ordered=ordered, ext=ext)

    def auto_create_topic(self, name: str, partition: int | None) -> Topic:
        """The topic a PUB or SUB names, created as nsqd does (PartitionNotFoundError for a
        partition a new topic would not have)."""
        return self.registry.auto_create_topic(name, partition)

    def get_or_create_channel(self, topic: Topic, name: str) -> Channel:
        """The channel ``name`` of ``topic``, created on first use."""
        return self.registry.get_or_create_channel(topic, name)

    def start_timer(self, channel: Channel) -> None:
        """Run the channel's timer task (until the channel is deleted)."""
        self.registry.start_timer(channel)

    def subscribe(self, topic_name: str, channel_name: str, client: Subscriber) -> Channel:
        """Add ``client`` to the channel, creating topic and channel as nsqd does."""
        return self.registry.subscribe(topic_name, channel_name, client)

    def unsubscribe(self, channel: Channel, client: Subscriber) -> None:
        """Remove ``client``; an #ephemeral channel goes with its last client."""
        self.registry.unsubscribe(channel, client)

    def delete_channel(self, topic: Topic, name: str) -> None:
        """Remove a channel and its cursors; an #ephemeral topic goes with its last channel."""
        self.registry.delete_channel(topic, name)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic, its channels and its data on disk."""
        await self.registry.delete_topic(name)

    # ------------------------------------------------------------------ FIN / REQ / TOUCH

    def finish(self, channel: Channel, message_id: bytes, client: object) -> None:
        """FIN one message; raises its refusal (:meth:`Acking.finish`)."""
        self.acking.finish(channel, message_id, client)

    def finish_run(
        self, channel: Channel, internal_ids: list[int], client: object
    ) -> tuple[int, list[tuple[int, BrokerError]]]:
        """FIN a consumer's run of messages: how many were finished, and the refusals
        ``(index in the run, error)`` (:meth:`Acking.finish_run`)."""
        return self.acking.finish_run(channel, internal_ids, client)

    def requeue(self, channel: Channel, message_id: bytes, client: object, delay_ms: int) -> None:
        """REQ with the delay clamped to [0, --max-req-timeout]."""
        self.acking.requeue(channel, message_id, client, delay_ms)

    def touch(
        self,
        channel: Channel,
        message_id: bytes,
        client: object,
        msg_timeout_ns: int,
        max_msg_timeout_ns: int,
    ) -> None:
        """TOUCH: deadline = now + msg timeout, capped at delivery + --max-msg-timeout."""
        self.acking.touch(channel, message_id, client, msg_timeout_ns, max_msg_timeout_ns)

    # ------------------------------------------------------------------ publish

    def publish(
        self, topic_name: str, entries: Sequence[NewRecord], partition: int | None = None
    ) -> Sequence[Record]:
        """Append ``entries`` atomically to one partition of the topic (created on first use).

        On return the records are in the OS page cache; with ``--sync-every=1`` the caller
        must also ``await wait_durable()`` before acknowledging.
        """
        topic, target = self._publish_target(topic_name, partition)
        return self._append(topic, target, entries)

    def _publish_target(self, topic_name: str, partition: int | None) -> tuple[Topic, Partition]:
        """The topic a publish names (created on first use) and the partition it appends to.
        Raises ExitingError while the node exits; NotWritableError past the disk's mark for a
        topic to be made (a full disk creates none; a publish to one that exists is refused
        by :meth:`_append`, and a numbered one stored already is acknowledged again)."""
        if self.exiting:
            raise ExitingError
        topic = self.topics.get(topic_name)
        if topic is None:
            self.disk.require_writable()
            topic = self.auto_create_topic(topic_name, partition)
        return topic, topic.pick_partition(partition)

    def _append(
        self, topic: Topic, target: Partition, entries: Sequence[NewRecord]
    ) -> Sequence[Record]:
        """A publish's append to ``target``, a partition of ``topic`` (:meth:`_publish_target`;
        the numbered publishes append to the partition whose producer state judged them)."""
        self.disk.require_writable()
        if topic.min_isr > 1 and len(target.state.followers) + 1 < topic.min_isr:
            raise NotEnoughReplicasError(
                f"{len(target.state.followers) + 1} cop(ies) in sync, min_isr {topic.min_isr}"
            )
        started = self.clock.perf()
        bytes_before = target.message_bytes
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
            self.disk.appended(target.message_bytes - bytes_before)  # the bodies' bytes
        sync_every = topic.sync_every or self.config.sync_every
        if target.unsynced >= sync_every:
            self.syncs.request()
        return records

    def publish_numbered(
        self,
        topic_name: str,
        entries: Sequence[NewRecord],
        partition: int,
        producer: int,
        first: int,
    ) -> Sequence[Record] | int:
        """:meth:`publish` of ``producer``'s messages numbered from ``first`` (idempotent
        publishing, :mod:`.idempotence`): the records appended, or, when they were stored
        already, the offset to acknowledge them at (:meth:`PublishAcks.wait_stored`). Raises
        :class:`~nsqd.core.producers.SequenceError` for numbers that do not follow."""
        topic, target = self._publish_target(topic_name, partition)
        now = self.clock.now()

        def append(numbered: Sequence[NewRecord]) -> Sequence[Record]:
            return self._append(topic, target, numbered)

        return idempotence.publish_numbered(target, entries, producer, first, now, append)

    def publish_runs(
        self, topic_name: str, partition: int | None, runs: Sequence[idempotence.Run]
    ) -> tuple[list[bool] | None, Sequence[Record]]:
        """:meth:`publish` of several publishers' runs as one append, numbered ones stamped
        (the publish reactor's): which were appended (None: all), and the records they were
        appended as; the others, numbered runs that do not simply come next
        (:meth:`~nsqd.core.producers.Producers.take`), were not, and must be published alone
        (:meth:`publish_numbered`)."""
        topic, target = self._publish_target(topic_name, partition)
        now = self.clock.now()
        appended: Sequence[Record] = ()

        def append(batch: BodyBatch) -> Sequence[Record]:
            nonlocal appended
            appended = self._append(topic, target, batch)
            return appended

        return idempotence.publish_runs(target, runs, now, append), appended

    @property
    def health_problem(self) -> str | None:
        """Why ``/ping`` is not ``OK``: the last disk error, or the disk past its mark."""
        return self.syncer.health_error or self.disk.reason

    @property
    def durable_acks(self) -> bool:
        """True when acks wait for fsync (``--sync-every=1``: :attr:`BrokerConfig.durable_acks`)."""
        return self.config.durable_acks

    async def wait_durable(self) -> None:
        """Wait for an fsync that started after this call (group commit: waiters share one)."""
        await self.syncs.wait_durable()

    # ------------------------------------------------------------------ persistence

    def restore(self) -> None:
        """Load topics and channels from ``pnsq.dat`` and the partition directories (startup)."""
        self.registry.restore()

    async def sync_once(self) -> None:
        """fsync, checkpoint and save metadata now (:class:`~nsqd.broker.syncing.Syncer`)."""
        await self.syncer.sync(self.topics, self.fsync_latency)

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
        self.syncs.awaited = False  # the cursor journal folded into state.json: a clean stop
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
        nursery.start_soon(broker.commits.run)
        nursery.start_soon(broker.run_retention)
        nursery.start_soon(broker.disk.run)
        nursery.start_soon(broker.replication.run_ticks)
        try:
            yield broker
        finally:
            with trio.CancelScope(shield=True):
                await broker.close()
            nursery.cancel_scope.cancel()
