"""fsync and checkpoints: one pass over every partition log and the metadata, under a lock.

A disk error does not stop the broker: it is logged, kept as :attr:`Syncer.health_error`
(``/ping`` answers ``NOK - <error>``, as nsqd does) and the failed checkpoint is retried at the
next pass. Partitions no longer held are synced and closed here, never under a worker thread's
fsync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..storage.checkpoint import write_checkpoint
from ..storage.errors import StorageError
from .partition import Partition
from .persistence import METADATA_FILE, STATE_FILE, metadata_document, partition_state

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("nsqd.broker")


class Syncer:
    """The sync lock, the last disk error, what was last checkpointed and what to close."""

    def __init__(self) -> None:
        self.lock = trio.Lock()  # fsync and checkpoint vs. closing or deleting logs
        #: the last disk error (None while healthy); /ping answers "NOK - <error>"
        self.health_error: str | None = None
        self.saved_metadata: dict[str, object] | None = None  # the last pnsq.dat written
        self.retired: list[Partition] = []  # no longer held: closed at the next pass

    async def sync(self, broker: Broker) -> None:
        """fsync what was appended, checkpoint changed cursors, save metadata if it changed.

        Holds the sync lock, so no log is closed or deleted under a worker thread's fsync. A disk
        error does not stop the broker: it is logged and reported by ``/ping`` (``NOK - <err>``),
        as nsqd does.
        """
        syncs = broker.syncs
        generation = syncs.begin()
        async with self.lock:
            retired, self.retired = self.retired, []
            for partition in retired:
                await self._disk(partition.log.sync)
                partition.log.close()
            for topic in list(broker.topics.values()):
                for partition in topic.partitions:
                    if partition.directory is None or topic.deleted:
                        continue
                    if partition.unsynced:
                        partition.unsynced = 0
                        started = broker.clock.perf()
                        await self._disk(partition.log.sync)
                        broker.fsync_latency.observe(broker.clock.perf() - started)
                    if partition.dirty:
                        partition.dirty = False
                        state = partition_state(topic, partition)
                        if state != partition.saved_state:  # keep .prev an older generation
                            path = partition.directory / STATE_FILE
                            if await self._disk(write_checkpoint, path, state):
                                partition.saved_state = state
                            else:
                                partition.dirty = True
            if syncs.metadata_dirty:
                syncs.metadata_dirty = False
                document = metadata_document(list(broker.topics.values()), broker.config.version)
                if document != self.saved_metadata:
                    path = broker.config.data_path / METADATA_FILE
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
