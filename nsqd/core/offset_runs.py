"""A set of offsets as runs of consecutive ones: how a cursor's checkpoint writes its
out-of-order FINs. Pure.

A consumer that holds one message while the others are FINed (a TCP consumer gone with
messages in flight: they wait for their timeout, then at the back of the channel) leaves every
later FIN above the confirmed offset; written one by one, the checkpoint of an HTTP consumer's
channel grew by a hundred offsets an ack and every ack's journal record carried all of them
(docs/benchmarks.md). Batches are FINed whole, so the set is a few long runs: a checkpoint
keeps each run as ``[start, stop]`` (``stop`` excluded) and each offset alone as itself.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, repeat
from operator import add, ne

__all__ = ["Runs", "contains", "expand", "split", "valid"]


def split(offsets: Iterable[int]) -> tuple[list[int], list[list[int]]]:
    """``offsets`` (no duplicates) as the offsets alone and the runs of two or more
    (``[start, stop]``), both ascending."""
    return _parts(*_bounds(offsets))


def _bounds(offsets: Iterable[int]) -> tuple[list[int], list[int]]:
    """Where each run of ``offsets`` (no duplicates) starts and stops, ascending. The breaks
    between runs are found by C-level passes over the sorted offsets; the Python work is per
    run."""
    ordered = sorted(offsets)
    count = len(ordered)
    if not count:
        return [], []
    # where a run starts: the first offset, and each one that does not follow the one before
    follows = map(ne, ordered[1:], map(add, ordered, repeat(1)))
    breaks = list(compress(range(1, count), follows))
    starts = [ordered[at] for at in (0, *breaks)]
    stops = [ordered[at - 1] + 1 for at in (*breaks, count)]
    return starts, stops


def _parts(starts: Sequence[int], stops: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """The runs ``starts[i] .. stops[i]`` as the offsets alone and the runs of two or more."""
    alone: list[int] = []
    runs: list[list[int]] = []
    for start, stop in zip(starts, stops, strict=True):
        if stop - start == 1:
            alone.append(start)
        else:
            runs.append([start, stop])
    return alone, runs


class Runs:
    """A set of offsets kept as its runs of consecutive ones, ascending, disjoint and apart
    (``[start, stop)`` each: a run of one is one offset): what a cursor keeps beside its set of
    FINs so that a checkpoint costs the runs, not the FINs. Adding finds the place by bisection
    and joins the neighbours it touches."""

    __slots__ = ("_starts", "_stops")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._stops: list[int] = []  # ``_stops[i]`` ends the run from ``_starts[i]``

    @classmethod
    def of(cls, offsets: Iterable[int]) -> Runs:
        """The runs of ``offsets`` (no duplicates), found at once."""
        made = cls()
        made._starts, made._stops = _bounds(offsets)
        return made

    def add(self, offsets: int | range) -> None:
        """Add one offset, or a ``range`` of them (step 1)."""
        if isinstance(offsets, int):
            start, stop = offsets, offsets + 1
        else:
            start, stop = offsets.start, offsets.stop
        if start >= stop:
            return
        starts, stops = self._starts, self._stops
        # the runs it touches: from the last one starting at or before ``start`` if that one
        # reaches ``start``, through the last one starting at or before ``stop``
        first = bisect_right(starts, start) - 1
        if first < 0 or stops[first] < start:
            first += 1
        last = bisect_right(starts, stop)  # one past the last run it touches
        if first < last:  # joined with those
            start = min(start, starts[first])
            stop = max(stop, stops[last - 1])
        starts[first:last] = [start]
        stops[first:last] = [stop]

    def drop_below(self, offset: int) -> None:
        """Remove every offset under ``offset``."""
        starts, stops = self._starts, self._stops
        cut = bisect_right(stops, offset)  # runs wholly under ``offset``
        if cut:
            del starts[:cut], stops[:cut]
        if starts and starts[0] < offset:
            starts[0] = offset

    def parts(self) -> tuple[list[int], list[list[int]]]:
        """As :func:`split` gives them: the offsets alone, and the runs of two or more."""
        return _parts(self._starts, self._stops)

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        at = bisect_right(self._starts, offset) - 1
        return at >= 0 and offset < self._stops[at]

    def __len__(self) -> int:
        return sum(self._stops) - sum(self._starts)


def expand(alone: Iterable[int], runs: Iterable[Sequence[int]]) -> Iterator[int]:
    """Every offset of :func:`split`'s two parts."""
    yield from alone
    for start, stop in runs:
        yield from range(start, stop)


def contains(runs: Sequence[Sequence[int]], offset: int) -> bool:
    """Whether ``offset`` is in one of ``runs`` (ascending, as :func:`split` gives them)."""
    at = bisect_right(runs, offset, key=_start) - 1
    return at >= 0 and offset < runs[at][1]


def valid(runs: object) -> bool:
    """Whether ``runs`` has the shape :func:`split` gives them (read from a file)."""
    return isinstance(runs, list) and all(
        isinstance(run, list)
        and len(run) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in run)
        and run[0] < run[1]
        for run in runs
    )


def _start(run: Sequence[int]) -> int:
    return run[0]
