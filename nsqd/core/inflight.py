"""Messages in flight: a channel's message between its delivery and its FIN, and the deadlines
of the messages in flight (one lazily deleted heap, DESIGN.md §6).

A cursor maps each offset in flight to what holds its delivery state: a :class:`Message`, or,
for the messages one take read from the log and delivered together for the first time, one
:class:`Flight` they share (no object per message on the consume path). A member of a flight
becomes a :class:`Message` of its own when it needs state of its own: REQ, TOUCH, a timeout.

Pure: no I/O and no clock; times are wall-clock nanoseconds passed in.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Protocol

from protocol.message import RecordLike


class Held:
    """The delivery state an offset in flight maps to: who holds it, until when, since when."""

    __slots__ = ("deadline_ns", "delivered_ns", "live", "owner")

    owner: object | None  # the session (or lease) holding it while in flight
    deadline_ns: int  # in-flight timeout
    delivered_ns: int  # when the current delivery started (TOUCH caps against it)
    live: int  # how many offsets in flight map to it


class Message(Held):
    """One message of a channel with state of its own: waiting to be delivered again (REQ,
    timeout, DPUB), or in flight after a REQ, TOUCH or timeout."""

    __slots__ = ("attempts", "due_ns", "partition", "record")

    def __init__(self, partition: int, record: RecordLike) -> None:
        self.partition = partition
        self.record = record
        self.attempts = 0
        self.owner = None
        self.deadline_ns = 0
        self.delivered_ns = 0
        self.due_ns = 0  # deferred until
        self.live = 1

    @property
    def offset(self) -> int:
        """The message's offset in its partition log."""
        return self.record.offset


class Flight(Held):
    """Messages read from the log by one take and delivered together, each for the first time
    (attempts 1): one owner, deadline and delivery time for them all.

    It keeps their records (a timeout, REQ or TOUCH makes a :class:`Message` of one); the cursor
    gives each member still in flight a :class:`Message` of its own once few are left
    (:data:`COMPACT_RATIO`), so a consumer holding on to a few messages of each batch does not
    keep every batch's records alive.
    """

    __slots__ = ("offsets", "records")

    def __init__(
        self,
        records: Sequence[RecordLike],
        offsets: Sequence[int],
        owner: object,
        deadline_ns: int,
        now_ns: int,
    ) -> None:
        self.records = records  # offsets ascending (a lazy sequence may decode on access)
        #: the records' offsets (a range when they have no gap): no record is read for them
        self.offsets = offsets
        self.owner = owner
        self.deadline_ns = deadline_ns
        self.delivered_ns = now_ns
        self.live = len(records)

    @property
    def few(self) -> bool:
        """Some members are still in flight, at most 1/:data:`COMPACT_RATIO` of its records:
        time for each to get a message of its own (the cursor's compaction)."""
        return 0 < self.live * COMPACT_RATIO <= len(self.records)

    def index(self, offset: int) -> int:
        """Where the member at ``offset`` is in :attr:`records`."""
        offsets = self.offsets
        if type(offsets) is range:
            index = offset - offsets.start
            if not 0 <= index < len(offsets):
                raise KeyError(offset)
            return index
        index = bisect_left(offsets, offset)
        if index == len(offsets) or offsets[index] != offset:
            raise KeyError(offset)
        return index

    def record(self, offset: int) -> RecordLike:
        """The member's record at ``offset``."""
        return self.records[self.index(offset)]

    def message(self, partition: int, offset: int) -> Message:
        """The member at ``offset`` as a :class:`Message` in flight with the flight's state (it
        leaves the flight: :attr:`live` goes down)."""
        message = Message(partition, self.record(offset))
        message.attempts = 1
        message.owner = self.owner
        message.deadline_ns = self.deadline_ns
        message.delivered_ns = self.delivered_ns
        self.live -= 1
        return message


class FramedRun(Protocol):
    """Records read from the log with their message frames written (the storage's
    ``FrameRun``): what a take's read gave, sent as it is."""

    frames: bytearray  # the frames, each a first attempt (the shell empties it once sent)

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[RecordLike]: ...


class Deliveries:
    """What one take hands a connection: ``records[i]`` goes out for the ``attempts[i]``-th
    time, in this order; then the runs of :attr:`framed`, first attempts whose frames a read
    wrote already (:meth:`add_framed`)."""

    __slots__ = ("attempts", "framed", "records")

    def __init__(self) -> None:
        self.records: list[RecordLike] = []
        self.attempts: list[int] = []
        self.framed: list[FramedRun] = []

    def __len__(self) -> int:
        """The records and the framed runs' members together."""
        return len(self.records) + sum(map(len, self.framed))

    def add_messages(self, messages: Sequence[Message]) -> None:
        """Messages just put in flight (their attempts counted)."""
        self.records.extend([message.record for message in messages])
        self.attempts.extend([message.attempts for message in messages])

    def add_first(self, records: Sequence[RecordLike]) -> None:
        """Records just put in flight for the first time."""
        self.records.extend(records)
        self.attempts.extend(repeat(1, len(records)))

    def add_framed(self, run: FramedRun) -> None:
        """Records just put in flight for the first time whose frames are written (the
        storage's frame run: the shell sends them as they are)."""
        self.framed.append(run)


COMPACT_RATIO = 16
"""A flight whose members still in flight are at most 1/16 of its records after a FIN run
gives each of them a message of its own and lets its records go."""


class FlightTimeouts:
    """The deadlines of one partition's messages in flight.

    A heap of ``(deadline_ns, *offsets)``: a batch delivered (or a message touched) with that
    deadline, ordered by deadline, then first offset. Lazy deletion: an offset whose message is
    no longer in flight with that deadline (FINed, requeued, touched since) is skipped when its
    entry comes up.

    An entry outlives its messages' FINs until its deadline comes up (a minute by default), so
    it is one flat tuple of ints: the cycle collector stops tracking such a tuple at its first
    pass, where a list (or a tuple holding one) would be walked by every collection of the
    generation it reaches, and a consumer's deliveries would fill the older generations.
    """

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, ...]] = []

    def add(self, deadline_ns: int, offsets: Sequence[int]) -> None:
        """``offsets`` (at least one) are in flight until ``deadline_ns``."""
        heapq.heappush(self._heap, (deadline_ns, *offsets))

    def pop_expired(self, now_ns: int, in_flight: dict[int, Held]) -> list[tuple[int, int]]:
        """``(deadline_ns, offset)`` of the messages of ``in_flight`` whose deadline is at or
        before ``now_ns``, sorted (as one entry per message would pop them); their entries are
        gone. May repeat an offset touched twice to the same deadline."""
        heap = self._heap
        expired: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now_ns:
            deadline, *offsets = heapq.heappop(heap)
            for offset in offsets:
                held = in_flight.get(offset)
                if held is not None and held.deadline_ns == deadline:
                    expired.append((deadline, offset))
        expired.sort()
        return expired

    def earliest(self, in_flight: dict[int, Held]) -> int | None:
        """The earliest deadline of a message still in flight with it (dead entries before it
        are dropped), if any."""
        heap = self._heap
        while heap:
            deadline, *offsets = heap[0]
            if any(
                (held := in_flight.get(offset)) is not None and held.deadline_ns == deadline
                for offset in offsets
            ):
                return deadline
            heapq.heappop(heap)
        return None

    def clear(self) -> None:
        """Forget every deadline (the cursor moved)."""
        self._heap.clear()
