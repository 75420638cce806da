"""Messages in flight: a channel's message between its first delivery and its FIN, and the
deadlines of the messages in flight (one lazily deleted heap, DESIGN.md §6).

Pure: no I/O and no clock; times are wall-clock nanoseconds passed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from protocol.message import RecordLike


class Message:
    """One message of a channel between its first delivery and its FIN."""

    __slots__ = (
        "attempts",
        "deadline_ns",
        "delivered_ns",
        "due_ns",
        "owner",
        "partition",
        "record",
    )

    def __init__(self, partition: int, record: RecordLike) -> None:
        self.partition = partition
        self.record = record
        self.attempts = 0
        self.owner: object | None = None  # the session holding it while in flight
        self.deadline_ns = 0  # in-flight timeout
        self.delivered_ns = 0  # when the current delivery started (TOUCH caps against it)
        self.due_ns = 0  # deferred until

    @property
    def offset(self) -> int:
        """The message's offset in its partition log."""
        return self.record.offset


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

    def pop_expired(self, now_ns: int, in_flight: dict[int, Message]) -> list[tuple[int, int]]:
        """``(deadline_ns, offset)`` of the messages of ``in_flight`` whose deadline is at or
        before ``now_ns``, sorted (as one entry per message would pop them); their entries are
        gone. May repeat an offset touched twice to the same deadline."""
        heap = self._heap
        expired: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now_ns:
            deadline, *offsets = heapq.heappop(heap)
            for offset in offsets:
                message = in_flight.get(offset)
                if message is not None and message.deadline_ns == deadline:
                    expired.append((deadline, offset))
        expired.sort()
        return expired

    def earliest(self, in_flight: dict[int, Message]) -> int | None:
        """The earliest deadline of a message still in flight with it (dead entries before it
        are dropped), if any."""
        heap = self._heap
        while heap:
            deadline, *offsets = heap[0]
            if any(
                (message := in_flight.get(offset)) is not None and message.deadline_ns == deadline
                for offset in offsets
            ):
                return deadline
            heapq.heappop(heap)
        return None

    def clear(self) -> None:
        """Forget every deadline (the cursor moved)."""
        self._heap.clear()
