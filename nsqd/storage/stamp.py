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
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, repeat
from typing import Final, TypeAlias, overload

PRODUCER_STAMP: Final = struct.Struct(
    ">B"  # magic: STAMP_MAGIC (JSON, the rest of an ext, never starts with it)
    "Q"  # producer: the publishing producer's 64-bit id (IDENTIFY's pnsq_producer, hashed)
    "Q"  # sequence: the record's number among that producer's messages to the partition
)
STAMP_MAGIC: Final = 0xFE
STAMP_SIZE: Final = PRODUCER_STAMP.size

_pack: Final = PRODUCER_STAMP.pack
_unpack_from: Final = PRODUCER_STAMP.unpack_from
#: a stamp's head, the same for every record of a producer's run (bar a run crossing a multiple
#: of 2**32), so packed once a run (:func:`head_of`); only the bottom half of the sequence is
#: packed per record, as a 32-bit field (CPython packs one from a small int for a fraction of
#: what a 64-bit field costs). Head and bottom half are :data:`PRODUCER_STAMP`'s bytes.
STAMP_HEAD: Final = struct.Struct(
    ">B"  # magic: STAMP_MAGIC
    "Q"  # producer
    "I"  # top: the sequence's top 32 bits
)
HEADED_STAMP: Final = struct.Struct(
    f">{STAMP_HEAD.size}s"  # head: STAMP_HEAD's bytes
    "I"  # bottom: the sequence's bottom 32 bits
)
assert HEADED_STAMP.size == STAMP_SIZE
_pack_headed: Final = HEADED_STAMP.pack
_SPAN: Final = 1 << 32  # sequences under one head
_BOTTOM: Final = _SPAN - 1  # a sequence's bottom half
_HEADS: dict[int, tuple[int, bytes]] = {}  # head_of's: a producer's last top half and head
_HEADS_MAX: Final = 4096


def stamped(producer: int, sequence: int, header: bytes = b"") -> bytes:
    """The ext of a record ``producer`` stored as number ``sequence``, before ``header``."""
    return _pack(STAMP_MAGIC, producer, sequence) + header


def head_of(producer: int, top: int) -> bytes:
    """The head (:data:`STAMP_HEAD`) of ``producer``'s stamps whose sequence's top half is
    ``top``, packed once and kept (the last top half of up to :data:`_HEADS_MAX` producers)."""
    kept = _HEADS.get(producer)
    if kept is not None and kept[0] == top:
        return kept[1]
    if len(_HEADS) >= _HEADS_MAX:
        _HEADS.clear()
    head = STAMP_HEAD.pack(STAMP_MAGIC, producer, top)
    _HEADS[producer] = top, head
    return head


#: consecutive stamps of one producer under one head: ``(head, bottom, count)``, the stamps of
#: sequences ``top << 32 | bottom`` .. ``+ count - 1`` (never past the head's last)
Span: TypeAlias = tuple[bytes, int, int]
#: the typecode of a span column (bottoms, counts): C unsigned 64-bit ints
_COLUMN: Final = "Q"


def spans_of(producer: int, first: int, count: int) -> list[Span]:
    """The spans of ``producer``'s stamps ``first, first + 1, ...``: one per head they cross
    (one, unless they cross a multiple of 2**32; none for no stamps)."""
    spans: list[Span] = []
    top, bottom = divmod(first, _SPAN)
    while count > 0:
        here = min(count, _SPAN - bottom)  # up to the next multiple of 2**32
        spans.append((head_of(producer, top), bottom, here))
        count -= here
        top, bottom = top + 1, 0
    return spans


class Stamps(Sequence[bytes]):
    """The exts of consecutive records that are each a producer stamp with no header: a numbered
    publish's (or several producers' appended together), kept as spans of one producer's
    consecutive numbers (:data:`Span`: one per publish, not a head and a number per record).
    Read as a sequence it holds each record's :func:`stamped` ext, made when asked for; the log
    packs a span's head and each number's bottom half with each record's header instead
    (:mod:`.bodies`), so a stamp written is never made as bytes of its own.

    The spans are kept as three columns — each span's head (a reference to the producer's one
    head object), bottom and count, the last two as C integers in arrays — not as a tuple per
    span: the tail cache keeps the stamps of every single PUB it holds, and an object per
    message (a tuple and its int, allocated at the append and freed at the eviction, cold by
    then) cost a synchronous producer's PUB more than the rest of its numbering in the cache.
    The columns are this object's own and grow in place (:meth:`add`, :meth:`extend`); spans
    are not joined (appending one is cheaper than comparing it with the last)."""

    __slots__ = ("_bottoms", "_counts", "_heads", "_len", "_starts")

    def __init__(
        self,
        heads: list[bytes] | None = None,
        bottoms: array[int] | None = None,
        counts: array[int] | None = None,
        length: int | None = None,
    ) -> None:
        """The columns (this object's own from now on; all three or none); ``length``: the
        stamps' count when the caller summed it already."""
        self._heads: list[bytes] = [] if heads is None else heads
        self._bottoms: array[int] = array(_COLUMN) if bottoms is None else bottoms
        self._counts: array[int] = array(_COLUMN) if counts is None else counts
        self._len = sum(self._counts) if length is None else length
        #: the first stamp's index of each span, up to the last one a read needed (found by
        #: bisection when sliced; :meth:`_index` lays out the rest only when it is read: a
        #: numbered publish's append and the tail cache's growth never need it)
        self._starts: list[int] = []

    def add(self, producer: int, first: int, count: int) -> None:
        """Stamps for ``count`` more records: ``producer``'s ``first, first + 1, ...``."""
        self.extend(stamps_of([(producer, first, count)]))

    def extend(self, other: Stamps) -> None:
        """Add ``other``'s stamps after these."""
        self._heads += other._heads
        self._bottoms += other._bottoms
        self._counts += other._counts
        self._len += other._len

    def columns(self) -> tuple[Iterable[bytes], Iterable[int]]:
        """Each stamp's head and its number's bottom half, in order (what the encoding loop
        packs; not to be changed): made as lists only for stamps of several spans, some of
        more than one stamp."""
        heads = self._heads
        if len(heads) == 1:  # a numbered publish's
            bottom = self._bottoms[0]
            return repeat(heads[0], self._len), range(bottom, bottom + self._len)
        if len(heads) == self._len:  # each span one stamp (none at all too): single PUBs
            return heads, self._bottoms
        each_head: list[bytes] = []
        each_bottom: list[int] = []
        for head, bottom, count in zip(heads, self._bottoms, self._counts, strict=True):
            if count == 1:  # a synchronous producer's PUB among others'
                each_head.append(head)
                each_bottom.append(bottom)
            else:
                each_head += repeat(head, count)
                each_bottom += range(bottom, bottom + count)
        return each_head, each_bottom

    def copy(self) -> Stamps:
        """The same stamps, in columns of their own."""
        return Stamps(list(self._heads), self._bottoms[:], self._counts[:], self._len)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[bytes]:
        return map(_pack_headed, *self.columns())

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Stamps: ...

    def __getitem__(self, index: int | slice) -> bytes | Stamps:
        if isinstance(index, slice):
            picked = range(self._len)[index]
            if picked.step != 1:
                singles = [self._span_at(i) for i in picked]
                return Stamps(
                    [head for head, _ in singles],
                    array(_COLUMN, [bottom for _, bottom in singles]),
                    array(_COLUMN, repeat(1, len(singles))),
                    len(singles),
                )
            return self._cut(picked.start, picked.stop)
        at = index + self._len if index < 0 else index
        if not 0 <= at < self._len:
            raise IndexError("stamp index out of range")
        return _pack_headed(*self._span_at(at))

    def _index(self) -> list[int]:
        """Each span's first stamp's index, laid out now for the spans added since the last
        read that needed it."""
        starts, counts = self._starts, self._counts
        known = len(starts)
        if known < len(counts):
            at = starts[-1] + counts[known - 1] if known else 0
            starts += accumulate(counts[known:-1], initial=at)
        return starts

    def _span_at(self, at: int) -> tuple[bytes, int]:
        """The head and bottom half of stamp ``at``."""
        starts = self._index()
        i = bisect_right(starts, at) - 1
        return self._heads[i], self._bottoms[i] + at - starts[i]

    def _cut(self, start: int, stop: int) -> Stamps:
        """Stamps ``[start, stop)`` (``0 <= start``, ``stop <= len``): the spans between the two
        found by bisection (a tail cache's run of single PUBs holds a span per record), the
        first and last trimmed."""
        if start >= stop:
            return Stamps()
        starts = self._index()
        i = bisect_right(starts, start) - 1  # the span holding ``start``
        j = bisect_left(starts, stop, i)  # past the span holding ``stop - 1``
        heads, bottoms, counts = self._heads[i:j], self._bottoms[i:j], self._counts[i:j]
        end = starts[j - 1] + counts[-1]
        if end > stop:
            counts[-1] -= end - stop
        cut = start - starts[i]
        if cut:
            bottoms[0] += cut
            counts[0] -= cut
        return Stamps(heads, bottoms, counts, stop - start)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the list it stands for

    def __repr__(self) -> str:
        return f"Stamps({list(self)!r})"


def stamps_of(publishes: Iterable[tuple[int, int, int]]) -> Stamps:
    """The stamps of publishes appended one after another, each ``(producer, first, count)``
    (:data:`~nsqd.core.producers.Appended`): :meth:`Stamps.add` of each, in one loop
    (the publish reactor's turn: a synchronous producer's PUB each)."""
    heads: list[bytes] = []
    head = heads.append
    bottoms: list[int] = []
    bottom_of = bottoms.append
    counts: list[int] = []
    count_of = counts.append
    kept_heads = _HEADS
    length = 0
    for producer, first, count in publishes:
        bottom = first & _BOTTOM
        length += count
        if 0 < count <= _SPAN - bottom:  # under one head
            kept = kept_heads.get(producer)
            top = first >> 32
            head(kept[1] if kept is not None and kept[0] == top else head_of(producer, top))
            bottom_of(bottom)
            count_of(count)
        else:
            for span_head, span_bottom, here in spans_of(producer, first, count):
                head(span_head)
                bottom_of(span_bottom)
                count_of(here)
    # the columns kept as arrays: no int object per stamp outlives the append
    return Stamps(heads, array(_COLUMN, bottoms), array(_COLUMN, counts), length)


def stamps(producer: int, first: int, count: int) -> Stamps:
    """The exts of ``count`` records ``producer`` stored as numbers ``first, first + 1, ...``
    (:func:`stamped` of each, with no header)."""
    return stamps_of([(producer, first, count)])


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
