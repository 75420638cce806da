"""fsync and checkpoints: one pass over every partition log and the metadata, under a lock.

A disk error does not stop the broker: it is logged, kept as :attr:`Syncer.health_error`
(``/ping`` answers ``NOK - <error>``, as nsqd does) and the failed checkpoint is retried at the
next pass. Partitions no longer held are synced and closed here, never under a worker thread's
fsync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import trio

from ..storage.checkpoint import write_checkpoint
from ..storage.errors import StorageError
from . import idempotence
from .clock import Clock
from .config import BrokerConfig
from .journaling import save_state
from .observer import Observer
from .partition import Partition
from .persistence import (
    METADATA_FILE,
    STATE_FILE,
    SyncSchedule,
    as_new,
    metadata_document,
    partition_state,
)
from .topic import Topic

log = logging.getLogger("nsqd.broker")


class Syncer:
    """The sync lock, the last disk error, what was last checkpointed and what to close."""

    def __init__(self, config: BrokerConfig, clock: Clock, syncs: SyncSchedule) -> None:
        self.config = config
        self.clock = clock
        self.syncs = syncs  # the requests and fsync generations this pass serves
        self.lock = trio.Lock()  # fsync and checkpoint vs. closing or deleting logs
        #: the last disk error (None while healthy); /ping answers "NOK - <error>"
        self.health_error: str | None = None
        self.saved_metadata: dict[str, object] | None = None  # the last pnsq.dat written
        self.retired: list[Partition] = []  # no longer held: closed at the next pass

    async def sync(self, topics: Mapping[str, Topic], fsync_latency: Observer) -> None:
        """fsync what was appended, checkpoint changed cursors, save metadata if it changed.

        A pass that somebody waits for (:meth:`SyncSchedule.wait_durable`: a durable ack)
        appends cursor moves to the cursor journal where it can (:mod:`.journaling`); the
        other passes (the ``--sync-timeout`` schedule, shutdown) write ``state.json``, folding
        the journal into it.

        ``topics`` is the node's live topic table (read once the lock is held, so a topic
        deleted meanwhile is not saved); ``fsync_latency`` observes each partition fsync.

        Holds the sync lock, so no log is closed or deleted under a worker thread's fsync. A disk
        error does not stop the broker: it is logged and reported by ``/ping`` (``NOK - <err>``),
        as nsqd does.
        """
        syncs = self.syncs
        journal, syncs.awaited = syncs.awaited, False  # a pass somebody waits for: be quick
        generation = syncs.begin()
        async with self.lock:
            retired, self.retired = self.retired, []
            for partition in retired:
                await self._disk(partition.log.sync)
                partition.log.close()
            for topic in list(topics.values()):
                for partition in topic.partitions:
                    if partition.directory is None or topic.deleted:
                        continue
                    if partition.unsynced:
                        partition.unsynced = 0
                        started = self.clock.perf()
                        await self._disk(partition.log.sync)
                        fsync_latency.observe(self.clock.perf() - started)
                    idempotence.expire(partition, self.clock.now())
                    idempotence.report_evictions(topic.name, partition, self.clock.monotonic())
                    now = self.clock.monotonic()
                    due = partition.dirty or idempotence.checkpoint_due(partition, now)
                    if due and _held(topic, partition):
                        partition.dirty = False
                        state = partition_state(topic, partition)
                        if state == partition.saved_state:  # keep .prev an older generation
                            continue
                        if partition.created and as_new(state):  # what none on disk says
                            partition.saved_state = state
                            idempotence.saved(partition, now)
                            continue
                        path = partition.directory / STATE_FILE
                        # a journal record only beside a state.json
                        logged = journal and not partition.created
                        saved = await save_state(partition, state, path, self._disk, journal=logged)
                        if saved:
                            idempotence.saved(partition, now)
                            partition.created = False
                        else:
                            partition.dirty = True
            if syncs.metadata_dirty:
                syncs.metadata_dirty = False
                document = metadata_document(list(topics.values()), self.config.version)
                if document != self.saved_metadata:
                    path = self.config.data_path / METADATA_FILE
                    if await self._disk(write_checkpoint, path, document):
                        self.saved_metadata = document
                    else:
                        syncs.metadata_dirty = True
        syncs.end(generation)

    async def _disk(self, fn: Callable[..., None], *args: object) -> bool:
        """Run blocking file I/O in a worker thread; a failure marks the broker unhealthy (and
        is retried at the next sync). Returns whether it succeeded."""
        try:
            await trio.to_thread.run_sync(fn, *args)
        except (StorageError, OSError) as exc:
            self.health_error = f"{type(exc).__name__}: {exc}"
            log.error("disk error: %s", self.health_error)
            return False
        self.health_error = None
        return True


def _held(topic: Topic, partition: Partition) -> bool:
    """``partition`` is still held by ``topic``: lookupd may take it away (its channels' cursors
    with it) while a pass waits for the disk, and the retired partition is not checkpointed."""
    return topic.holds(partition.number) and topic.partition(partition.number) is partition
