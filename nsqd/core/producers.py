"""Idempotent publishing, the partition's side: what each producer last stored, so a retried
publish is acknowledged again without being stored again (Kafka's idempotent producer, Pulsar's
broker-side deduplication). Pure: no I/O, no Trio, time is a parameter.

A producer names itself (a 64-bit id) and numbers its messages to each partition: 0, 1, 2, ...
A publish of ``count`` messages carries the number of its first (``first``); it takes
``first .. first + count - 1``. Per partition, :class:`Producers` keeps for every producer the
last number stored and its last :data:`RECENT` publishes (their numbers and the offset of their
last message), and judges each new publish (:meth:`Producers.check`):

* the next numbers (``first == last + 1``), or the first ones (``first == 0``) of a producer
  it does not know (new, expired, or every publish it knew of truncated away): **append** (and
  :meth:`Producers.record` it once appended);
* numbers all stored already (``first + count - 1 <= last``): a **duplicate**, acknowledged
  without being stored once the offset :meth:`check` returns is acknowledged (the first try
  may still be waiting for its replicas): the offset of the recent publish holding its last
  number, or, for one older than those, of the oldest recent one (acknowledged after it);
* numbers partly stored (a writer re-run that batches differently than its first run): the
  new ones are appended, the stored ones left out;
* numbers skipped (a gap: an earlier publish not arrived yet, or given up), or numbers past 0
  from a producer it does not know: :class:`SequenceError`, refused without storing. Telling
  an unknown producer's later numbers to start at 0 is what keeps a retried first publish,
  arriving after a later one, from being taken for a duplicate; a producer told so after a
  long silence starts its numbers at 0 again (it was forgotten, so none of its messages in
  flight was stored).

The state must follow the log: it is rebuilt from the records' producer stamps after a restart
or when the log is truncated (a replica that follows a new leader), so each record carries its
producer and number. A producer idle for ``ttl`` seconds is forgotten (:meth:`expire`); so is
the least recently used one past ``limit`` producers — also within the ttl, when more producers
than ``limit`` publish within it (each HTTP Idempotency-Key is one): those are counted
(:attr:`Producers.evicted_early`), as a retry of theirs is no longer recognised.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence, Sized
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, TypeAlias

from .errors import BrokerError

#: recent publishes kept per producer: a retry of any of them is still told a duplicate
RECENT = 5


class Refusal(Enum):
    """Why numbers were refused."""

    GAP = "gap"  # numbers skipped: ``expected`` is the next one the partition takes
    UNKNOWN = "unknown"  # a producer the partition does not know starts at 0


class SequenceError(BrokerError):
    """A publish whose numbers do not follow the producer's last ones (:class:`Refusal`);
    ``str()`` says which numbers."""

    def __init__(self, description: str, refusal: Refusal, expected: int) -> None:
        super().__init__(description)
        self.refusal = refusal
        self.expected = expected  # the number the partition takes next from this producer


class Verdict(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"


#: a numbered publish taken for an append (:meth:`Producers.take`): its producer, first number
#: and count (what its records' stamps are made from)
Appended: TypeAlias = tuple[int, int, int]

#: one publish stored: numbers ``first .. last``, its last message at ``offset`` (a plain
#: tuple: one is made per numbered append, and a named tuple's cost four times as much)
Stored: TypeAlias = tuple[int, int, int]


class Messages(Protocol):
    """A publish's messages, as :meth:`Producers.take` counts them (a batch of bodies)."""

    @property
    def bodies(self) -> Sized: ...


@dataclass(slots=True)
class _Producer:
    last: int  # the last number stored (``recent[-1]``'s: read by every check)
    recent: deque[Stored] = field(default_factory=lambda: deque(maxlen=RECENT))
    touched: float = 0.0  # last publish (appended or told a duplicate)


class Producers:
    """Every producer's recent publishes to one partition (see the module doc)."""

    def __init__(self, ttl: float, limit: int) -> None:
        self.ttl = ttl
        self.limit = limit
        self._producers: OrderedDict[int, _Producer] = OrderedDict()  # least recent first
        #: producers forgotten for ``limit`` while seen within ``ttl`` (a retry of theirs would
        #: be stored again), and how long before its eviction the last such one was seen
        self.evicted_early = 0
        self.last_window = 0.0
        self.evicted_reported = 0  # of ``evicted_early``, those the broker has logged
        self.report_after = 0.0  # (monotonic) the broker's next log of them, at the earliest

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, producer: int, first: int, count: int, now: float) -> tuple[Verdict, int]:
        """The verdict on a publish of ``count`` messages numbered from ``first``: for an
        append, how many of its first messages are stored already (to leave out); for a
        duplicate, the offset to wait for. Raises :class:`SequenceError`."""
        known = self._producers.get(producer)
        if known is None:
            if first == 0:
                return Verdict.APPEND, 0
            raise SequenceError(
                f"producer {producer:016x} unknown here (new, or idle past the producer state "
                f"ttl): its numbers start at 0, got {first}",
                Refusal.UNKNOWN,
                0,
            )
        stored = known.last
        if first == stored + 1:
            return Verdict.APPEND, 0
        last = first + count - 1
        if last <= stored:  # stored already: acknowledged once what holds ``last`` is
            known.touched = now
            self._producers.move_to_end(producer)
            holding = next((s for s in known.recent if s[0] <= last <= s[1]), known.recent[0])
            return Verdict.DUPLICATE, holding[2]  # the offset of its last message
        if first > stored:
            raise SequenceError(
                f"producer {producer:016x} expected sequence {stored + 1}, got {first}",
                Refusal.GAP,
                stored + 1,
            )
        return Verdict.APPEND, stored + 1 - first  # its first ones stored already

    def take(
        self, runs: Sequence[tuple[Messages, tuple[int, int] | None]], first_offset: int, now: float
    ) -> tuple[list[bool] | None, list[Appended]]:
        """The publish reactor's turn: ``runs`` (each its messages and, for a numbered one, its
        producer and first number) to be appended together from ``first_offset``, judged and
        recorded as appended in one pass. A numbered run is taken when :meth:`check` would
        append it whole at its place in the turn (its first number comes next, or is 0 for a
        producer not known here; a producer's second run in the turn follows its first); plain
        runs always are. Returns which runs were taken (None: all of them) — any other (a
        retry, a gap) was left as it was, to be judged alone — and each numbered run taken, in
        order (recorded with its last message's offset, which counts the taken runs before
        it).

        Recorded before the append is made: if it fails, :meth:`truncate` at ``first_offset``
        undoes it (what the failed append stored is then read back from its stamps)."""
        producers = self._producers
        get = producers.get
        to_end = producers.move_to_end
        publishes: list[Appended] = []
        appended = publishes.append
        taken: list[bool] | None = None
        offset = first_offset - 1  # the last message's of the runs taken so far
        for index, (messages, numbering) in enumerate(runs):
            if numbering is None:
                offset += len(messages.bodies)
                continue
            producer, first = numbering
            known = get(producer)
            count = len(messages.bodies)
            if known is not None and first == known.last + 1:  # a known producer's next
                offset += count
                to_end(producer)
                known.last = last = first + count - 1
                known.recent.append((first, last, offset))
                known.touched = now
            elif known is None and first == 0:  # a producer new here
                offset += count
                self.record(producer, 0, count, offset, now)
            else:
                if taken is None:
                    taken = [True] * len(runs)
                taken[index] = False
                continue
            appended((producer, first, count))
        return taken, publishes

    def record(self, producer: int, first: int, count: int, offset: int, now: float) -> None:
        """A publish appended: numbers ``first ..`` of ``producer``, its last message at
        ``offset`` (also as a replica, and when the log is read back)."""
        producers = self._producers
        known = producers.get(producer)
        last = first + count - 1
        if known is None:
            known = producers[producer] = _Producer(last)
            while len(producers) > self.limit:
                _, gone = producers.popitem(last=False)
                if now - gone.touched < self.ttl:
                    self.evicted_early += 1
                    self.last_window = now - gone.touched
        else:
            if first != known.last + 1:
                known.recent.clear()  # a producer that started over (after an expiry elsewhere)
            producers.move_to_end(producer)
            known.last = last
        known.recent.append((first, last, offset))
        known.touched = now

    def truncate(self, offset: int) -> None:
        """The log was cut at ``offset``: publishes from there on are gone. A producer keeps
        the ones before (when none is left it is forgotten: its next publish appends)."""
        for producer in list(self._producers):
            known = self._producers[producer]
            recent = known.recent
            while recent and recent[-1][2] >= offset:
                recent.pop()
            if recent:
                known.last = recent[-1][1]
            else:
                del self._producers[producer]

    def expire(self, now: float) -> int:
        """Forget producers idle for ``ttl``; returns how many."""
        idle = [p for p, known in self._producers.items() if now - known.touched >= self.ttl]
        for producer in idle:
            del self._producers[producer]
        return len(idle)

    def snapshot(self) -> list[tuple[int, float, list[tuple[int, int, int]]]]:
        """Every producer as ``(id, touched, [(first, last, offset), ...])``, least recent
        first: what a checkpoint keeps."""
        return [
            (producer, known.touched, list(known.recent))
            for producer, known in self._producers.items()
        ]

    def restore(self, rows: list[tuple[int, float, list[tuple[int, int, int]]]]) -> None:
        """Replace the state with a :meth:`snapshot`."""
        self._producers.clear()
        for producer, touched, recent in rows:
            if recent:
                known = _Producer(recent[-1][1], touched=touched)
                known.recent.extend(recent)
                self._producers[producer] = known
