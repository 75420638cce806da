"""The lookupd's state at runtime: the live registry of nodes, and the topic placements
decided from it (:class:`~lookupd.state.metadata.Metadata`, which :class:`Cluster` extends,
with the operator's changes of :class:`~lookupd.state.operations.Operations`).

The TCP and HTTP shells call into one :class:`Cluster`. Registry changes are synchronous (the
event loop is the only writer); placement changes are persisted through :meth:`Cluster.flush`.
An HTTP ``/topic/create`` answers once its placement is on disk; a placement adopted from a
node's registration is flushed in the background.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from trio.lowlevel import ParkingLot

from protocol.lookup import PartitionAssignment, TopicAssignment
from protocol.lookup_v1 import EXT_PARTITIONS, PeerIdentity

from ..core.liveness import Liveness, Progress
from ..core.moves import Move, MoveError, bytes_left
from ..core.placement import (
    PlacementError,
    TopicMeta,
    TopicPlacement,
    adopt,
    assignments_for,
    check_recreate,
    copy_load,
    leader_load,
    place,
    place_pending,
)
from ..core.registry import Peer, Registry, is_youzan
from ..core.views import Timeouts
from .operations import Operations, describe
from .store import MetadataStore, Stored, StoreError, UnavailableError

log = logging.getLogger("nsqlookupd.cluster")

#: seconds after a start during which placed nodes that have not reconnected yet count as alive
START_GRACE = 6.0

#: deleted topics remembered (and sent to every node) at most
MAX_TOMBSTONES = 1000


class Cluster(Operations):
    """Registry + liveness + the placements decided from them, for one lookupd (see the module
    docstring)."""

    def __init__(
        self,
        store: MetadataStore,
        timeouts: Timeouts,
        *,
        clock: Callable[[], float] = time.time,
        heartbeat_timeout: float = 2.0,
    ) -> None:
        super().__init__(store)
        self.registry = Registry()
        #: pnsq nodes' connections and heartbeats, and the leaders' progress reports
        self.liveness = Liveness(heartbeat_timeout, max(START_GRACE, heartbeat_timeout))
        #: partitions with no live in-sync replica to lead them
        self.offline: set[tuple[str, int]] = set()
        #: woken when something failover decisions depend on happened
        self.events = ParkingLot()
        self.timeouts = timeouts
        self.clock = clock
        self._racks: dict[str, str] = {}  # node -> the rack it registered last

    def load(self) -> None:
        """Read the stored placements; each stored topic gets its registration key back."""
        stored = self.store.load()
        self.placements, self.deleted = stored.placements, stored.deleted
        self.removing, self.switches = stored.removing, stored.switches
        self._as_saved()
        for name in self.placements:
            self.registry.add_topic(name)
        self.liveness.seed(self.placed_nodes(), self.clock())
        self._restore_joined()
        log.info("metadata: %d topic(s) from %s", len(self.placements), self.store)

    def follow(self, stored: Stored) -> None:
        """HA mode, on a follower (or a leader taking over): the metadata as the leader saved
        it replaces this lookupd's copy, and the long-polls of the nodes hear of it."""
        same = stored.placements == self.placements and stored.deleted == self.deleted
        if same and (stored.removing, stored.switches) == (self.removing, self.switches):
            return
        for name in stored.deleted.keys() - self.deleted.keys():  # deleted by the leader
            self.registry.delete_topic(name)
        self._take_saved(stored)  # the long-polls of the nodes hear of it
        for name in self.placements:
            self.registry.add_topic(name)
        self.liveness.seed(self.placed_nodes(), self.clock())
        self._restore_joined()
        self.events.unpark_all()

    def _restore_joined(self) -> None:
        """The ISR members not confirmed yet, as the placements saved them."""
        self.liveness.restore_joined(
            {
                (name, number): frozenset(nodes)
                for name, placement in self.placements.items()
                for number, nodes in placement.joined
            }
        )

    def keep_joined(self) -> bool:
        """Give each placement the ISR members not confirmed yet that the live state holds
        (:attr:`~lookupd.core.placement.TopicPlacement.joined`): saved with the ISR that holds
        them (the supervisor's flush), and dropped once the leader confirms them. True when a
        placement changed (noted: the next flush saves it)."""
        wanted: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
        for (topic, number), nodes in self.liveness.joined.items():
            wanted.setdefault(topic, []).append((number, tuple(sorted(nodes))))
        holding = [name for name, placement in self.placements.items() if placement.joined]
        changed = False
        for topic in wanted.keys() | set(holding):
            placement = self.placements.get(topic)
            if placement is None:
                continue
            count = len(placement.partitions)
            joined = tuple(sorted(e for e in wanted.get(topic, ()) if e[0] < count))
            if joined != placement.joined:
                self.placements[topic] = replace(placement, joined=joined)
                changed = True
        if changed:
            self.note_changed()
        return changed

    # ------------------------------------------------------------------ from the TCP protocol

    def identify(self, peer_id: str, identity: PeerIdentity) -> Peer:
        """A peer identified itself; a pnsq peer that asked for partitions gets them."""
        partitioned = EXT_PARTITIONS in identity.extensions or is_youzan(identity)
        peer = self.registry.identify(peer_id, identity, self.clock(), partitioned=partitioned)
        if partitioned and not is_youzan(identity):
            self._racks[peer.node_id] = identity.rack
            self.liveness.connected(peer.node_id, self.clock())
            self.events.unpark_all()
        self.place_pending()
        return peer

    def ping(self, peer_id: str) -> None:
        """PING: the peer (and its node) is alive."""
        now = self.clock()
        self.registry.ping(peer_id, now)
        peer = self.registry.peers.get(peer_id)
        if peer is not None and peer.partitioned:
            self.liveness.heartbeat(peer.node_id, now)

    def disconnect(self, peer_id: str) -> None:
        """A registration connection closed (kill -9 of its nsqd: failover at once)."""
        peer = self.registry.peers.get(peer_id)
        self.registry.disconnect(peer_id)
        if peer is not None and peer.partitioned:
            self.liveness.disconnected(peer.node_id, self.clock())
            self.events.unpark_all()

    def unregister(
        self, peer_id: str, topic: str, channel: str | None, partition: int | None
    ) -> None:
        """UNREGISTER (a pnsq node's is a heartbeat too, as its REGISTER)."""
        self.registry.unregister(peer_id, topic, channel, partition)
        peer = self.registry.peers.get(peer_id)
        if peer is not None and peer.partitioned:
            self.liveness.heartbeat(peer.node_id, self.clock())

    def report_progress(self, node: str, reports: list[dict[str, object]]) -> None:
        """A leader's word on its followers; kept when it leads the partition at that epoch.
        Not a heartbeat of ``node``: it comes over HTTP, and only the registration connection
        tells whether the node is up (:mod:`lookupd.core.liveness`)."""
        for entry in reports:
            topic, number, epoch = entry.get("topic"), entry.get("partition"), entry.get("epoch")
            placement = self.placements.get(topic) if isinstance(topic, str) else None
            if placement is None or not isinstance(number, int) or not isinstance(epoch, int):
                continue
            if not 0 <= number < len(placement.partitions):
                continue
            part = placement.partitions[number]
            if part.leader != node or part.epoch != epoch:
                continue
            progress = Progress(
                node,
                epoch,
                _names(entry.get("caught_up")),
                _names(entry.get("lagging")),
                _names(entry.get("confirmed")),
                _sizes(entry.get("behind")),
            )
            before = self.liveness.progress.get((placement.name, number))
            self.liveness.report(placement.name, number, progress)
            if before != progress:  # the bytes behind alone decide nothing
                self.events.unpark_all()

    def moves_in_progress(self) -> list[tuple[TopicPlacement, Move, int | None]]:
        """The moves as saved (what the nodes are told), by topic, each with the bytes its
        target still lacks (:func:`~lookupd.core.moves.bytes_left`, from the current leader's
        last report, which every lookupd the leader registers with gets; None when unknown)."""
        return [
            (placement, move, self.bytes_left(placement, move))
            for _, placement in sorted(self.saved_placements.items())
            for move in placement.moves
        ]

    def bytes_left(self, placement: TopicPlacement, move: Move) -> int | None:
        """The bytes ``move``'s target still lacks (see :meth:`moves_in_progress`)."""
        part = placement.partitions[move.partition]
        report = self.liveness.current(placement.name, move.partition, part.leader, part.epoch)
        return bytes_left(move, part, report.behind if report else None)

    def leaving(self, node: str) -> bool:
        """A node announced a clean shutdown (its leaderships move before it exits)."""
        found = self.liveness.leaving(node)
        self.events.unpark_all()
        return found

    def register(
        self, peer_id: str, topic: str, channel: str | None, partition: int | None
    ) -> None:
        """REGISTER; a partition of a topic lookupd has no placement for is adopted. A pnsq
        node's REGISTER is a heartbeat too (it may send hundreds before its next PING)."""
        self.registry.register(peer_id, topic, channel, partition)
        peer = self.registry.peers[peer_id]
        if peer.partitioned:
            self.liveness.heartbeat(peer.node_id, self.clock())
        if partition is None or is_youzan(peer.identity):
            return
        if not self.leading:  # HA: only the leader adopts (the node registers there too)
            return
        if topic in self.deleted:  # a copy of a deleted topic: its node is told to delete it
            log.info("TOPIC(%s): deleted here; %s still has a copy", topic, peer.node_id)
            return
        placement = self.placements.get(topic)
        if placement is None:
            placement = adopt(topic, peer.node_id, [partition], new_topic_id())
        elif placement.adopted and partition >= len(placement.partitions):
            grown = [*placement.partitions]
            grown += [PartitionAssignment(peer.node_id)] * (partition + 1 - len(grown))
            meta = replace(placement.meta, partition_num=len(grown))
            placement = replace(placement, meta=meta, partitions=tuple(grown))
        else:
            if not placement.holds(peer.node_id):  # its copy of a topic placed elsewhere:
                self._changed()  # its assignments now list the topic (see assignments())
                self._flush_soon()
            return
        log.info(
            "TOPIC(%s): %d partition(s) adopted from %s",
            topic,
            len(placement.partitions),
            peer.node_id,
        )
        self.placements[topic] = placement
        self._changed()
        self._flush_soon()

    # ------------------------------------------------------------------ placement

    def live_nodes(self) -> list[str]:
        """Nodes (``host:tcp_port``) of active pnsq peers, which can take partitions."""
        peers = self.registry.active_peers(self.clock(), self.timeouts.inactive)
        return sorted({p.node_id for p in peers if p.placed})

    def racks(self) -> dict[str, str]:
        """The rack each pnsq node registered (``--rack``) when it last identified itself, by
        node id (also of the nodes gone since: their copies still occupy their racks)."""
        return dict(self._racks)

    def place_pending(self) -> None:
        """Place topics created before any node was there."""
        pending = [p for p in self.placements.values() if p.pending]
        if not pending or not self.leading:
            return
        placed = place_pending(self.placements.values(), self.placeable_nodes(), self.racks())
        for placement in placed:
            log.info("TOPIC(%s): placed on %s", placement.name, describe(placement))
            self.placements[placement.name] = placement
            self._changed()
        self._flush_soon()

    async def create_topic(
        self,
        name: str,
        meta: TopicMeta,
        prefer: str | None = None,
        *,
        keep_existing: bool = False,
    ) -> None:
        """``/topic/create``: place the topic and persist it before returning; ``prefer``
        (a node creating a topic for a publish) leads its first partition, and an existing
        topic is then left as it is, as it is with ``keep_existing`` (a create naming none of
        the topic's parameters). Raises :class:`PlacementError` or :class:`StoreError`."""
        self._check_leading()
        existing = self.placements.get(name)
        if existing is not None and (prefer is not None or keep_existing):
            self.registry.add_topic(name)
            return  # a node's publish raced another's: the topic stays where it is
        if existing is not None:
            check_recreate(existing, meta)
            if not existing.adopted:
                self.registry.add_topic(name)
                return
        load, copies = leader_load(self.placements.values()), copy_load(self.placements.values())
        nodes = self.placeable_nodes()
        topic_id = existing.topic_id if existing is not None else new_topic_id()
        placement = place(name, meta, nodes, load, prefer, self.racks(), copies, topic_id)
        self.placements[name] = placement
        tombstone = self.deleted.pop(name, None)
        self._changed()
        try:
            await self.flush()
        except StoreError:
            if existing is None:
                self.placements.pop(name, None)
            else:
                self.placements[name] = existing
            if tombstone is not None:
                self.deleted[name] = tombstone
            self._changed()
            raise
        self.registry.add_topic(name)  # (not for a create refused: the name was left listed)
        log.info("TOPIC(%s): created, %s", name, describe(placement))

    async def delete_topic(self, name: str) -> None:
        """``/topic/delete``: the registration keys and the placement, persisted with a
        tombstone that tells every node to delete its copy (the newest
        :data:`MAX_TOMBSTONES` are kept)."""
        self._check_leading()
        self.registry.delete_topic(name)
        self.liveness.forget(name)
        if self.placements.pop(name, None) is None and name in self.deleted:
            return
        self.deleted[name] = self.clock()
        for old in sorted(self.deleted, key=self.deleted.__getitem__)[:-MAX_TOMBSTONES]:
            del self.deleted[old]
        self._changed()
        await self.flush()

    def assignments(self, node: str) -> list[TopicAssignment]:
        """What ``node`` must hold (``/pnsq/assignments``), as saved: a decision still being
        saved may be rolled back, so it reaches the nodes only once it is on disk."""
        self.place_pending()
        registered = {
            topic
            for peer_id, peer in self.registry.peers.items()
            if peer.node_id == node
            for topic, _ in self.registry.peer_topics(peer_id)
        }
        return assignments_for(node, self.saved_placements.values(), registered)


def _names(value: object) -> frozenset[str]:
    return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()


def _sizes(value: object) -> dict[str, int]:
    """A report's ``behind`` (node -> bytes); absent (an older nsqd) or malformed: empty."""
    if not isinstance(value, dict):
        return {}
    return {
        str(node): size
        for node, size in value.items()
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0
    }


def new_topic_id() -> str:
    """The id of a new life of a topic (:attr:`TopicPlacement.topic_id`)."""
    return uuid.uuid4().hex


__all__ = [
    "Cluster",
    "Move",
    "MoveError",
    "PlacementError",
    "StoreError",
    "TopicMeta",
    "UnavailableError",
]
