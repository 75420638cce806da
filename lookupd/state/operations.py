"""The operator's changes to placed topics and to the nodes, as :class:`Cluster
<lookupd.state.cluster.Cluster>` makes them: youzan's ``/topic/meta/update``,
``/topic/partition/expand``, ``/topic/partition/move`` and ``/cluster/node/remove``. Each is
persisted before it returns; what needs the nodes' cooperation (moves, a new ``replicator``, a
drain) is then carried out by the failover loop (:mod:`lookupd.state.supervisor`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from trio.lowlevel import ParkingLot

from ..core.liveness import Liveness
from ..core.moves import Move, MoveError, check_move
from ..core.placement import PlacementError, TopicPlacement, copy_load, expand, leader_load
from ..core.switches import Switches
from .metadata import Metadata
from .store import StoreError

log = logging.getLogger("nsqlookupd.cluster")


class Operations(Metadata):
    """The changes (see the module doc); :class:`~lookupd.state.cluster.Cluster` provides the
    live view they are checked against."""

    liveness: Liveness
    offline: set[tuple[str, int]]
    events: ParkingLot
    clock: Callable[[], float]

    def live_nodes(self) -> list[str]:
        """Nodes of active pnsq peers (the cluster's registry)."""
        raise NotImplementedError

    def racks(self) -> dict[str, str]:
        """The rack of each node."""
        raise NotImplementedError

    def placeable_nodes(self) -> list[str]:
        """Live nodes that may take new copies: not being drained, and heard from within the
        heartbeat timeout (a node still registered but silent, hung or cut off, was given new
        partitions that were offline from their first moment)."""
        now = self.clock()
        return [
            n
            for n in self.live_nodes()
            if n not in self.removing and self.liveness.is_alive(n, now)
        ]

    async def update_meta(
        self,
        name: str,
        *,
        sync_every: int | None = None,
        retention_days: int | None = None,
        extend_support: bool | None = None,
        disable_channel_auto_create: bool | None = None,
        min_isr: int | None = None,
        unclean: bool | None = None,
        replica: int | None = None,
    ) -> TopicPlacement:
        """youzan's ``/topic/meta/update`` (a None keeps the value), persisted before
        returning; a new ``replica`` (``replicator``) is then reached by the failover loop
        (:mod:`lookupd.core.resize`). Raises KeyError for an unknown topic,
        :class:`PlacementError` (more copies than live nodes to take them),
        :class:`StoreError`."""
        self._check_leading()
        placement = self.placements[name]
        m = placement.meta
        nodes = len(self.placeable_nodes())
        if replica is not None and replica > max(m.replica, nodes) and not placement.pending:
            raise PlacementError(
                f"NOT_ENOUGH_NODES: replicator {replica} needs {replica} nsqd nodes, "
                f"{nodes} registered and not being removed"
            )
        meta = replace(
            m,
            replica=m.replica if replica is None else replica,
            sync_every=m.sync_every if sync_every is None else sync_every,
            retention_days=m.retention_days if retention_days is None else retention_days,
            extend_support=m.extend_support if extend_support is None else extend_support,
            disable_channel_auto_create=(
                m.disable_channel_auto_create
                if disable_channel_auto_create is None
                else disable_channel_auto_create
            ),
            min_isr=m.min_isr if min_isr is None else min_isr,
            unclean=m.unclean if unclean is None else unclean,
        )
        updated = await self._commit(placement, replace(placement, meta=meta))
        self.events.unpark_all()
        return updated

    async def remove_node(self, node: str, *, restore: bool = False) -> None:
        """youzan's ``/cluster/node/remove``: ``node`` is drained (its copies move elsewhere,
        :mod:`lookupd.core.resize`; it takes no new one), which is persisted before returning;
        ``restore``: it is not any more. Raises :class:`PlacementError` for a node lookupd
        does not know, :class:`StoreError`."""
        self._check_leading()
        before = dict(self.removing)
        known = node in self.removing or node in self.live_nodes() or node in self.placed_nodes()
        if not known:
            raise PlacementError("REMOVE_NODE_NOT_FOUND")
        if restore:
            if self.removing.pop(node, None) is None:
                return
        elif node not in self.removing:
            self.removing[node] = self.clock()
        else:
            return
        self._changed()
        try:
            await self.flush()
        except StoreError:
            self.removing = before
            self._changed()
            raise
        log.info("NODE(%s): %s", node, "kept" if restore else "being drained")
        self.events.unpark_all()

    async def set_switches(
        self, *, balance: bool | None = None, upgrading: bool | None = None
    ) -> Switches:
        """``/cluster/balance?enable=`` (``balance``) and ``/cluster/upgrade/begin`` and
        ``/done`` (``upgrading``): the switches as saved, persisted before returning (a switch
        left None is kept). Raises :class:`StoreError`."""
        self._check_leading()
        before = self.switches
        after = before
        if balance is not None:
            after = replace(after, balance=balance)
        if upgrading is not None and upgrading != (after.upgrading_since is not None):
            after = replace(after, upgrading_since=self.clock() if upgrading else None)
        if after == before:
            return after
        self.switches = after
        self._changed()
        try:
            await self.flush()
        except StoreError:
            self.switches = before
            self._changed()
            raise
        log.info("CLUSTER: switches %s", after.to_values() or "at their defaults")
        self.events.unpark_all()
        return after

    async def expand_topic(self, name: str, partition_num: int) -> TopicPlacement:
        """youzan's ``/topic/partition/expand``. Raises KeyError, :class:`PlacementError`,
        :class:`StoreError`."""
        self._check_leading()
        placement = self.placements[name]
        load, copies = leader_load(self.placements.values()), copy_load(self.placements.values())
        nodes = self.placeable_nodes()
        updated = expand(placement, partition_num, nodes, load, self.racks(), copies)
        return await self._commit(placement, updated)

    async def start_move(self, topic: str, partition: int, move: Move) -> Move:
        """youzan's ``/topic/partition/move``: ``move`` is checked, persisted and left to the
        failover loop (:mod:`lookupd.core.moves`); returns it as it will run. Raises KeyError
        for an unknown topic, :class:`MoveError`, :class:`StoreError`."""
        self._check_leading()
        placement = self.placements[topic]
        if not 0 <= partition < len(placement.partitions):
            raise MoveError("INVALID_ARG_TOPIC_PARTITION")
        now = self.clock()
        views = self.liveness.views(now)
        alive = [
            n
            for n in self.placeable_nodes()
            if self.liveness.is_alive(n, now) and not views[n].leaving
        ]
        checked = check_move(
            placement.partitions[partition],
            move,
            alive=alive,
            racks=self.racks(),
            offline=(topic, partition) in self.offline,
            busy=placement.move(partition) is not None,
        )
        await self._commit(placement, placement.with_move(partition, checked))
        self.events.unpark_all()
        return checked

    async def _commit(self, old: TopicPlacement, new: TopicPlacement) -> TopicPlacement:
        self.placements[new.name] = new
        self._changed()
        try:
            await self.flush()
        except StoreError:
            self.placements[new.name] = old
            self._changed()
            raise
        log.info("TOPIC(%s): updated, %s", new.name, describe(new))
        return new


def describe(placement: TopicPlacement) -> str:
    """The log's summary of a placement: its partitions' leaders."""
    if placement.pending:
        return "pending (no node yet)"
    leaders = ", ".join(f"{i}:{p.leader}" for i, p in enumerate(placement.partitions))
    return f"{len(placement.partitions)} partition(s) [{leaders}]"
