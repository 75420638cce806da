"""A channel's cursor over one partition log: what is confirmed, in flight, deferred, requeued.

A channel is not a copy of the data. For each partition it keeps:

* ``confirmed``: every offset below it is FINed (the durable cursor, checkpointed);
* ``acked``: offsets at or above ``confirmed`` that are FINed out of order;
* ``next_read``: the next offset to read from the log;
* in-flight messages, each with its owner and deadline: the new records one take delivered
  share one :class:`~.inflight.Flight`, a message with state of its own is a
  :class:`~.inflight.Message`;
* deferred messages (REQ with a delay, DPUB) ordered by due time;
* requeued messages due now, delivered before anything new;
* timed-out messages, each behind the log end of its timeout: as nsqd puts a timed-out message
  at the back of the channel's queue, the messages already waiting go first.

Pure: no I/O and no clock; every method that needs the time takes ``now_ns`` (wall clock, ns).
The state itself is :mod:`.cursor_state`'s; taking messages from the log is :mod:`.taking`'s;
confirmations on the server's behalf (youzan) are :mod:`.confirming`'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from protocol.message import RecordLike

from . import offset_runs
from .errors import BrokerError, NotInFlightError, NotOwnerError
from .inflight import Flight, Held, Message
from .taking import Fetch, Taking

__all__ = ["Fetch", "PartitionCursor"]


def _record_of(held: Held, offset: int) -> RecordLike:
    """The record of the message in flight at ``offset`` that ``held`` holds."""
    if isinstance(held, Flight):
        return held.record(offset)
    assert isinstance(held, Message)
    return held.record


class PartitionCursor(Taking):
    """A channel's state in one partition (:class:`~.cursor_state.CursorState`) and what
    moves it: deliveries, FIN, REQ, TOUCH, timeouts, seeks. See the module docstring."""

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
            self._compact_if_few(held)
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
        if self._few:  # as finish_run would: the flight may give its members messages now
            self._compact_few()
        held = self.in_flight.get(offset)
        record = None if held is None else _record_of(held, offset)
        _, refused = self.finish_run((offset,), owner)
        if refused:
            raise refused[0][1]
        assert record is not None  # finished: it was in flight
        return record

    def finish_run(
        self, offsets: Sequence[int], owner: object, stamps: list[int] | None = None
    ) -> tuple[int, list[tuple[int, BrokerError]]]:
        """FIN each of ``offsets`` in order (a consumer's run): how many were finished, and the
        refusals ``(index in offsets, NotInFlightError | NotOwnerError)`` in order. With
        ``stamps``, each finished message's publish time is appended to it.

        A ``range`` of offsets held by flights of ``owner`` (a consumer FINing in delivery
        order) is finished flight by flight in C-level passes, with no step per offset; the
        loop below takes whatever is left from the first offset no flight of ``owner`` holds,
        and a run of one (a FIN read alone: a stock client's, at a low rate), whose C-level
        passes would cost twice the loop's one step."""
        if self._few:
            self._compact_few()
        skipped = 0  # offsets finished by whole flights, before the loop
        if type(offsets) is range and offsets.step == 1 and len(offsets) > 1:
            skipped = self._finish_flights(offsets, owner, stamps)
            if skipped == len(offsets):
                return skipped, []
            offsets = offsets[skipped:]
        in_flight = self.in_flight
        get = in_flight.get
        acked = self.acked
        added = self._fins_added if self._fin_runs is not None else None
        confirmed = self.confirmed
        done = 0
        refused: list[tuple[int, BrokerError]] = []
        last: Held | None = None
        flights: list[Flight] = []  # the flights FINs came from (a change of flight each)
        for index, offset in enumerate(offsets, skipped):
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
                if added is not None:
                    added.append(offset)
        self.confirmed = confirmed
        if acked or self._holes:
            self._advance_confirmed()
        self._finished += done
        for flight in flights:
            self._note_few(flight)
        return skipped + done, refused

    def _finish_flights(self, offsets: range, owner: object, stamps: list[int] | None) -> int:
        """Finish the offsets of ``offsets`` (step 1) from its start on, a flight at a time,
        while one flight of ``owner`` holds all of a flight's share of them; how many."""
        in_flight = self.in_flight
        done = 0
        start, stop = offsets.start, offsets.stop
        while start < stop:
            flight = in_flight.get(start)
            if not isinstance(flight, Flight) or flight.owner is not owner:
                break
            first = flight.index(start)
            piece = range(start, min(stop, flight.offsets[-1] + 1))
            holders = list(map(in_flight.get, piece))
            if holders.count(flight) != len(holders):
                break
            deque(map(in_flight.pop, piece), maxlen=0)  # each deleted, in one C-level pass
            flight.live -= len(piece)
            if stamps is not None:  # the piece's records: one slice of the flight's
                records = flight.records[first : first + len(piece)]
                stamps.extend([record.timestamp_ns for record in records])
            if start == self.confirmed:  # none of them is in acked: they were in flight
                self.confirmed = piece.stop
            else:
                self.acked.update(piece)
                self._note_fins(piece)
            done += len(piece)
            self._note_few(flight)
            start = piece.stop
        if done:
            self._finished += done
            if self.acked or self._holes:
                self._advance_confirmed()
        return done

    def _note_few(self, flight: Flight) -> None:
        """A flight a FIN run left with few members waits until the cursor has finished as many
        messages again as the flight had before its members get messages of their own: a
        consumer FINing in order (in reads that cut a batch anywhere) finishes them meanwhile,
        with no pass over the flight's records."""
        if flight.few:
            self._few.append((self._finished + len(flight.offsets), flight))

    def _compact_few(self) -> None:
        few = self._few
        while few and few[0][0] <= self._finished:
            self._compact_if_few(few.popleft()[1])

    def _compact_if_few(self, flight: Flight) -> None:
        """Each member of ``flight`` still in flight gets a message of its own once they are
        few (:attr:`~.inflight.Flight.few`); the flight's records go (see
        :class:`~.inflight.Flight`)."""
        if not flight.few:
            return
        in_flight = self.in_flight
        for offset in flight.offsets:
            if in_flight.get(offset) is flight:
                in_flight[offset] = flight.message(self.partition, offset)
        flight.records = flight.offsets = ()

    def confirm_offset(self, offset: int) -> None:
        """Confirm unsent the message at ``offset`` not taken from the log yet (or not waiting
        anywhere): it is skipped when read. The primitive of :mod:`.confirming`."""
        self.acked.add(offset)
        self._note_fins(offset)
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

    def expire(
        self,
        now_ns: int,
        end_offset: int | None = None,
        to_head: Callable[[object], bool] | None = None,
    ) -> tuple[list[object], int]:
        """Requeue timed-out in-flight messages and release due deferred ones; returns the
        owners of the timed-out messages (one entry per message) and how many deferred ones
        were released. A timed-out message goes behind the log up to ``end_offset`` (nsqd's back
        of the queue), else next; on an ordered channel (youzan's rule), or when ``to_head``
        says so of its owner (an HTTP batch: its partition goes on from the committed offset),
        back to the head, in offset order."""
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
            owner = message.owner
            owners.append(owner)
            message.owner = None
            self.timeout_count += 1
            if self.ordered or (to_head is not None and to_head(owner)):
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
        self._few.clear()
        self.acked.clear()
        self._forget_fin_runs()
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
            self._forget_fin_runs()
            self.confirmed = offset
            self._advance_confirmed()
        self.next_read = max(self.next_read, offset)

    def _note_fins(self, offsets: int | range) -> None:
        """``offsets`` were added to ``acked``: the next checkpoint adds them to its runs (the
        FIN loop of :meth:`finish_run` does the same inline)."""
        if self._fin_runs is not None:
            self._fins_added.append(offsets)

    def _forget_fin_runs(self) -> None:
        """``acked`` lost FINs above ``confirmed``: the next checkpoint makes its runs anew."""
        self._fin_runs = None
        self._fins_added = []

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
        self._forget_fin_runs()
        self._delays = {offset: due for offset, due in marks if due and offset >= confirmed}
        self._advance_confirmed()
        self.next_read = self.confirmed

    def checkpoint(self) -> dict[str, object]:
        """The durable part: ``confirmed`` and the out-of-order FINs above it, each alone
        (``acked``) or in a run of consecutive ones (``runs``, when any:
        :mod:`.offset_runs`). The runs are kept from one checkpoint to the next, the FINs
        since added to them: a checkpoint costs the runs and those FINs, not every FIN (a
        consumer that holds a message while later ones are FINed leaves all of them here)."""
        fin_runs = self._fin_runs
        if fin_runs is None:
            fin_runs = self._fin_runs = offset_runs.Runs.of(
                o for o in self.acked if o >= self.confirmed
            )
        else:
            for added in self._fins_added:
                fin_runs.add(added)
            fin_runs.drop_below(self.confirmed)
        self._fins_added = []
        alone, runs = fin_runs.parts()
        if runs:
            return {"confirmed": self.confirmed, "acked": alone, "runs": runs}
        return {"confirmed": self.confirmed, "acked": alone}
