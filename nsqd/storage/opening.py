"""Opening a partition log's directory: finding its segments by file name, and recovering them.

Sealed segments are trusted as they are (their records are verified when read); the last one
becomes the active segment with its tail validated (:meth:`~.segment.Segment.recover`). An index
file without its segment is removed; an empty directory gets an empty first segment.
"""

from __future__ import annotations

from pathlib import Path

from pnsq._fileio import fsync_directory

from .checkpoint import create_directory
from .layout import INDEX_NAME, SEGMENT_NAME
from .segment import Segment
from .segment_files import SegmentEnv


def open_segments(directory: Path, env: SegmentEnv) -> list[Segment]:
    """The segments of ``directory`` (created durably if missing) in offset order, the last one
    active. Raises ``OSError`` (and :class:`~.errors.StorageError` from a recovery)."""
    create_directory(directory)
    names = [p.name for p in directory.iterdir()]
    bases = sorted(int(m[1]) for m in map(SEGMENT_NAME.match, names) if m)
    for m in map(INDEX_NAME.match, names):
        if m and int(m[1]) not in bases:
            env.logger.warning("removing index %s without a segment", directory / m[0])
            (directory / m[0]).unlink()
    if not bases:
        segments = [Segment.create(directory, 0, env)]
        fsync_directory(directory)
        return segments
    segments = [Segment.sealed(directory, base, env) for base in bases[:-1]]
    segments.append(Segment.recover(directory, bases[-1], env))
    return segments
