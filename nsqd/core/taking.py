"""Taking messages for delivery from a channel's cursor: what was requeued or timed out, then
new records from the partition log (DESIGN.md §6: one pass over each read, no object per
message when a take's records go out together as one flight).

:class:`Taking` reads and moves the cursor's state (:class:`~.cursor_state.CursorState`, its
base); :class:`~.cursor.PartitionCursor` builds on it. Pure: no I/O and no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Final

from protocol.message import RecordLike

from .cursor_state import CursorState
from .delayed import DelayedIndex
from .inflight import Flight, Message

__all__ = ["Fetch", "FetchFramed", "Taking"]


Fetch = Callable[[int, int, int | None], Sequence[RecordLike]]
"""``fetch(offset, max_records, max_bytes)``: records from the partition log (supplied by the
broker); ``max_bytes`` (None: unbounded) may cut a read from disk short, never to nothing."""

FetchFramed = Callable[[int, int, int, int], tuple[Sequence[RecordLike], int] | None]
"""``fetch_framed(offset, max_records, max_bytes, now_ns)``: ``(records, body bytes)`` of a
run from ``offset`` on, due by ``now_ns``, whose frames the read wrote too (the broker's
:meth:`~nsqd.storage.PartitionLog.read_frames`); None when :data:`Fetch` must read them."""


_UNBOUNDED = 1 << 62  # ``max_bytes`` when none is given
_ACKED_SCAN: Final = 8192  # acked offsets a read looks through for one it would have to skip
_body_of: Final = attrgetter("body")
_deliver_at_of: Final = attrgetter("deliver_at_ns")


def _due_run(
    records: Sequence[RecordLike], next_read: int, room: int, stop: int, now_ns: int
) -> Sequence[RecordLike] | None:
    """The first ``min(room, stop - next_read)`` of ``records`` if they are the offsets from
    ``next_read`` on (a log read's offsets ascend: the first and last tell) and none is due
    later than ``now_ns``: what a take's loop would go through record by record, found by
    C-level passes. None otherwise."""
    count = min(room, stop - next_read, len(records))
    if count <= 0:
        return None
    run = records if count == len(records) else records[:count]
    if run[0].offset != next_read or run[-1].offset != next_read + count - 1:
        return None
    if max(map(_deliver_at_of, run)) > now_ns:
        return None
    return run


class Taking(CursorState):
    """Reads of a cursor: new records from the log and what was requeued or timed out."""

    def take(
        self,
        fetch: Fetch,
        max_messages: int,
        now_ns: int,
        end_offset: int,
        max_bytes: int | None = None,
        *,
        batch: bool = False,
    ) -> list[Message]:
        """Up to ``max_messages`` deliverable messages: requeued first, then new from the log;
        with ``max_bytes``, no more once their bodies add up to it (one message at least), so a
        consumer's window of big messages is taken a socket's worth at a time.

        Records from the log that are not due yet (DPUB) go to the deferred set instead.
        Acked offsets (FINed before a restart) are skipped. :attr:`taken_bytes` tells the
        body bytes returned. Ordered: one message, or with ``batch`` (an HTTP consume lease,
        which locks the partition) a run of consecutive messages.
        """
        self.taken_bytes = 0
        if self.ordered:
            if self.in_flight or self.deferred:  # the head is out, or not due yet
                return []
            if not batch:
                max_messages = min(max_messages, 1)
        limit = max_bytes if max_bytes is not None else _UNBOUNDED
        taken = 0
        out: list[Message] = []
        ready = self.ready
        while ready and len(out) < max_messages and taken < limit:
            message = ready.popleft()
            taken += len(message.record.body)
            out.append(message)
        behind = self.behind
        partition = self.partition
        while len(out) < max_messages and taken < limit:
            while behind and len(out) < max_messages and taken < limit:
                mark, message = behind[0]
                if mark > self.next_read and self.next_read < end_offset:
                    break  # messages waiting before it are still unread
                behind.popleft()
                taken += len(message.record.body)
                out.append(message)
            stop = min(end_offset, behind[0][0]) if behind else end_offset
            if len(out) >= max_messages or taken >= limit or self.next_read >= stop:
                break
            fresh: list[RecordLike] = []
            taken, read = self._read_log(
                fetch, max_messages - len(out), now_ns, stop, limit, taken, fresh
            )
            out.extend([Message(partition, record) for record in fresh])
            if not read or (self.ordered and self.deferred):
                break
        self.taken_bytes = taken
        return out

    def only_new(self) -> bool:
        """True when a take can give only new records from the log (:meth:`take_flight`):
        nothing requeued or timed out waits, and the channel is not ordered."""
        return not (self.ordered or self.ready or self.behind)

    def take_flight(
        self,
        fetch: Fetch,
        max_messages: int,
        now_ns: int,
        end_offset: int,
        owner: object,
        deadline_ns: int,
        max_bytes: int | None = None,
        fetch_framed: FetchFramed | None = None,
    ) -> Sequence[RecordLike]:
        """:meth:`take` then :meth:`start_flights` when :meth:`only_new`, the consume path:
        the records delivered, all first attempts, in flight for ``owner`` until
        ``deadline_ns`` as one :class:`~.inflight.Flight` (no message object each).

        With ``fetch_framed``, a read that nothing needs to be skipped or deferred in is
        tried that way first: what it returns (the storage's frame run) is the take."""
        if not self.only_new():
            raise ValueError("take_flight with messages waiting to be delivered again")
        limit = max_bytes if max_bytes is not None else _UNBOUNDED
        count = min(max_messages, end_offset - self.next_read)
        if fetch_framed is not None and count > 0 and self._nothing_to_skip():
            framed = fetch_framed(self.next_read, count, limit, now_ns)
            if framed is not None:
                run, size = framed
                first = self.next_read
                self.next_read = first + len(run)
                self.message_count += len(run)
                self.taken_bytes = size
                self._start_flight(run, range(first, self.next_read), owner, deadline_ns, now_ns)
                return run
        taken = 0
        out: list[RecordLike] = []
        while len(out) < max_messages and taken < limit and self.next_read < end_offset:
            taken, read = self._read_log(
                fetch, max_messages - len(out), now_ns, end_offset, limit, taken, out
            )
            if not read:
                break
        self.taken_bytes = taken
        if out:
            first, last = out[0].offset, out[-1].offset
            offsets: Sequence[int] = (
                range(first, last + 1)  # offsets ascend: no gap, nothing to list
                if last - first == len(out) - 1
                else [record.offset for record in out]
            )
            self._start_flight(out, offsets, owner, deadline_ns, now_ns)
        return out

    def _start_flight(
        self,
        records: Sequence[RecordLike],
        offsets: Sequence[int],
        owner: object,
        deadline_ns: int,
        now_ns: int,
    ) -> None:
        flight = Flight(records, offsets, owner, deadline_ns, now_ns)
        self.in_flight.update(dict.fromkeys(offsets, flight))
        self._timeouts.add(deadline_ns, offsets)

    def _read_log(
        self,
        fetch: Fetch,
        room: int,
        now_ns: int,
        stop: int,
        limit: int,
        taken: int,
        out: list[RecordLike],
    ) -> tuple[int, bool]:
        """One read of the log from :attr:`next_read`: up to ``room`` records due now are
        appended to ``out`` until their bodies bring ``taken`` to ``limit``; those not due yet
        go to the deferred set. Returns ``taken`` and whether the log gave anything."""
        records = fetch(
            self.next_read, max(room, 64), None if limit == _UNBOUNDED else limit - taken
        )
        if not records:
            return taken, False
        next_read, acked, partition = self.next_read, self.acked, self.partition
        delays = self._delays
        if self._nothing_to_skip():  # the common read: all of it due, nothing to skip
            run = _due_run(records, next_read, room, stop, now_ns)
            if run is not None:
                size = sum(map(len, map(_body_of, run)))
                if taken + size - len(run[-1].body) < limit:  # as the loop below would
                    out.extend(run)
                    self.next_read = next_read + len(run)
                    self.message_count += len(run)
                    return taken + size, True
        # the record by record loop: locals, written back below
        made = 0
        append = out.append
        for record in records:
            if room <= 0 or taken >= limit:
                break
            offset = record.offset
            if offset != next_read:  # offsets lost to damage: nothing to FIN
                self._holes[next_read] = offset
                self._advance_confirmed()
                next_read = offset
            if offset >= stop:
                break
            next_read = offset + 1
            if acked and offset in acked:
                continue
            made += 1
            due = record.deliver_at_ns
            if delays:
                due = max(due, delays.pop(offset, 0))
            if due > now_ns:
                message = Message(partition, record)
                message.due_ns = due
                self.deferred.add(message)
                if self.ordered:
                    break  # nothing passes a message that is not due yet
            else:
                append(record)
                room -= 1
                taken += len(record.body)
        self.next_read = next_read
        self.message_count += made
        return taken, True

    def _nothing_to_skip(self) -> bool:
        """No offset from :attr:`next_read` on is acked and none has a delay of its own: a read
        from there has no record to look up. ``acked`` holds FINs past ``confirmed`` (a
        consumer's out-of-order FINs of messages it was given, all below ``next_read``; after a
        restart or a confirmation of unread offsets, some above): looked through while small,
        else the read looks up each record."""
        acked = self.acked
        if self._delays:
            return False
        return not acked or (len(acked) <= _ACKED_SCAN and max(acked) < self.next_read)

    def has_ready(self, end_offset: int) -> bool:
        """True if :meth:`take` could return something now."""
        if self.ordered and (self.in_flight or self.deferred):
            return False
        return bool(self.ready) or bool(self.behind) or self.next_read < end_offset

    def depth(self, end_offset: int) -> int:
        """Messages waiting for delivery (nsqd's channel ``depth``)."""
        return end_offset - self.next_read + len(self.ready) + len(self.behind)

    def unread_deferred(self, delayed: DelayedIndex, end_offset: int, now_ns: int) -> int:
        """Messages in the log not read yet that are deferred all the same (DPUB, or a delay
        taken over from a leader): nsqd counts them as ``deferred_count``, not ``depth``."""
        offsets = set(delayed.not_due(self.next_read, end_offset, now_ns))
        offsets.update(
            o
            for o, due in self._delays.items()
            if self.next_read <= o < end_offset and due > now_ns
        )
        return len(offsets - self.acked)
