"""The lookupd's metadata as it is saved: the topic placements, tombstones and the nodes being
drained, versioned, and their saving.

Every change bumps a version; :meth:`Metadata.flush` saves the newest placements (in a worker
thread to the file store, or through the HA saver to etcd; concurrent flushes coalesce) and
wakes the long-polls waiting for a newer saved version (:meth:`Metadata.wait_saved_after`), so
a decision reaches the nodes once it is on disk, never before.
:class:`~lookupd.state.cluster.Cluster` is this metadata plus the live registry it is decided from.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio
from trio.lowlevel import ParkingLot

from ..core.placement import TopicPlacement
from ..core.switches import Switches
from .store import MetadataStore, Stored, StoreError, UnavailableError

log = logging.getLogger("nsqlookupd.cluster")

#: HA mode: saves the placements, tombstones, nodes being drained and switches (in etcd),
#: raising StoreError
Saver = Callable[
    [list[TopicPlacement], dict[str, float], dict[str, float], Switches], Awaitable[None]
]


class Metadata:
    """Placements + tombstones + their saves (see the module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.placements: dict[str, TopicPlacement] = {}
        #: deleted topics (name -> wall time of the deletion): never adopted back from a node,
        #: and listed in every node's assignments so a node's leftover copy is deleted too
        self.deleted: dict[str, float] = {}
        #: nodes being drained (``/cluster/node/remove``; node -> wall time it was asked): their
        #: copies move elsewhere and they take no new one
        self.removing: dict[str, float] = {}
        #: the operator's switches (:mod:`lookupd.core.switches`)
        self.switches = Switches()
        #: the placements and deletions as last saved: all the nodes are told (a decision in
        #: memory not yet on disk may still be rolled back, so no node may act on it)
        self.saved_placements: dict[str, TopicPlacement] = {}
        self.saved_deleted: dict[str, float] = {}
        self.saved_removing: dict[str, float] = {}
        self.saved_switches = Switches()
        self._version = 0  # bumped on every placement change
        self._saved = 0  # the version on disk
        self._saved_waiters = ParkingLot()  # long-polls of /pnsq/assignments
        self._save_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        #: HA mode (etcd): how placements are saved; None: ``store`` (the file) in a thread
        self.saver: Saver | None = None
        #: HA mode: this lookupd is the elected leader, the only one that places, fails over
        #: and saves; a follower serves what the leader saved (:meth:`Cluster.follow`). Always
        #: True without HA.
        self.leading = True

    def attach(self, nursery: trio.Nursery) -> None:
        """Where background flushes run."""
        self._nursery = nursery

    def placed_nodes(self) -> set[str]:
        """Every node holding a partition (leader or replica), or the target of a move."""
        nodes = {
            node
            for placement in self.placements.values()
            for part in placement.partitions
            for node in (part.leader, *part.replicas)
        }
        return nodes | {m.target for p in self.placements.values() for m in p.moves}

    def _take_saved(self, stored: Stored) -> None:
        """``stored``, saved by the leader lookupd, replaces this copy; it is on disk."""
        self.placements, self.deleted = dict(stored.placements), dict(stored.deleted)
        self.removing = dict(stored.removing)
        self.switches = stored.switches
        self._as_saved()
        self._version += 1
        self._saved = self._version
        self._saved_waiters.unpark_all()

    def _as_saved(self) -> None:
        """The placements and deletions in memory are what is on disk (loaded or followed)."""
        self.saved_placements, self.saved_deleted = dict(self.placements), dict(self.deleted)
        self.saved_removing = dict(self.removing)
        self.saved_switches = self.switches

    def _changed(self) -> None:
        self._version += 1

    def note_changed(self) -> None:
        """The placements were changed in place (the failover supervisor): save them next."""
        self._changed()

    async def flush(self) -> None:
        """Save the placements if they changed since the last save. Raises StoreError."""
        async with self._save_lock:
            if self._saved >= self._version:
                return
            if not self.leading:
                raise UnavailableError("not the leader lookupd: metadata is read-only here")
            version, placements, deleted = self._version, dict(self.placements), dict(self.deleted)
            removing, switches = dict(self.removing), self.switches
            snapshot = list(placements.values())
            if self.saver is not None:
                await self.saver(snapshot, deleted, removing, switches)
            else:
                save = self.store.save
                await trio.to_thread.run_sync(save, snapshot, deleted, removing, switches)
            self._saved = version
            self.saved_placements, self.saved_deleted = placements, deleted
            self.saved_removing, self.saved_switches = removing, switches
            self._saved_waiters.unpark_all()  # decisions reach the nodes once they are on disk

    @property
    def saved_version(self) -> int:
        """The version of the placements on disk (what the nodes may be told)."""
        return self._saved

    async def wait_saved_after(self, version: int) -> None:
        """Return once placements newer than ``version`` are on disk (callers bound it)."""
        while self._saved <= version:
            await self._saved_waiters.park()

    def _flush_soon(self) -> None:
        if not self.leading:
            return

        async def flush() -> None:
            try:
                await self.flush()
            except StoreError as exc:
                log.error("metadata not saved: %s", exc)

        if self._nursery is not None:
            self._nursery.start_soon(flush)

    def _check_leading(self) -> None:
        if not self.leading:
            raise UnavailableError("not the leader lookupd: metadata is read-only here")
