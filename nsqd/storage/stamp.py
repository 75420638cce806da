"""The producer stamp: which producer stored a record, and its number, for idempotent
publishing (:mod:`nsqd.core.producers`). Pure: no I/O.

A record's ``ext`` (:data:`~.record.RECORD_HEADER`) is youzan's JSON header on ext topics and
empty elsewhere. A record published by a producer that numbers its messages starts its ext
with the stamp below, before that header (if any). The stamp travels with the record: to the
replicas (their producer state is rebuilt from the records they copy) and back from the disk
after a restart. JSON never starts with byte ``0xFE``, so a stamped ext is told from an
unstamped one by its first byte; readers that hand the ext to a client (youzan's ext header)
take :func:`header_of` of it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Final, overload

PRODUCER_STAMP: Final = struct.Struct(
    ">B"  # magic: STAMP_MAGIC (JSON, the rest of an ext, never starts with it)
    "Q"  # producer: the publishing producer's 64-bit id (IDENTIFY's pnsq_producer, hashed)
    "Q"  # sequence: the record's number among that producer's messages to the partition
)
STAMP_MAGIC: Final = 0xFE
STAMP_SIZE: Final = PRODUCER_STAMP.size

_pack: Final = PRODUCER_STAMP.pack
_unpack_from: Final = PRODUCER_STAMP.unpack_from


def stamped(producer: int, sequence: int, header: bytes = b"") -> bytes:
    """The ext of a record ``producer`` stored as number ``sequence``, before ``header``."""
    return _pack(STAMP_MAGIC, producer, sequence) + header


class Stamps(Sequence[bytes]):
    """The exts of consecutive records that are each a producer stamp with no header, kept as
    numbers: a numbered publish's (or several producers' appended together). Read as a
    sequence it holds each record's :func:`stamped` ext, made when asked for; the log packs
    the numbers with each record's header instead (:mod:`.bodies`), so a stamp written is never
    made as bytes of its own (a third of what numbering cost a message). Its lists are its own
    and grow in place (:meth:`add`, :meth:`extend`)."""

    __slots__ = ("producers", "sequences")

    def __init__(self, producers: list[int] | None = None, sequences: list[int] | None = None):
        self.producers = producers if producers is not None else []  # each record's producer
        self.sequences = sequences if sequences is not None else []  # and its number

    def add(self, producer: int, first: int, count: int) -> None:
        """Stamps for ``count`` more records: ``producer``'s ``first, first + 1, ...``."""
        if count == 1:  # a synchronous producer's PUB
            self.producers.append(producer)
            self.sequences.append(first)
        else:
            self.producers += repeat(producer, count)
            self.sequences += range(first, first + count)

    def extend(self, other: Stamps) -> None:
        """Add ``other``'s stamps after these."""
        self.producers += other.producers
        self.sequences += other.sequences

    def copy(self) -> Stamps:
        """The same stamps, in lists of their own."""
        return Stamps(list(self.producers), list(self.sequences))

    def __len__(self) -> int:
        return len(self.sequences)

    def __iter__(self) -> Iterator[bytes]:
        return map(_pack, repeat(STAMP_MAGIC), self.producers, self.sequences)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Stamps: ...

    def __getitem__(self, index: int | slice) -> bytes | Stamps:
        if isinstance(index, slice):
            return Stamps(self.producers[index], self.sequences[index])
        return _pack(STAMP_MAGIC, self.producers[index], self.sequences[index])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the list it stands for

    def __repr__(self) -> str:
        return f"Stamps({self.producers!r}, {self.sequences!r})"


def stamps(producer: int, first: int, count: int) -> Stamps:
    """The exts of ``count`` records ``producer`` stored as numbers ``first, first + 1, ...``
    (:func:`stamped` of each, with no header)."""
    run = Stamps()
    run.add(producer, first, count)
    return run


def read_stamp(ext: bytes) -> tuple[int, int] | None:
    """``(producer, sequence)`` of a stamped ext, else None."""
    if len(ext) < STAMP_SIZE or ext[0] != STAMP_MAGIC:
        return None
    _, producer, sequence = _unpack_from(ext)
    return producer, sequence


def header_of(ext: bytes) -> bytes:
    """The part of ``ext`` a client sees (youzan's header): without the stamp."""
    if len(ext) >= STAMP_SIZE and ext[0] == STAMP_MAGIC:
        return ext[STAMP_SIZE:]
    return ext
