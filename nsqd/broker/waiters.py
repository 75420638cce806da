"""Who waits for a leader's partitions: publishers for their records to reach every in-sync
follower (a task, :meth:`ReplicationWaiters.wait`, or a call, :meth:`~ReplicationWaiters.
when_replicated`), and the leader's streams to its followers for new records or their next
tick.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Literal
from weakref import WeakKeyDictionary, WeakSet

import trio
from trio.lowlevel import ParkingLot

from ..core.errors import NotLeaderError
from .partition import Partition

__all__ = ["BEAT_DUE", "BEAT_TICKS", "STREAM_TICK", "ReplicationWaiters"]


#: seconds between the streams' looks at their channels (see :class:`ReplicationWaiters`)
STREAM_TICK = 0.2
#: ticks between two heartbeats of a stream: idle, it sends the high-watermark every 2 s (every
#: second before: the heartbeats were half of an idle node's work at 1,000 partitions led)
BEAT_TICKS = 10
#: seconds without a frame to a follower node after which a stream to it sends a heartbeat (a
#: tick short of the interval: woken by the ticks, each wake-up a little late, the next on time)
BEAT_DUE = STREAM_TICK * (BEAT_TICKS - 1)


class ReplicationWaiters:
    """Publishers waiting for their records to reach every in-sync follower, and the leader's
    streams to its followers waiting for new records.

    An idle stream also wakes on its own, to send a heartbeat or look at its channels. One
    timer (:meth:`run_ticks`, every :data:`STREAM_TICK` seconds) wakes them all, instead of a
    timeout per stream: a node leading thousands of partitions spent a third of its idle time
    on the timeouts' deadlines and cancellations. A stream that looks at its channels wakes at
    every tick; any other once every :data:`BEAT_TICKS` ticks, at the tick of its own slot (so
    the heartbeats of thousands of streams are spread over the ticks, not sent in one burst).
    A stream whose follower counts silence per node (``beats_for``) is woken at its slot only
    when that node is due a heartbeat, and then only one such stream per node and tick: an
    idle node leading thousands of partitions followed by a few nodes woke every stream once a
    heartbeat interval for the one heartbeat each node needed.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock  # the clock of :attr:`sent_to`
        self._lots: WeakKeyDictionary[Partition, ParkingLot] = WeakKeyDictionary()
        self._data: WeakKeyDictionary[Partition, ParkingLot] = WeakKeyDictionary()
        #: partitions whose streams wait to look at their channels at the next tick
        self._looking: WeakKeyDictionary[Partition, None] = WeakKeyDictionary()
        #: the partitions whose idle streams wake at each tick of every BEAT_TICKS (slots given
        #: in turn, so they stay even; a tick looks at its own slot's, not at every stream)
        self._slots: list[WeakSet[Partition]] = [WeakSet() for _ in range(BEAT_TICKS)]
        self._given = 0  # slots given so far
        self._ticks = 0
        #: when a frame last went to each follower node, on any of the streams to it (monotonic):
        #: a stream sends a heartbeat only when none did for a heartbeat interval
        self.sent_to: dict[str, float] = {}
        #: per partition, the calls waiting for its high-watermark (:meth:`when_replicated`)
        self._watches: WeakKeyDictionary[Partition, deque[_Watch]] = WeakKeyDictionary()
        #: per partition, the waiting streams' offers to send new records themselves
        self._pushes: WeakKeyDictionary[Partition, set[Callable[[], bool]]] = WeakKeyDictionary()
        #: per partition, its parked streams by the follower node their heartbeats count for
        #: (None: a stream that sends its own)
        self._parked: WeakKeyDictionary[Partition, Counter[str | None]] = WeakKeyDictionary()

    def _lot(self, partition: Partition) -> ParkingLot:
        lot = self._lots.get(partition)
        if lot is None:
            lot = self._lots[partition] = ParkingLot()
        return lot

    def appended(self, partition: Partition) -> None:
        """New records in ``partition``, or an ordered channel's state changed: wakes the
        streams to its followers, unless each of them sent the new records itself (see
        :meth:`wait_data`)."""
        lot = self._data.get(partition)
        if lot is None:
            return
        pushes = self._pushes.get(partition)
        if pushes:
            sent = [push() for push in list(pushes)]  # offered to every stream, none skipped
            if all(sent) and len(sent) == len(lot):  # and no stream waits without a push
                return
        lot.unpark_all()

    async def wait_data(
        self,
        partition: Partition,
        offset: int,
        *,
        look: bool = False,
        push: Callable[[], bool] | None = None,
        beats_for: str | None = None,
    ) -> None:
        """Return once ``partition``'s log reaches past ``offset``, on a role change, or at
        the next tick (``look``) or the next tick of the partition's slot (otherwise): callers
        re-check. With ``push``, records appended meanwhile are first offered to it, from the
        appending task (:meth:`appended`): when it returns True (it sent them) the waiting
        stream is not woken for them. With ``beats_for`` (a follower node that counts silence
        per node), the slot's tick wakes it only when that node is due a heartbeat."""
        if partition.log.end_offset > offset:
            return
        lot = self._data.get(partition)
        if lot is None:
            lot = self._data[partition] = ParkingLot()
            self._slots[self._given % BEAT_TICKS].add(partition)
            self._given += 1
        if look:
            self._looking[partition] = None
        parked = self._parked.get(partition)
        if parked is None:
            parked = self._parked[partition] = Counter()
        parked[beats_for] += 1
        pushes = None
        if push is not None:
            pushes = self._pushes.get(partition)
            if pushes is None:
                pushes = self._pushes[partition] = set()
            pushes.add(push)
        try:
            await lot.park()
        finally:
            parked[beats_for] -= 1
            if not parked[beats_for]:
                del parked[beats_for]
            if pushes is not None:
                pushes.discard(push)

    def beat_due(self, node: str, since: float, now: float) -> bool:
        """Whether a stream to ``node`` that last sent at ``since`` sends its heartbeat at
        ``now``: nothing went to the node, on any stream, for :data:`BEAT_DUE` seconds."""
        return now - self.sent_to.get(node, since) >= BEAT_DUE

    def tick(self) -> None:
        """Wake the streams due at this tick (see the class doc)."""
        self._ticks += 1
        data, looking, parked = self._data, self._looking, self._parked
        for partition in looking:
            lot = data.get(partition)
            if lot is not None:
                lot.unpark_all()
        now = self._clock()
        claimed: set[str] = set()  # nodes whose heartbeat a stream woken at this tick sends
        for partition in self._slots[self._ticks % BEAT_TICKS]:
            nodes = parked.get(partition)
            if partition in looking or not nodes:
                continue
            if None in nodes or self._claim(nodes, now, claimed):
                data[partition].unpark_all()
        looking.clear()

    def _claim(self, nodes: Counter[str | None], now: float, claimed: set[str]) -> bool:
        """Whether a node of ``nodes`` is due a heartbeat that no stream woken at this tick
        sends yet (it is then claimed)."""
        woken = False
        for node in nodes:
            if node is not None and node not in claimed and self.beat_due(node, -math.inf, now):
                claimed.add(node)
                woken = True
        return woken

    async def run_ticks(self) -> None:
        """The streams' one timer (runs until cancelled)."""
        while True:
            await trio.sleep(STREAM_TICK)
            self.tick()

    async def wait(self, partition: Partition, end: int, epoch: int) -> None:
        """Return once the high-watermark reaches ``end`` while this node leads the partition
        under ``epoch`` (the epoch the records before ``end`` were appended in). Raises
        :class:`NotLeaderError` once it does not: the publish is then not acknowledged (a new
        leader may not have it)."""
        while (outcome := _replicated(partition, end, epoch)) is None:
            await self._lot(partition).park()
        if outcome is not True:
            raise outcome

    def when_replicated(
        self, partition: Partition, end: int, epoch: int, done: Callable[[Exception | None], None]
    ) -> Literal[True] | NotLeaderError | None:
        """:meth:`wait` without a task: True when it would return at once, the error it would
        raise at once; else None, and ``done`` is called once it would return (with None) or
        raise (with the error), from the :meth:`wake` that tells it, in the task that moved
        the high-watermark or the role. The calls come in the order they were asked for;
        ``done`` must not raise."""
        outcome = _replicated(partition, end, epoch)
        if outcome is not None:
            return outcome
        watches = self._watches.get(partition)
        if watches is None:
            watches = self._watches[partition] = deque()
        watches.append((end, epoch, done))
        return None

    async def wait_cursor(
        self, partition: Partition, channel: str, mark: dict[str, int], gone: Callable[[], bool]
    ) -> bool:
        """Return True once every in-sync follower applied a state of ``channel`` in
        ``partition`` built after ``mark`` was taken
        (:meth:`~nsqd.core.cursor_frames.CursorFrames.mark`; the state is pushed to them at
        once), False once ``gone()`` says the channel was deleted meanwhile (its deletion
        wakes the wait: :meth:`wake`). Raises :class:`NotLeaderError` if the node stops leading
        the partition first."""
        state = partition.state
        epoch = state.epoch
        frames = state.cursor_frames
        while not frames.applied_since(channel, mark, state.followers):
            if gone():
                return False
            if not state.leads or state.epoch != epoch:
                raise NotLeaderError("leadership moved before the ack was replicated")
            _push_cursor(partition, channel)
            self.appended(partition)
            await self._lot(partition).park()
        return True

    async def wait_change(self, partition: Partition) -> None:
        """Return at the next :meth:`wake` of ``partition`` (a follower's acknowledgement, a
        role change); callers bound the wait and re-check."""
        await self._lot(partition).park()

    def wake(self, partition: Partition, *, streams: bool = True) -> None:
        """The high-watermark or the role of ``partition`` changed: parked publishes look
        again, the calls of :meth:`when_replicated` it settles are made, and (unless
        ``streams`` is False) the streams to its followers look again."""
        for lots in (self._lots, self._data) if streams else (self._lots,):
            lot = lots.get(partition)
            if lot is not None:
                lot.unpark_all()
        watches = self._watches.get(partition)
        while watches:
            end, epoch, done = watches[0]
            outcome = _replicated(partition, end, epoch)
            if outcome is None:
                break
            watches.popleft()
            done(None if outcome is True else outcome)


def _push_cursor(partition: Partition, channel: str) -> None:
    """``channel``'s state in ``partition`` goes to every in-sync follower at once (each
    stream takes its node's share: :attr:`Partition.cursor_push`); the shares of nodes no
    longer in sync are dropped."""
    followers = partition.state.followers
    push = partition.cursor_push
    for node in followers:
        push.setdefault(node, set()).add(channel)
    if len(push) > len(followers):
        for node in [n for n in push if n not in followers]:
            del push[node]


#: a call waiting for a high-watermark: the end it waits for, under which epoch, the call
_Watch = tuple[int, int, Callable[[Exception | None], None]]


def _replicated(
    partition: Partition, end: int, epoch: int
) -> Literal[True] | NotLeaderError | None:
    """True once the high-watermark reached ``end`` under ``epoch`` while this node leads the
    partition; the error once it does not lead it under ``epoch``; None while waiting."""
    state = partition.state
    if not state.leads or state.epoch != epoch:
        return NotLeaderError("leadership moved before the publish was replicated")
    if state.high_watermark >= end:
        return True
    return None
