"""The failover loop: lookupd's decisions (:func:`lookupd.core.decide.decide`) carried out.

Whenever something a decision depends on happens (a node connects, drops, reports progress or
announces it is leaving), and every :data:`TICK` seconds for heartbeats that stop, the
supervisor builds the view (nodes from :class:`~lookupd.core.liveness.Liveness`, partitions from the
placements) and asks :func:`decide` — unless nothing :func:`decide` reads changed since it last
answered that nothing must change (:func:`inputs_of`: the placements, the leaders' reports, the
offline partitions, each node's liveness at that moment, racks, drains and switches). Telling
whether anything changed costs time in the topics and nodes only, so a quiet cluster of many
partitions costs lookupd nothing; and a decision costs time in the topics and in what it may
touch: :class:`Views` keeps each topic's partitions from one decision to the next while its
placement, offline partitions and reports stay the same, and :func:`decide` looks only at the
partitions that are not quiet (:mod:`lookupd.core.quiet`).
Changes are written into the placements and persisted before anyone hears of them: nodes learn
them through the assignments long-poll, which only hands out what is on disk; if the store
fails, the placements are put back and the decision is taken again on the next tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from itertools import chain

import trio

from protocol.lookup import PartitionAssignment

from ..core.decide import Change, PartitionView, Settings, View, decide, liveness_key
from ..core.health import Health
from ..core.placement import TopicPlacement
from ..core.quiet import Index, candidates
from ..core.view import Counts
from .cluster import Cluster
from .store import StoreError

log = logging.getLogger("nsqlookupd.failover")

TICK = 0.1  # seconds between looks when nothing happens (heartbeats are 0.5 s apart)
#: a timer this late means lookupd's event loop did not run meanwhile (a long computation, or
#: the machine's other load): the nodes' heartbeats waited unread, and that time is excused
STALL = 0.5

__all__ = ["Supervisor", "Views", "inputs_of", "view_of"]


@dataclass(frozen=True, slots=True)
class _Topic:
    """One topic's partitions as :func:`decide` sees them, and their :class:`Index`; kept
    while the topic's placement (the same object), offline partitions and reports are."""

    placement: TopicPlacement
    offline: frozenset[int]
    revision: int  # the topic's reports (:meth:`~lookupd.core.liveness.Liveness.revision`)
    partitions: tuple[PartitionView, ...]
    index: Index


class Views:
    """The partitions' views, built per topic and kept from one decision to the next while
    the topic's inputs stay the same: a decision costs time in the topics and in the
    partitions it may touch, not in every partition (:mod:`lookupd.core.quiet`)."""

    def __init__(self) -> None:
        self._topics: dict[str, _Topic] = {}

    def view(self, cluster: Cluster, settings: Settings, now: float) -> View:
        """What :func:`decide` sees now, with its candidates and counts."""
        offline: dict[str, set[int]] = {}
        for name, number in cluster.offline:
            offline.setdefault(name, set()).add(number)
        topics = {}
        for name, placement in cluster.placements.items():
            kept = self._topics.get(name)
            down = frozenset(offline.get(name, ()))
            revision = cluster.liveness.revision(name)
            if (
                kept is None
                or kept.placement is not placement
                or kept.offline != down
                or kept.revision != revision
            ):
                parts = _partitions(cluster, placement, down)
                kept = _Topic(placement, down, revision, parts, Index.of(parts))
            topics[name] = kept
        self._topics = topics
        runs, start = [], 0
        for topic in topics.values():
            runs.append((start, topic.index))
            start += len(topic.partitions)
        view = View(
            cluster.liveness.views(now),
            tuple(chain.from_iterable(t.partitions for t in topics.values())),
            settings,
            cluster.racks(),
            frozenset(cluster.removing),
            balance=cluster.switches.balancing(settings.auto_balance),
            upgrading=cluster.switches.upgrading_since is not None,
            counts=Counts.total(t.index.counts for t in topics.values()),
        )
        health = Health(view.nodes, settings, now, view.removing, view.upgrading)
        return replace(view, candidates=candidates(runs, health.spare))


def _partitions(
    cluster: Cluster, placement: TopicPlacement, offline: frozenset[int]
) -> tuple[PartitionView, ...]:
    partitions = []
    for number, part in enumerate(placement.partitions):
        progress = cluster.liveness.current(placement.name, number, part.leader, part.epoch)
        partitions.append(
            PartitionView(
                topic=placement.name,
                partition=number,
                leader=part.leader,
                replicas=part.replicas,
                isr=part.in_sync,
                epoch=part.epoch,
                caught_up=progress.caught_up if progress else frozenset(),
                lagging=progress.lagging if progress else frozenset(),
                confirmed=progress.confirmed if progress else frozenset(),
                joined=cluster.liveness.joined.get((placement.name, number), frozenset()),
                unclean=placement.meta.unclean,
                offline=number in offline,
                move=placement.move(number),
                wanted=placement.meta.replica,
            )
        )
    return tuple(partitions)


def view_of(cluster: Cluster, settings: Settings, now: float) -> View:
    """What :func:`decide` sees now (built afresh: :class:`Views` keeps it)."""
    return Views().view(cluster, settings, now)


def inputs_of(cluster: Cluster, settings: Settings, now: float) -> tuple[object, ...]:
    """What :func:`view_of` and :func:`decide` read, in a form that compares in time
    proportional to the topics and nodes: the placements by identity (a change replaces a
    topic's :class:`TopicPlacement`), a counter of the reports that changed, the offline
    partitions, and each node's liveness at ``now`` (:func:`liveness_key`)."""
    upgrading = cluster.switches.upgrading_since is not None
    return (
        cluster.leading,
        tuple((name, _Same(p)) for name, p in cluster.placements.items()),
        cluster.liveness.reports_changed,
        frozenset(cluster.offline),
        liveness_key(cluster.liveness.views(now), settings, now, upgrading),
        tuple(sorted(cluster.racks().items())),
        frozenset(cluster.removing),
        cluster.switches.balancing(settings.auto_balance),
        upgrading,
    )


class _Same:
    """Compares by identity (and holds its object, so the identity is not reused)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


class Supervisor:
    """Runs :func:`decide` and commits its changes (see the module doc)."""

    def __init__(self, cluster: Cluster, settings: Settings) -> None:
        self.cluster = cluster
        self.settings = settings
        self.failovers = 0  # leader changes committed since the start
        self.decisions = 0  # times decide() ran
        self.views = Views()
        self.stalls = 0  # event loop stalls excused (:meth:`watch_stalls`)
        #: what decide() read when it last answered that nothing must change
        self._settled: tuple[object, ...] | None = None
        #: when the watch is to look next (:meth:`excuse_stall`); None: not watched
        self._due: float | None = None
        self._seen = 0.0  # when the event loop was last seen running

    async def run(self) -> None:
        """Decide until cancelled (and excuse the nodes lookupd's own stalls)."""
        self._settled = None  # HA: a new term starts from what the last leader saved
        self._due = None  # ... and its watch from now, not from the last term's last look
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_stalls)
            while True:
                await self.step()
                with trio.move_on_after(TICK):
                    await self.cluster.events.park()

    async def watch_stalls(self) -> None:
        """Sleep :data:`TICK` at a time and look for a stall (:meth:`excuse_stall`) on every
        wake-up: a hung lookupd must not fail over nodes whose heartbeats it did not read."""
        clock = self.cluster.clock
        self._seen = clock()
        while True:
            self._due = clock() + TICK
            await trio.sleep(TICK)
            self.excuse_stall(clock())

    def excuse_stall(self, now: float) -> None:
        """The event loop is seen running at ``now``: more than :data:`STALL` after the watch
        was to look means it did not run meanwhile, and the nodes up when it was last seen
        running are excused the time since (:meth:`~lookupd.core.liveness.Liveness.excuse`).
        :meth:`step` looks too, before it decides: after a stall the watch and the supervisor
        wake together, in either order, and a decision taken first would fail over the nodes
        the watch was about to excuse (and the excuse would then bring them back). A stall
        is excused once, by whichever looks first."""
        if self._due is None:
            return  # not watched (a test driving step() alone)
        late = now - self._due
        unseen = now - self._seen
        self._seen = max(self._seen, now)
        if late > STALL:
            self._due = now  # excused: the other look finds nothing late
            self.cluster.liveness.excuse(unseen, now)
            self.stalls += 1
            log.warning("lookupd did not run for %.1f s: the nodes' heartbeats are excused", unseen)

    async def step(self) -> list[Change]:
        """One decision, committed; returns what changed."""
        cluster = self.cluster
        now = cluster.clock()
        self.excuse_stall(now)
        inputs = inputs_of(cluster, self.settings, now)
        if inputs == self._settled:
            return []
        self.decisions += 1
        changes = decide(self.views.view(cluster, self.settings, now), now)
        if not changes:
            # a leader's report confirmed members that joined its ISR: saved (below, with
            # what else changed), so that a lookupd started later knows they hold everything
            if cluster.keep_joined():
                try:
                    await cluster.flush()
                except StoreError as exc:
                    log.error("confirmed ISR members not saved (retrying): %s", exc)
                    return []
            self._settled = inputs
            return []
        self._settled = None
        before = dict(cluster.placements)
        offline_before = set(cluster.offline)
        for change in changes:
            self._apply(change)
        cluster.keep_joined()  # members that joined the ISR now: saved with it
        cluster.note_changed()
        try:
            await cluster.flush()
        except StoreError as exc:
            cluster.placements.clear()
            cluster.placements.update(before)
            cluster.offline = offline_before
            cluster.note_changed()
            log.error("failover decision not saved (retrying): %s", exc)
            return []
        for change in changes:
            log.warning(
                "PARTITION(%s/%d): leader %s epoch %d isr [%s] replicas [%s]%s: %s",
                change.topic,
                change.partition,
                change.leader,
                change.epoch,
                ",".join(change.isr),
                ",".join(change.replicas),
                " OFFLINE" if change.offline else "",
                change.reason,
            )
        return changes

    def _apply(self, change: Change) -> None:
        cluster = self.cluster
        placement: TopicPlacement = cluster.placements[change.topic]
        old = placement.partitions[change.partition]
        if change.epoch != old.epoch:  # (a new epoch voids the old leader's report)
            self.failovers += 1
        elif set(change.replicas) != set(old.replicas) or change.renewed:
            stay = (frozenset(change.replicas) & frozenset(old.replicas)) - change.renewed
            cluster.liveness.replicas_changed(change.topic, change.partition, stay)
        if change.isr != old.in_sync or change.epoch != old.epoch:
            new_epoch = change.epoch != old.epoch
            args = (change.topic, change.partition, old.in_sync, change.isr, new_epoch)
            cluster.liveness.isr_changed(*args)
        updated = placement.with_partition(
            change.partition,
            PartitionAssignment(change.leader, change.replicas, change.epoch, change.isr),
        )
        if change.move != placement.move(change.partition):
            updated = updated.with_move(change.partition, change.move)
        cluster.placements[change.topic] = updated
        key = (change.topic, change.partition)
        if change.offline:
            cluster.offline.add(key)
        else:
            cluster.offline.discard(key)
