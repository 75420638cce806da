"""The state of a channel's cursor over one partition log (see :mod:`.cursor` for what each
part means): what :class:`~.taking.Taking` reads and moves when it takes messages, and
:class:`~.cursor.PartitionCursor` when it finishes, requeues and times them out. Declared
here, once, by the class that owns it. Pure: no I/O and no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import chain

from sortedcontainers import SortedKeyList

from . import offset_runs
from .inflight import Flight, FlightTimeouts, Held, Message

__all__ = ["CursorState"]


def _due(message: Message) -> tuple[int, int]:
    return (message.due_ns, message.record.offset)


class CursorState:
    """A channel's state in one partition."""

    def __init__(self, partition: int, start: int, acked: Sequence[int] = ()) -> None:
        self.partition = partition
        self.confirmed = start
        self.next_read = start
        self.acked: set[int] = {o for o in acked if o >= start}
        #: ``acked`` as runs (:meth:`~.cursor.PartitionCursor.checkpoint`), once a checkpoint
        #: made them (None: made from ``acked`` at the next), and the FINs added to ``acked``
        #: since (an offset, or a range of them)
        self._fin_runs: offset_runs.Runs | None = None
        self._fins_added: list[int | range] = []
        #: offsets ``[start, end)`` the log no longer has (skipped as corrupt), by start:
        #: ``confirmed`` steps over them as over FINed offsets
        self._holes: dict[int, int] = {}
        self._advance_confirmed()
        #: offset -> its delivery state: a message, or the flight it was delivered in
        self.in_flight: dict[int, Held] = {}
        self.deferred: SortedKeyList[Message, tuple[int, int]] = SortedKeyList(key=_due)
        self.ready: deque[Message] = deque()
        #: (log end at the timeout, message): timed-out messages delivered once every message
        #: before that end was read; ends ascending
        self.behind: deque[tuple[int, Message]] = deque()
        self._timeouts = FlightTimeouts()  # deadlines of the messages in flight
        self.requeue_count = 0
        self.timeout_count = 0
        self.message_count = 0
        #: body bytes of the messages the last :meth:`take` returned
        self.taken_bytes = 0
        #: offset -> not before (ns): delays taken over from a leader (see :meth:`mirror`),
        #: applied when the offset is read
        self._delays: dict[int, int] = {}
        #: (messages finished, flight): flights FIN runs left with few members, compacted once
        #: the cursor has finished that many messages; oldest first
        self._few: deque[tuple[int, Flight]] = deque()
        self._finished = 0  # messages FINed so far
        #: ordered consumption (SUB_ORDERED): exactly one message in flight; a timeout or REQ
        #: gives the same message back at the head (REQ delays are ignored), so order holds.
        self.ordered = False

    def _advance_confirmed(self) -> None:
        acked, holes = self.acked, self._holes
        while True:
            if self.confirmed in acked:
                acked.discard(self.confirmed)
                self.confirmed += 1
            elif self.confirmed in holes:
                self.confirmed = holes.pop(self.confirmed)
            else:
                return

    def attempts_of(self, offset: int) -> int:
        """How many times the message at ``offset`` went out on this channel, as far as the
        cursor still holds it: while in flight or waiting to go again; 0 otherwise (not
        delivered yet, or finished, which the cursor no longer tracks one by one)."""
        held = self.in_flight.get(offset)
        if isinstance(held, Message):
            return held.attempts
        if held is not None:  # in a first delivery's flight
            return 1
        waiting = chain(self.ready, self.deferred, (m for _, m in self.behind))
        return next((m.attempts for m in waiting if m.offset == offset), 0)
