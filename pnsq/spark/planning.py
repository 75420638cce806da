"""Offset planning for the Spark data source: plain Python, no pyspark, no I/O.

Offsets are log offsets: contiguous integers per partition, so ``end - start`` is a row count.
Spark compares offsets as JSON text, so every offset document has string partition keys in
ascending numeric order (``{"0": 5, "1": 7}``); :func:`offsets_json` builds them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2  # Kafka's sentinels in JSON offsets
LATEST = -1


class PlanningError(ValueError):
    """A bad option, or data that is gone while failOnDataLoss is on."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What a node reports for one partition (GET /partitions)."""

    partition: int
    earliest: int  # first offset still stored
    latest: int  # next offset to be written
    address: str = ""  # HTTP address of the node holding the partition


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """One Spark input partition: records ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int
    address: str = ""

    @property
    def count(self) -> int:
        """Number of records in the range."""
        return self.end - self.start


Offsets = dict[int, int]


def offsets_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """The JSON form Spark stores: string keys, ascending partition order (stable text)."""
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def offsets_from_json(document: Mapping[str, object]) -> Offsets:
    """Parse a ``{"<partition>": offset}`` document (also accepts ``{"<topic>": {...}}``)."""
    if len(document) == 1:
        (only,) = document.values()
        if isinstance(only, Mapping):
            document = only
    out: Offsets = {}
    for key, value in document.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise PlanningError(f"offset for partition {key!r} must be an integer, not {value!r}")
        try:
            out[int(key)] = value
        except ValueError as exc:
            raise PlanningError(f"partition {key!r} is not a number") from exc
    return out


def resolve_offsets(
    spec: str, infos: Mapping[int, PartitionInfo], *, default: str, allow_latest: bool = True
) -> Offsets:
    """Resolve ``earliest`` / ``latest`` / JSON (with -2 = earliest, -1 = latest) per partition.

    Partitions the JSON does not name take ``default`` (Kafka: new partitions start at earliest).
    """
    spec = (spec or default).strip()
    if spec == "earliest":
        return {p: i.earliest for p, i in infos.items()}
    if spec == "latest":
        if not allow_latest:
            raise PlanningError("startingOffsets=latest is not allowed for a batch query")
        return {p: i.latest for p, i in infos.items()}
    try:
        given = offsets_from_json(json.loads(spec))
    except json.JSONDecodeError as exc:
        raise PlanningError(f"offsets must be earliest, latest or JSON, not {spec!r}") from exc
    unknown = sorted(set(given) - set(infos))
    if unknown:
        raise PlanningError(f"unknown partition(s) {unknown}")
    fallback = resolve_offsets(default, infos, default=default)
    out: Offsets = {}
    for p, info in infos.items():
        value = given.get(p, fallback[p])
        if value == EARLIEST:
            value = info.earliest
        elif value == LATEST:
            if not allow_latest:
                raise PlanningError("-1 (latest) is not allowed as a starting offset here")
            value = info.latest
        elif value < 0:
            raise PlanningError(f"offset {value} for partition {p} is not valid")
        out[p] = value
    return out


def check_data_loss(
    start: Mapping[int, int], infos: Mapping[int, PartitionInfo], *, fail: bool
) -> Offsets:
    """Start offsets below what is still stored: raise (failOnDataLoss) or skip ahead."""
    out: Offsets = {}
    for p, offset in start.items():
        earliest = infos[p].earliest if p in infos else offset
        if offset < earliest:
            if fail:
                raise PlanningError(
                    f"partition {p}: offsets {offset}..{earliest - 1} are gone (retention); "
                    "set failOnDataLoss=false to skip them"
                )
            offset = earliest
        out[p] = offset
    return out


def limit_end(start: Mapping[int, int], latest: Mapping[int, int], max_rows: int | None) -> Offsets:
    """End offsets for one micro-batch: all available, or at most ``max_rows`` in total split
    over the partitions in proportion to their backlog (as Spark's Kafka source does)."""
    backlog = {p: max(0, latest.get(p, start[p]) - start[p]) for p in start}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return {p: start[p] + backlog[p] for p in start}
    if max_rows <= 0:
        return dict(start)
    shares = {p: backlog[p] * max_rows // total for p in backlog}
    spare = max_rows - sum(shares.values())
    # hand the rounding remainder to the partitions with the largest backlog left
    for p in sorted(backlog, key=lambda q: (-(backlog[q] - shares[q]), q)):
        if spare <= 0:
            break
        if shares[p] < backlog[p]:
            shares[p] += 1
            spare -= 1
    return {p: start[p] + shares[p] for p in start}


def plan_ranges(
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    infos: Mapping[int, PartitionInfo],
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """The Spark input partitions for ``[start, end)``: one per non-empty topic partition,
    big ones split so that there are about ``min_partitions`` (a hint, as in Kafka)."""
    ranges = [
        OffsetRange(topic, p, start[p], end[p], infos[p].address if p in infos else "")
        for p in sorted(start)
        if end.get(p, start[p]) > start[p]
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.count for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.count, round(min_partitions * r.count / total)))
        size, extra = divmod(r.count, pieces)
        at = r.start
        for i in range(pieces):
            stop = at + size + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, at, stop, r.address))
            at = stop
    return out


def next_batch_end(
    start: Mapping[int, int],
    infos: Mapping[int, PartitionInfo],
    *,
    max_rows: int | None,
    target: Mapping[int, int] | None = None,
    fail_on_data_loss: bool = True,
) -> Offsets:
    """A streaming source's ``latestOffset``: where the next micro-batch from ``start`` ends.

    Partitions new since ``start`` begin at their earliest offset; ``target`` (what was latest
    when a ``Trigger.AvailableNow`` query started) caps the end; ``max_rows`` is split over the
    partitions by backlog (:func:`limit_end`). Without ``fail_on_data_loss``, rows deleted
    before ``start`` do not count against ``max_rows``. An end is never before its start, so a
    partition gone from ``infos`` stays where it was.
    """
    begin = dict(start)
    for p, info in infos.items():
        begin.setdefault(p, info.earliest)
    latest = {p: infos[p].latest if p in infos else begin[p] for p in begin}
    if target is not None:
        latest = {p: min(latest[p], target.get(p, begin[p])) for p in begin}
    if not fail_on_data_loss:
        begin = {p: max(o, infos[p].earliest) if p in infos else o for p, o in begin.items()}
    end = limit_end(begin, latest, max_rows)
    return {p: max(end[p], begin[p]) for p in sorted(begin)}


def batch_start(
    start: Mapping[int, int],
    end: Mapping[int, int],
    infos: Mapping[int, PartitionInfo],
    *,
    fail_on_data_loss: bool = True,
) -> Offsets:
    """Where a planned micro-batch ``[start, end)`` really starts, per partition of ``end``:
    a partition missing from ``start`` at its earliest offset, and rows deleted since
    (retention) raising :class:`PlanningError` or skipped (:func:`check_data_loss`)."""
    first = {p: start.get(p, infos[p].earliest if p in infos else end[p]) for p in end}
    first = check_data_loss(first, infos, fail=fail_on_data_loss)
    return {p: min(o, end[p]) for p, o in first.items()}
