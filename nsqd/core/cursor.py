"""A channel's cursor over one partition log: what is confirmed, in flight, deferred, requeued.

A channel is not a copy of the data. For each partition it keeps:

* ``confirmed``: every offset below it is FINed (the durable cursor, checkpointed);
* ``acked``: offsets at or above ``confirmed`` that are FINed out of order;
* ``next_read``: the next offset to read from the log;
* in-flight messages, each with its owner and deadline;
* deferred messages (REQ with a delay, DPUB) ordered by due time;
* requeued messages due now, delivered before anything new;
* timed-out messages, each behind the log end of its timeout: as nsqd puts a timed-out message
  at the back of the channel's queue, the messages already waiting go first.

Pure: no I/O and no clock; every method that needs the time takes ``now_ns`` (wall clock, ns).
Confirmations on the server's behalf (youzan) are :mod:`.confirming`'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from sortedcontainers import SortedKeyList

from protocol.message import RecordLike

from .delayed import DelayedIndex
from .errors import BrokerError, NotInFlightError, NotOwnerError
from .inflight import COMPACT_RATIO, Flight, FlightTimeouts, Held, Message

__all__ = ["Fetch", "PartitionCursor"]


Fetch = Callable[[int, int, int | None], Sequence[RecordLike]]
"""``fetch(offset, max_records, max_bytes)``: records from the partition log (supplied by the
broker); ``max_bytes`` (None: unbounded) may cut a read from disk short, never to nothing."""


_UNBOUNDED = 1 << 62  # ``max_bytes`` when none is given


def _due(message: Message) -> tuple[int, int]:
    return (message.due_ns, message.record.offset)


def _record_of(held: Held, offset: int) -> RecordLike:
    """The record of the message in flight at ``offset`` that ``held`` holds."""
    if isinstance(held, Flight):
        return held.record(offset)
    assert isinstance(held, Message)
    return held.record


class PartitionCursor:
    """A channel's state in one partition. See the module docstring."""

    def __init__(self, partition: int, start: int, acked: Sequence[int] = ()) -> None:
        self.partition = partition
        self.confirmed = start
        self.next_read = start
        self.acked: set[int] = {o for o in acked if o >= start}
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
        #: ordered consumption (SUB_ORDERED): exactly one message in flight; a timeout or REQ
        #: gives the same message back at the head (REQ delays are ignored), so order holds.
        self.ordered = False

    # ------------------------------------------------------------------ reading

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
    ) -> list[RecordLike]:
        """:meth:`take` then :meth:`start_flights` when :meth:`only_new`, the consume path:
        the records delivered, all first attempts, in flight for ``owner`` until
        ``deadline_ns`` as one :class:`~.inflight.Flight` (no message object each)."""
        if not self.only_new():
            raise ValueError("take_flight with messages waiting to be delivered again")
        limit = max_bytes if max_bytes is not None else _UNBOUNDED
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
            flight = Flight(out, owner, deadline_ns, now_ns)
            offsets = [record.offset for record in out]
            self.in_flight.update(dict.fromkeys(offsets, flight))
            self._timeouts.add(deadline_ns, offsets)
        return out

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
        # the hot loop of a consumer's read: locals, written back below
        next_read, acked, partition = self.next_read, self.acked, self.partition
        delays = self._delays
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

    # ------------------------------------------------------------------ in flight

    def start_flight(self, message: Message, owner: object, deadline_ns: int, now_ns: int) -> None:
        """Record a delivery: attempts + 1, owned by ``owner`` until FIN/REQ or ``deadline_ns``."""
        self.start_flights([message], owner, deadline_ns, now_ns)

    def start_flights(
        self, messages: Sequence[Message], owner: object, deadline_ns: int, now_ns: int
    ) -> None:
        """:meth:`start_flight` for each of ``messages`` (of this partition), with one timeout
        entry for them all."""
        if not messages:
            return
        in_flight = self.in_flight
        offsets: list[int] = []
        add = offsets.append
        for message in messages:
            attempts = message.attempts + 1
            message.attempts = attempts if attempts < 0xFFFF else 0xFFFF
            message.delivered_ns = now_ns
            message.owner = owner
            message.deadline_ns = deadline_ns
            message.live = 1
            offset = message.record.offset
            in_flight[offset] = message
            add(offset)
        self._timeouts.add(deadline_ns, offsets)

    def _message_at(self, offset: int) -> Message | None:
        """The message in flight at ``offset``; a member of a flight gets a message of its own
        (it needs state of its own: REQ, TOUCH, a timeout)."""
        held = self.in_flight.get(offset)
        if isinstance(held, Flight):
            message = held.message(self.partition, offset)
            self.in_flight[offset] = message
            return message
        return held if isinstance(held, Message) else None

    def _owned(self, offset: int, owner: object) -> Message:
        held = self.in_flight.get(offset)
        if held is None:
            raise NotInFlightError
        if held.owner is not owner:
            raise NotOwnerError
        message = self._message_at(offset)
        assert message is not None
        return message

    def finish(self, offset: int, owner: object) -> RecordLike:
        """FIN: the message is done; advance ``confirmed`` past contiguous FINs. Returns its
        record. Raises NotInFlightError or NotOwnerError."""
        held = self.in_flight.get(offset)
        record = held.record(offset) if isinstance(held, Flight) else None
        if isinstance(held, Message):
            record = held.record
        _, refused = self.finish_run((offset,), owner)
        if refused:
            raise refused[0][1]
        assert record is not None
        return record

    def finish_run(
        self, offsets: Sequence[int], owner: object, stamps: list[int] | None = None
    ) -> tuple[int, list[tuple[int, BrokerError]]]:
        """FIN each of ``offsets`` in order (a consumer's run): how many were finished, and the
        refusals ``(index in offsets, NotInFlightError | NotOwnerError)`` in order. With
        ``stamps``, each finished message's publish time is appended to it."""
        in_flight = self.in_flight
        get = in_flight.get
        acked = self.acked
        confirmed = self.confirmed
        done = 0
        refused: list[tuple[int, BrokerError]] = []
        last: Held | None = None
        flights: list[Flight] = []  # the flights FINs came from (a change of flight each)
        for index, offset in enumerate(offsets):
            held = get(offset)
            if held is None or held.owner is not owner:
                refused.append((index, NotInFlightError() if held is None else NotOwnerError()))
                continue
            if stamps is not None:
                stamps.append(_record_of(held, offset).timestamp_ns)
            del in_flight[offset]
            held.live -= 1
            done += 1
            if held is not last:
                last = held
                if isinstance(held, Flight):
                    flights.append(held)
            if offset == confirmed:  # the common case: FINs in delivery order
                confirmed += 1
            else:
                acked.add(offset)
        self.confirmed = confirmed
        if acked or self._holes:
            self._advance_confirmed()
        for flight in flights:
            if flight.live > 0 and flight.live * COMPACT_RATIO <= len(flight.records):
                self._compact(flight)
        return done, refused

    def _compact(self, flight: Flight) -> None:
        """Each member of ``flight`` still in flight gets a message of its own; the flight's
        records go (see :class:`~.inflight.Flight`)."""
        in_flight = self.in_flight
        for record in flight.records:
            offset = record.offset
            if in_flight.get(offset) is flight:
                in_flight[offset] = flight.message(self.partition, offset)
        flight.records = ()

    def confirm_offset(self, offset: int) -> None:
        """Confirm unsent the message at ``offset`` not taken from the log yet (or not waiting
        anywhere): it is skipped when read. The primitive of :mod:`.confirming`."""
        self.acked.add(offset)
        self._advance_confirmed()
        if self.next_read < self.confirmed:  # confirmed from the read position: not read again
            self.next_read = self.confirmed

    def requeue(self, offset: int, owner: object, delay_ns: int, now_ns: int) -> Message:
        """REQ: back to the channel now (``delay_ns == 0``) or after ``delay_ns``."""
        message = self._owned(offset, owner)
        del self.in_flight[offset]
        message.owner = None
        self.requeue_count += 1
        if self.ordered:
            self.ready.appendleft(message)  # delays are ignored: order first
        elif delay_ns > 0:
            message.due_ns = now_ns + delay_ns
            self.deferred.add(message)
        else:
            self.ready.append(message)
        return message

    def touch(self, offset: int, owner: object, deadline_ns: int) -> None:
        """TOUCH: move the in-flight deadline to ``deadline_ns``."""
        message = self._owned(offset, owner)
        message.deadline_ns = deadline_ns
        self._timeouts.add(deadline_ns, [offset])

    # ------------------------------------------------------------------ time

    def expire(self, now_ns: int, end_offset: int | None = None) -> tuple[list[object], int]:
        """Requeue timed-out in-flight messages and release due deferred ones.

        A timed-out message goes behind the messages waiting in the log up to ``end_offset``
        (nsqd puts it at the back of the channel's queue); without ``end_offset``, or on an
        ordered channel (the same message again at the head, youzan's rule), it is next.

        Returns the owners of the timed-out messages (one entry per message) and how many
        deferred messages were released.
        """
        owners: list[object] = []
        released = 0
        in_flight = self.in_flight
        heads: list[Message] = []  # ordered: back to the head, in offset order
        for deadline, offset in self._timeouts.pop_expired(now_ns, in_flight):
            held = in_flight.get(offset)
            if held is None or held.deadline_ns != deadline:
                continue  # a duplicate entry (touched to the same deadline)
            message = self._message_at(offset)
            assert message is not None
            del in_flight[offset]
            owners.append(message.owner)
            message.owner = None
            self.timeout_count += 1
            if self.ordered:
                heads.append(message)
            elif end_offset is None or end_offset <= self.next_read:
                self.ready.append(message)
            else:
                last = self.behind[-1][0] if self.behind else end_offset
                self.behind.append((max(last, end_offset), message))
        if heads:
            heads.sort(key=lambda m: m.record.offset)
            self.ready.extendleft(reversed(heads))
        deferred = self.deferred
        while deferred and deferred[0].due_ns <= now_ns:
            self.ready.append(deferred.pop(0))
            released += 1
        return owners, released

    def next_deadline(self) -> int | None:
        """The earliest in-flight or deferred deadline (ns), if any."""
        candidates = []
        if (deadline := self._timeouts.earliest(self.in_flight)) is not None:
            candidates.append(deadline)
        if self.deferred:
            candidates.append(self.deferred[0].due_ns)
        return min(candidates) if candidates else None

    # ------------------------------------------------------------------ bookkeeping

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

    def seek(self, offset: int) -> list[object]:
        """Move the cursor to ``offset`` (replay, or skip ahead): everything in flight, deferred
        or requeued is dropped. Returns the owners of the dropped in-flight messages (one entry
        per message) so their RDY accounting can be released."""
        owners = [m.owner for m in self.in_flight.values()]
        self.in_flight.clear()
        self.deferred.clear()
        self.ready.clear()
        self.behind.clear()
        self._timeouts.clear()
        self.acked.clear()
        self._holes.clear()
        self._delays.clear()
        self.confirmed = self.next_read = offset
        return owners

    def empty(self, end_offset: int) -> list[object]:
        """Drop everything: depth, in-flight and deferred (nsqd's channel empty)."""
        return self.seek(end_offset)

    def skip_to(self, offset: int) -> None:
        """Move a cursor forward past data that retention removed."""
        if offset > self.confirmed:
            self.acked = {o for o in self.acked if o >= offset}
            self.confirmed = offset
            self._advance_confirmed()
        self.next_read = max(self.next_read, offset)

    def replica_state(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """What a follower needs to take this cursor over: ``confirmed``, and per offset above
        it either 0 (finished) or the time before which it is not delivered (deferred)."""
        marks = dict.fromkeys(self.acked, 0)
        for message in self.deferred:
            marks[message.offset] = message.due_ns
        marks.update(self._delays)
        return self.confirmed, tuple(sorted(marks.items()))

    def mirror(self, confirmed: int, marks: Sequence[tuple[int, int]]) -> None:
        """Become a copy of a leader's cursor (:meth:`replica_state`): everything from
        ``confirmed`` on is delivered again once this node leads, except what is finished,
        and deferred messages not before their time."""
        self.seek(confirmed)
        self.acked = {offset for offset, due in marks if due == 0 and offset >= confirmed}
        self._delays = {offset: due for offset, due in marks if due and offset >= confirmed}
        self._advance_confirmed()
        self.next_read = self.confirmed

    def checkpoint(self) -> dict[str, object]:
        """The durable part: ``confirmed`` and the out-of-order FINs above it."""
        return {"confirmed": self.confirmed, "acked": sorted(self.acked)}
