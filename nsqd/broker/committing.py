"""Group commit across connections: the single-message PUBs that arrive in one turn of the
event loop, from any number of connections, share one append per (topic, partition).

A connection's gathered PUBs already share one append (``nsqd.tcp.publishing``); clients that
wait for each reply send one PUB per turn each, so without this every PUB paid a whole append
(records, encoding, cache, index, a ``pwrite``). Here each connection's task hands its entries
over and waits; the committer task, woken by the first hand-over of a turn, runs after every
task that became ready in that turn, appends each (topic, partition)'s entries in the order
they were handed over and wakes every publisher with its own records. The append itself is
:meth:`Broker.publish`, unchanged: the replies still wait for it (and then, as before, for
followers and fsync), and a failed append fails every publisher that shared it, each with its
own copy of the error; nothing of it is acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import outcome
import trio
from trio.lowlevel import Abort, ParkingLot, RaiseCancelT, Task

from ..storage.batch import BodyBatch, join
from ..storage.record import NewRecord, Record

_Key = tuple[str, int | None]  # topic, partition (None: the broker picks)
#: :meth:`Broker.publish`: append entries to a topic's partition, return their records
Append = Callable[[str, Sequence[NewRecord], int | None], Sequence[Record]]


class _Handover:
    """One connection's entries waiting for the committer."""

    __slots__ = ("entries", "task")

    def __init__(self, entries: BodyBatch, task: Task) -> None:
        self.entries = entries
        self.task = task


class GroupCommit:
    """Appends the PUBs handed over in one loop turn together. Run :meth:`run` in the broker's
    nursery; until it runs (or after it stopped), :meth:`publish` appends at once."""

    def __init__(self, append: Append) -> None:
        self._append = append
        self._pending: dict[_Key, list[_Handover]] = {}
        self._wake = ParkingLot()
        self._running = False
        self.appends = 0  # appends made for handed-over PUBs (tests read these two)
        self.publishes = 0  # hand-overs they served

    async def publish(
        self, topic: str, entries: BodyBatch, partition: int | None
    ) -> Sequence[Record]:
        """Append ``entries`` to ``topic`` (``partition``, or the one the broker picks) with
        whatever else is handed over in this turn; return their records. Raises what
        :meth:`Broker.publish` raises."""
        if not self._running:
            await trio.lowlevel.checkpoint()
            return self._append(topic, entries, partition)
        key = (topic, partition)
        handover = _Handover(entries, trio.lowlevel.current_task())
        if not self._pending:
            self._wake.unpark_all()
        group = self._pending.setdefault(key, [])
        group.append(handover)

        def abort(_: RaiseCancelT) -> Abort:  # cancelled before the committer ran: withdraw
            group.remove(handover)
            if not group and self._pending.get(key) is group:
                del self._pending[key]
            return Abort.SUCCEEDED

        records: Sequence[Record] = await trio.lowlevel.wait_task_rescheduled(abort)
        return records

    async def run(self) -> None:
        """Commit each turn's hand-overs until cancelled (from then on, :meth:`publish`
        appends at once)."""
        self._running = True
        try:
            while True:
                await self._wake.park()
                self._commit_all()
        finally:
            self._running = False
            # a hand-over made after the cancellation reached this task, before it ran
            self._commit_all()

    def _commit_all(self) -> None:
        pending, self._pending = self._pending, {}
        for (topic, partition), group in pending.items():
            self._commit(topic, partition, group)

    def _commit(self, topic: str, partition: int | None, group: list[_Handover]) -> None:
        reschedule = trio.lowlevel.reschedule
        entries = join([handover.entries for handover in group])
        try:
            records = self._append(topic, entries, partition)
        # Any error goes to the publishers, as if each had appended itself (an unexpected one
        # ends their connections, not the committer); each gets its own copy to raise.
        except Exception as exc:  # noqa: BLE001
            for handover in group:
                reschedule(handover.task, outcome.Error(own_copy(exc)))
            return
        self.appends += 1
        self.publishes += len(group)
        start = 0
        for handover in group:
            end = start + len(handover.entries)
            reschedule(handover.task, outcome.Value(records[start:end]))
            start = end


def own_copy(exc: Exception) -> Exception:
    """A copy of ``exc`` for one publisher to raise (tracebacks are per instance), made without
    calling ``__init__``, whose parameters need not be ``args`` (``ExitingError()``)."""
    cls = type(exc)
    # what pickling would pass (an OSError's filename is not in args); __new__ only stores it
    constructor_args = exc.__reduce__()[1]
    error = cls.__new__(cls, *constructor_args)
    error.args = exc.args
    error.__dict__.update(exc.__dict__)
    error.__cause__ = exc
    return error
