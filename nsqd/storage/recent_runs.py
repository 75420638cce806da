"""Where a segment's latest appended runs lie in its file, so that a leader ships them to its
followers as they were written (one ``pread``) instead of encoding its records a second time;
and the newest run's bytes themselves, so that a follower keeping up gets the last append
without even that read.

A run is what one append wrote with one ``pwrite``: consecutive records ``[first, end)`` at
bytes ``[start, stop)`` of the segment file. Only the active segment's newest runs are
remembered (a follower that keeps up asks for what was appended last); sealing the segment or
truncating it forgets them all.
"""

from __future__ import annotations

from collections import deque
from typing import Final, NamedTuple

REMEMBERED: Final = 64  # runs kept by the active segment (a follower keeping up asks for the last)


class Run(NamedTuple):
    first: int  # offset of the first record
    end: int  # offset after the last record
    start: int  # byte position of the first record in the segment file
    stop: int  # byte position after the last record


class RecentRuns:
    """The newest :data:`REMEMBERED` runs of one segment, oldest first."""

    def __init__(self) -> None:
        self._runs: deque[Run] = deque(maxlen=REMEMBERED)
        self._newest: bytes | None = None  # the newest run's bytes, when kept

    def add(self, first: int, end: int, start: int, stop: int, data: object = None) -> None:
        """Remember the run just written; ``data``, its bytes, are kept until the next run
        (only an immutable ``bytes``: a view of a buffer its owner reuses is not)."""
        self._runs.append(Run(first, end, start, stop))
        self._newest = data if type(data) is bytes and len(data) == stop - start else None

    def clear(self) -> None:
        self._runs.clear()
        self._newest = None

    def newest_bytes(self, span: Run) -> bytes | None:
        """The bytes of ``span`` (:meth:`span`) when it is the newest run, as written; else
        None (read them from the file)."""
        newest = self._newest
        if newest is None or span != self._runs[-1]:
            return None
        return newest

    def position(self, offset: int) -> int | None:
        """The byte position of the record at ``offset`` when a remembered run starts or ends
        there (where a follower's acknowledgement usually falls), else None."""
        for run in reversed(self._runs):
            if run.first == offset:
                return run.start
            if run.end == offset:
                return run.stop
        return None

    def span(self, offset: int, max_bytes: int, hard_limit: int) -> Run | None:
        """The runs from the one starting at ``offset`` on, as one span of the file: as many
        contiguous runs as fit in ``max_bytes`` (the first always, unless it is larger than
        ``hard_limit``). None when no remembered run starts at ``offset``."""
        runs = self._runs
        index = len(runs) - 1
        while index >= 0 and runs[index].first > offset:
            index -= 1
        if index < 0 or runs[index].first != offset:
            return None
        first = runs[index]
        if first.stop - first.start > hard_limit:
            return None
        last = first
        for run in list(runs)[index + 1 :]:
            if (
                run.first != last.end
                or run.start != last.stop
                or run.stop - first.start > max_bytes
            ):
                break
            last = run
        return Run(offset, last.end, first.start, last.stop)
