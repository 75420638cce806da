"""Which pnsq nodes are alive, as lookupd's failover decisions need it. Pure: no I/O, no clock
(every call takes ``now``), no Trio.

A node (``broadcast_address:tcp_port``) is *connected* while at least one registration
connection of it is open; its *heartbeat* is its last IDENTIFY, PING, REGISTER or UNREGISTER
on such a connection. Nothing else is: a leader's progress report comes over HTTP, another
route than the registration, and a node whose registration went silent (a link cut between it
and lookupd) would otherwise be taken for up again by a report, given back its place in the
in-sync sets and then its leaderships, which it cannot serve. When lookupd starts, every node
its placements name is given one heartbeat at ``start + grace`` minus the heartbeat timeout:
nodes reconnect after a lookupd restart (their backoff reaches 5 s), and taking them for dead
at once would move every leadership for nothing. For the same reason a stall of lookupd's own
event loop is not counted against the nodes that were up when it began
(:meth:`Liveness.excuse`): their heartbeats were sent, lookupd was not there to read them.

A node is *up since* the time it last went from down (never seen, disconnected, or silent for
longer than the heartbeat timeout) to up; balancing waits for a node that came back
(:attr:`lookupd.core.view.Settings.balance_grace`).

The leaders' progress reports (which followers are caught up, which lag, how many bytes each
lacks) are kept here too, each with the epoch it was made under; only a report by a
partition's current leader under its current epoch counts (:meth:`Liveness.current`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .decide import NodeView
from .view import isr_moved

__all__ = ["Liveness", "Progress"]


@dataclass(slots=True)
class _Node:
    connections: int
    last_heartbeat: float
    down_since: float | None
    leaving: bool = False
    seeded: bool = False  # known from the placements only, not connected since the start
    up_since: float = float("-inf")  # when it last came up (see the module doc)


@dataclass(frozen=True, slots=True)
class Progress:
    """One leader's report on one partition."""

    reporter: str
    epoch: int
    caught_up: frozenset[str]
    lagging: frozenset[str]
    #: followers in the in-sync set the leader applies, holding every acknowledged message
    confirmed: frozenset[str] = frozenset()
    #: bytes of the log each replica lacks (those the leader could count; empty from an nsqd
    #: that does not report them). Not compared: a change of bytes alone decides nothing
    behind: Mapping[str, int] = field(default_factory=dict, compare=False)


class Liveness:
    """Connections, heartbeats and leaving flags of the nodes, and the leaders' reports."""

    def __init__(self, heartbeat_timeout: float, start_grace: float) -> None:
        self.heartbeat_timeout = heartbeat_timeout
        self.start_grace = start_grace
        self._nodes: dict[str, _Node] = {}
        self.progress: dict[tuple[str, int], Progress] = {}
        #: bumped whenever a report differs from the one it replaces (bytes behind aside)
        self.reports_changed = 0
        #: per topic, bumped whenever its reports or joined members change (:meth:`revision`)
        self._revisions: dict[str, int] = {}
        #: per partition, the ISR members lookupd added under its epoch that the leader has not
        #: confirmed since (``PartitionView.joined``: not promoted; saved with the placements,
        #: :meth:`restore_joined` at a start)
        self.joined: dict[tuple[str, int], frozenset[str]] = {}

    def seed(self, nodes: Iterable[str], now: float) -> None:
        """lookupd just started: give the placed nodes ``start_grace`` to reconnect."""
        beat = now + self.start_grace - self.heartbeat_timeout
        for node in nodes:
            self._nodes.setdefault(node, _Node(0, beat, None, seeded=True, up_since=now))

    def _up(self, entry: _Node, now: float) -> bool:
        return (entry.seeded or entry.connections > 0) and (
            now - entry.last_heartbeat <= self.heartbeat_timeout
        )

    def connected(self, node: str, now: float) -> None:
        """A registration connection of ``node`` identified itself."""
        entry = self._nodes.get(node)
        if entry is None or entry.seeded:
            self._nodes[node] = _Node(1, now, None, up_since=now)
            return
        if not self._up(entry, now):
            entry.up_since = now
        entry.connections += 1
        entry.last_heartbeat = now
        entry.down_since = None
        entry.leaving = False

    def heartbeat(self, node: str, now: float) -> None:
        """Traffic on a registration connection of ``node`` (PING, REGISTER, UNREGISTER)."""
        entry = self._nodes.get(node)
        if entry is None or entry.seeded:
            return
        if not self._up(entry, now):
            entry.up_since = now  # silent past the timeout, and back
        entry.last_heartbeat = now

    def excuse(self, seconds: float, now: float) -> None:
        """lookupd itself did not run for ``seconds`` up to ``now`` (its event loop was stalled
        or starved): the heartbeats that arrived meanwhile were not read, so that time does
        not count as the silence of the nodes that were up when the stall began: their
        heartbeats move ``seconds`` later (never past ``now``). A node already down then
        (disconnected, or silent past the timeout: lookupd may have failed it over) stays
        down: only its own traffic brings it back."""
        began = now - seconds
        for entry in self._nodes.values():
            if self._up(entry, began):
                entry.last_heartbeat = min(
                    entry.last_heartbeat + seconds, max(entry.last_heartbeat, now)
                )

    def disconnected(self, node: str, now: float) -> None:
        entry = self._nodes.get(node)
        if entry is None or entry.seeded:
            return
        entry.connections = max(0, entry.connections - 1)
        if not entry.connections:
            entry.down_since = now

    def leaving(self, node: str) -> bool:
        """``node`` announced a clean shutdown; False if it is not connected."""
        entry = self._nodes.get(node)
        if entry is None or not entry.connections:
            return False
        entry.leaving = True
        return True

    def report(self, topic: str, partition: int, progress: Progress) -> None:
        """A leader's report (the caller checked it against the placement)."""
        key = (topic, partition)
        if self.progress.get(key) != progress:
            self._changed(topic)
        self.progress[key] = progress
        joined = self.joined.get(key)
        if joined is not None and joined & progress.confirmed:
            self._set_joined(key, joined - progress.confirmed)

    def replicas_changed(self, topic: str, partition: int, stay: frozenset[str]) -> None:
        """The partition's replicas changed under the same epoch: its report speaks only for
        the replicas in ``stay`` (those before and after). A node that left, or joined (a copy
        removed and added again, empty), is no one's caught-up or confirmed follower until the
        leader says so again: an older report naming it must not put it back in the ISR, nor
        end a move whose target it is."""
        progress = self.progress.get((topic, partition))
        if progress is None:
            return
        self.progress[(topic, partition)] = Progress(
            progress.reporter,
            progress.epoch,
            progress.caught_up & stay,
            progress.lagging & stay,
            progress.confirmed & stay,
            {node: size for node, size in progress.behind.items() if node in stay},
        )
        self._changed(topic)

    def isr_changed(
        self,
        topic: str,
        partition: int,
        before: tuple[str, ...],
        after: tuple[str, ...],
        epoch: bool,
    ) -> None:
        """The partition's in-sync set went from ``before`` to ``after`` (leader first), under a
        new epoch if ``epoch``: its joined members and its report's confirmed ones as
        :func:`~.view.isr_moved` says (a new epoch's report is another leader's: the old one
        is left to :meth:`current` to void)."""
        key = (topic, partition)
        progress = self.progress.get(key)
        confirmed = progress.confirmed if progress is not None else frozenset()
        joined, kept = isr_moved(self.joined.get(key, frozenset()), confirmed, before, after, epoch)
        if not epoch and progress is not None and kept != progress.confirmed:
            self.progress[key] = replace(progress, confirmed=kept)
            self._changed(topic)
        self._set_joined(key, joined)

    def restore_joined(self, joined: Mapping[tuple[str, int], frozenset[str]]) -> None:
        """The joined members as saved replace these (lookupd started, or took over as the
        leader lookupd)."""
        for key in self.joined.keys() | joined.keys():
            self._set_joined(key, joined.get(key, frozenset()))

    def _set_joined(self, key: tuple[str, int], joined: frozenset[str]) -> None:
        if joined == self.joined.get(key, frozenset()):
            return
        if joined:
            self.joined[key] = joined
        else:
            self.joined.pop(key, None)
        self._revisions[key[0]] = self._revisions.get(key[0], 0) + 1

    def _changed(self, topic: str) -> None:
        self.reports_changed += 1
        self._revisions[topic] = self._revisions.get(topic, 0) + 1

    def revision(self, topic: str) -> int:
        """Moves whenever a report on one of ``topic``'s partitions, or its joined members,
        change: a caller keeping what it built from them knows when to build again."""
        return self._revisions.get(topic, 0)

    def forget(self, topic: str) -> None:
        """The topic was deleted: its partitions' reports go with it."""
        for key in [key for key in self.progress if key[0] == topic]:
            del self.progress[key]
        for key in [key for key in self.joined if key[0] == topic]:
            del self.joined[key]
        self._revisions[topic] = self._revisions.get(topic, 0) + 1

    def current(self, topic: str, partition: int, leader: str, epoch: int) -> Progress | None:
        """The report on ``partition`` if ``leader`` made it under ``epoch`` (the partition's
        leader and epoch now), else None: an older leader's word is stale."""
        progress = self.progress.get((topic, partition))
        if progress is None or progress.reporter != leader or progress.epoch != epoch:
            return None
        return progress

    def views(self, now: float) -> Mapping[str, NodeView]:
        """Every known node as :func:`lookupd.core.decide.decide` sees it."""
        out = {}
        for node, entry in self._nodes.items():
            if entry.seeded:
                alive = now - entry.last_heartbeat <= self.heartbeat_timeout
                down = None if alive else entry.last_heartbeat + self.heartbeat_timeout
                out[node] = NodeView(alive, entry.last_heartbeat, down, up_since=entry.up_since)
            else:
                out[node] = NodeView(
                    entry.connections > 0,
                    entry.last_heartbeat,
                    entry.down_since,
                    entry.leaving,
                    entry.up_since,
                )
        return out

    def is_alive(self, node: str, now: float) -> bool:
        entry = self._nodes.get(node)
        return entry is not None and self._up(entry, now)
