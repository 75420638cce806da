"""Writing a replica's intact copy of damaged records over them, in place.

A follower stores its leader's record bytes as they came, so its copy of a damaged region
(:class:`~.corruption.Region`: offsets ``[first, resumed)`` at bytes ``[position, position +
nbytes)`` of one segment) is the same size as what the damage hit: written over it, the
segment reads whole again and its index stays right (entries point at record starts, which
do not move). A copy that is not exactly that (checks fail, another count or size, a lost-record
marker) is refused and the region settled: reads skip it, as without a replica.
"""

from __future__ import annotations

from .corruption import SkippedRegions
from .encoded_run import check_encoded
from .errors import CorruptRecordError
from .segment import Segment


def repair_region(
    segments: list[Segment], skipped: SkippedRegions, first: int, data: bytes
) -> bool:
    """Write ``data`` over the held region at offset ``first`` of ``segments``; True when
    done (durable), False when refused (see the module) or no such region is held. Raises
    ``OSError`` (the region settled)."""
    region = skipped.held_at(first)
    if region is None:
        return False
    segment = next((s for s in segments if s.log_path.name == region.segment), None)
    try:
        run = check_encoded(data, first)
    except CorruptRecordError:
        run = None
    if (
        segment is None
        or run is None
        or run.lost
        or run.count != region.resumed - region.first
        or len(data) != region.nbytes
    ):
        skipped.settle(first)
        return False
    try:
        segment.overwrite(region.position, data)
    except OSError:
        skipped.settle(first)
        raise
    skipped.repaired(region)
    return True
