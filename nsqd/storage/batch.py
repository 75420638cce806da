"""One publish's messages on their way into a log, and the records they became.

An MPUB, a DPUB or an HTTP publish hands the log a :class:`BodyBatch`: bodies published at one
time, for one delivery time, with no trace id and no ext. :meth:`PartitionLog.append` encodes
them from the bodies (:func:`~.record.encode_bodies`) and answers with an
:class:`AppendedBatch`: the records stored, each made only when someone reads it. A consumer
that keeps up reads them from the tail cache (made once there, then shared by every channel);
a backlog that outgrows the cache is evicted before anyone reads it, and those records are
never made at all (making them was a fifth of an MPUB's cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from .record import NewRecord, Record


class BodyBatch(Sequence[NewRecord]):
    """Messages published together at one time (and for one delivery time), with no trace id
    and no ext: an MPUB, a DPUB, HTTP ``/pub`` and ``/mpub``. Read as a sequence it holds a
    :class:`NewRecord` per body, made when asked for; :meth:`PartitionLog.append` stores the
    bodies directly, without those."""

    __slots__ = ("bodies", "deliver_at_ns", "timestamp_ns")

    def __init__(self, timestamp_ns: int, bodies: list[bytes], deliver_at_ns: int = 0) -> None:
        self.timestamp_ns = timestamp_ns
        self.bodies = bodies
        self.deliver_at_ns = deliver_at_ns

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> NewRecord: ...

    @overload
    def __getitem__(self, index: slice) -> BodyBatch: ...

    def __getitem__(self, index: int | slice) -> NewRecord | BodyBatch:
        if isinstance(index, slice):
            return BodyBatch(self.timestamp_ns, self.bodies[index], self.deliver_at_ns)
        return NewRecord(self.timestamp_ns, self.bodies[index], 0, self.deliver_at_ns)

    @property
    def body_bytes(self) -> int:
        """The bodies' bytes together."""
        return sum(map(len, self.bodies))


def new_records(timestamp_ns: int, bodies: Iterable[bytes], deliver_at_ns: int = 0) -> BodyBatch:
    """The messages of one PUB/MPUB/DPUB: every body published at ``timestamp_ns``."""
    return BodyBatch(timestamp_ns, list(bodies), deliver_at_ns)


class AppendedBatch(Sequence[Record]):
    """The records a :class:`BodyBatch` became at offsets ``first_offset, first_offset + 1,
    ...``: a sequence of :class:`Record`, each made when it is read (:meth:`records` makes them
    all at once). Equal to any sequence of the same records, as the list it stands for."""

    __slots__ = ("bodies", "deliver_at_ns", "epoch", "first_offset", "id_base", "timestamp_ns")

    def __init__(
        self,
        first_offset: int,
        id_base: int,
        timestamp_ns: int,
        deliver_at_ns: int,
        epoch: int,
        bodies: list[bytes],
    ) -> None:
        self.first_offset = first_offset
        self.id_base = id_base  # the partition's bits of the internal id: | (offset + 1)
        self.timestamp_ns = timestamp_ns
        self.deliver_at_ns = deliver_at_ns
        self.epoch = epoch
        self.bodies = bodies

    def records(self) -> list[Record]:
        """Every record, made now."""
        ts, at, ep, base = self.timestamp_ns, self.deliver_at_ns, self.epoch, self.id_base
        return [
            Record(offset, ts, base | (offset + 1), 0, at, body, b"", ep)
            for offset, body in enumerate(self.bodies, self.first_offset)
        ]

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
            return AppendedBatch(
                self.first_offset + span.start,
                self.id_base,
                self.timestamp_ns,
                self.deliver_at_ns,
                self.epoch,
                self.bodies[span.start : span.stop],
            )
        body = self.bodies[index]  # IndexError as a list's
        offset = self.first_offset + (index if index >= 0 else len(self.bodies) + index)
        return Record(
            offset,
            self.timestamp_ns,
            self.id_base | (offset + 1),
            0,
            self.deliver_at_ns,
            body,
            b"",
            self.epoch,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, as the list it stands for

    def __repr__(self) -> str:
        return f"AppendedBatch({self.records()!r})"
