"""One publish's messages on their way into a log, and the records they became.

An MPUB, a DPUB, an HTTP publish or the single PUBs of one loop turn hand the log a
:class:`BodyBatch`: bodies with their publish times, for one delivery time, with no trace id
and no ext but, for a numbered publish's, each body's producer stamp
(:mod:`~.stamp`). :meth:`PartitionLog.append` encodes them from the bodies
(:func:`~.bodies.encode_bodies`) and answers with an :class:`AppendedBatch`: the records
stored, each made only when someone reads it. The tail cache keeps the batch as it is and makes
a reader the records it reads: a backlog evicted before anyone reads it is never made into
records at all (making them was a fifth of an MPUB's cost), and the cache holds no object per
message for the cycle collector to walk (a record each, kept for seconds, made its collections
of the older generations the longest pauses of a live consumer's delivery).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import count, repeat
from typing import overload

from .record import NEW_RECORD, NewRecord, Record
from .stamp import Stamps


class BodyBatch(Sequence[NewRecord]):
    """Messages published together (and for one delivery time), with no trace id and no ext
    but a producer stamp: an MPUB, a DPUB, HTTP ``/pub`` and ``/mpub`` (one publish time for
    all), or the single PUBs of one loop turn (:func:`join`, each its own publish time). Read
    as a sequence it holds a :class:`NewRecord` per body, made when asked for;
    :meth:`PartitionLog.append` stores the bodies directly, without those."""

    __slots__ = ("bodies", "deliver_at_ns", "exts", "timestamp_ns", "timestamps")

    def __init__(
        self,
        timestamp_ns: int,
        bodies: list[bytes],
        deliver_at_ns: int = 0,
        timestamps: list[int] | None = None,
        exts: Sequence[bytes] | None = None,
    ) -> None:
        self.timestamp_ns = timestamp_ns  # the first body's (every body's, unless timestamps)
        self.bodies = bodies
        self.deliver_at_ns = deliver_at_ns
        #: each body's publish time, when they differ (as long as ``bodies``)
        self.timestamps = timestamps
        #: each body's ext when any has one: a numbered publish's producer stamps
        #: (:class:`~.stamp.Stamps`), or a list (a numbered run joined with plain ones)
        self.exts = exts

    def publish_times(self) -> list[int]:
        """Each body's publish time."""
        return self.timestamps or [self.timestamp_ns] * len(self.bodies)

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> NewRecord: ...

    @overload
    def __getitem__(self, index: slice) -> BodyBatch: ...

    def __getitem__(self, index: int | slice) -> NewRecord | BodyBatch:
        exts = self.exts
        if isinstance(index, slice):
            bodies = self.bodies[index]
            part = None if exts is None else exts[index]
            if self.timestamps is None:
                return BodyBatch(self.timestamp_ns, bodies, self.deliver_at_ns, None, part)
            times = self.timestamps[index]
            return BodyBatch(times[0] if times else 0, bodies, self.deliver_at_ns, times, part)
        ts = self.timestamp_ns if self.timestamps is None else self.timestamps[index]
        ext = b"" if exts is None else exts[index]
        return NewRecord(ts, self.bodies[index], 0, self.deliver_at_ns, ext)

    def each_ext(self) -> Sequence[bytes]:
        """Each body's ext (``b""`` for none)."""
        return self.exts if self.exts is not None else [b""] * len(self.bodies)

    @property
    def body_bytes(self) -> int:
        """The bodies' bytes together."""
        return sum(map(len, self.bodies))


def new_records(timestamp_ns: int, bodies: Iterable[bytes], deliver_at_ns: int = 0) -> BodyBatch:
    """The messages of one PUB/MPUB/DPUB: every body published at ``timestamp_ns``."""
    return BodyBatch(timestamp_ns, list(bodies), deliver_at_ns)


def join(batches: Sequence[BodyBatch]) -> BodyBatch:
    """The messages of ``batches`` (at least one; all for immediate delivery) as one batch,
    each keeping its publish time: PUBs of several connections appended together."""
    if len(batches) == 1:
        return batches[0]
    times: list[int] = []
    bodies: list[bytes] = []
    stamped = False
    for batch in batches:  # extended in place: cheaper than nested comprehensions
        times += batch.publish_times()
        bodies += batch.bodies
        stamped = stamped or batch.exts is not None
    if not stamped:
        return BodyBatch(times[0], bodies, 0, times)
    exts: list[bytes] = []
    for batch in batches:
        exts += batch.each_ext()
    return BodyBatch(times[0], bodies, 0, times, exts)


class AppendedBatch(Sequence[Record]):
    """The records a :class:`BodyBatch` became at offsets ``first_offset, first_offset + 1,
    ...``: a sequence of :class:`Record`, each made when it is read (:meth:`records` makes them
    all at once). Equal to any sequence of the same records, as the list it stands for."""

    __slots__ = (
        "bodies",
        "deliver_at_ns",
        "epoch",
        "exts",
        "first_offset",
        "id_base",
        "timestamps",
    )

    def __init__(
        self,
        first_offset: int,
        id_base: int,
        timestamps: list[int],
        deliver_at_ns: int,
        epoch: int,
        bodies: list[bytes],
        exts: Sequence[bytes] | None = None,
    ) -> None:
        self.first_offset = first_offset
        self.id_base = id_base  # the partition's bits of the internal id: | (offset + 1)
        self.timestamps = timestamps  # each body's publish time
        self.deliver_at_ns = deliver_at_ns
        self.epoch = epoch
        self.bodies = bodies
        self.exts = exts  # each body's ext (producer stamps), when any has one

    def same_kind(self, other: AppendedBatch) -> bool:
        """Whether ``other``'s records differ from this one's only in offset, time, body and
        ext (one partition, delivery time and epoch): the two can be one run."""
        return (
            self.id_base == other.id_base
            and self.deliver_at_ns == other.deliver_at_ns
            and self.epoch == other.epoch
        )

    def extend(self, other: AppendedBatch) -> None:
        """Add ``other``'s records (:meth:`same_kind`, at the offsets after this one's)."""
        mine, theirs = self.exts, other.exts
        if isinstance(mine, Stamps) and isinstance(theirs, Stamps):
            mine.extend(theirs)  # numbered runs after numbered runs: stamps kept as numbers
        elif mine is not None or theirs is not None:
            exts = [b""] * len(self.bodies) if mine is None else list(mine)
            exts += [b""] * len(other.bodies) if theirs is None else theirs
            self.exts = exts
        self.bodies += other.bodies
        self.timestamps += other.timestamps

    def copy(self) -> AppendedBatch:
        """The same records, in lists of its own."""
        return AppendedBatch(
            self.first_offset,
            self.id_base,
            list(self.timestamps),
            self.deliver_at_ns,
            self.epoch,
            list(self.bodies),
            _copied(self.exts),
        )

    def records(self) -> list[Record]:
        """Every record, made now (field by field: ``Record(...)``'s ``__init__`` frame costs
        half as much again; the tests compare them with records made as usual)."""
        at, ep, base = self.deliver_at_ns, self.epoch, self.id_base
        out: list[Record] = []
        append = out.append
        new = NEW_RECORD
        exts = self.exts if self.exts is not None else repeat(b"")
        for offset, ts, body, ext in zip(
            count(self.first_offset), self.timestamps, self.bodies, exts, strict=False
        ):
            record = new(Record)
            record.offset = offset
            record.timestamp_ns = ts
            record.internal_id = base | (offset + 1)
            record.trace_id = 0
            record.deliver_at_ns = at
            record.body = body
            record.ext = ext
            record.epoch = ep
            append(record)
        return out

    def __len__(self) -> int:
        return len(self.bodies)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | Sequence[Record]:
        if isinstance(index, slice):
            span = range(len(self.bodies))[index]
            if span.step != 1:
                return self.records()[index]
            exts = self.exts
            return AppendedBatch(
                self.first_offset + span.start,
                self.id_base,
                self.timestamps[span.start : span.stop],
                self.deliver_at_ns,
                self.epoch,
                self.bodies[span.start : span.stop],
                None if exts is None else exts[span.start : span.stop],
            )
        body = self.bodies[index]  # IndexError as a list's
        offset = self.first_offset + (index if index >= 0 else len(self.bodies) + index)
        return Record(
            offset,
            self.timestamps[index],
            self.id_base | (offset + 1),
            0,
            self.deliver_at_ns,
            body,
            b"" if self.exts is None else self.exts[index],
            self.epoch,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, as the list it stands for

    def __repr__(self) -> str:
        return f"AppendedBatch({self.records()!r})"


def end_of(records: Sequence[Record]) -> tuple[int, int, int]:
    """The internal id of the last of ``records`` (at least one), the offset after it and its
    epoch: of an :class:`AppendedBatch`, without making that record (its ext may be a stamp to
    pack)."""
    if isinstance(records, AppendedBatch):
        end = records.first_offset + len(records.bodies)
        return records.id_base | end, end, records.epoch
    last = records[-1]
    return last.internal_id, last.offset + 1, last.epoch


def _copied(exts: Sequence[bytes] | None) -> Sequence[bytes] | None:
    """``exts`` in a container of its own, of the same kind."""
    if exts is None:
        return None
    return exts.copy() if isinstance(exts, Stamps) else list(exts)
