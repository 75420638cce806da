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
from itertools import compress, pairwise, repeat
from operator import add, ne

__all__ = ["contains", "expand", "split", "valid"]


def split(offsets: Iterable[int]) -> tuple[list[int], list[list[int]]]:
    """``offsets`` (no duplicates) as the offsets alone and the runs of two or more
    (``[start, stop]``), both ascending. The breaks between runs are found by C-level passes
    over the sorted offsets; the Python loop is per run."""
    ordered = sorted(offsets)
    count = len(ordered)
    if not count:
        return [], []
    # where a run starts: the first offset, and each one that does not follow the one before
    follows = map(ne, ordered[1:], map(add, ordered, repeat(1)))
    starts = [0, *compress(range(1, count), follows), count]
    alone: list[int] = []
    runs: list[list[int]] = []
    for first, end in pairwise(starts):
        if end - first == 1:
            alone.append(ordered[first])
        else:
            runs.append([ordered[first], ordered[end - 1] + 1])
    return alone, runs


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
