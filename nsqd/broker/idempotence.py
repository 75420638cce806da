"""Idempotent publishing on this node: a partition's producer state (:mod:`nsqd.core.producers`)
kept in step with its log, as leader and as replica, and across restarts.

* As leader, :func:`publish_numbered` judges a numbered publish before it is appended: new
  numbers are stamped into the records (:mod:`nsqd.storage.stamp`) and appended (those of a
  publish partly stored already, only the new ones); a retry of numbers all stored appends
  nothing and gives the offset to acknowledge it at. The publish reactor appends the runs of
  several producers at once (:func:`publish_runs`): only runs whose numbers all come next;
  any other is judged alone by :func:`publish_numbered`.
* As replica, :func:`copied` reads the stamps of the records a leader's batch brought: when
  this node is promoted, it already knows what every producer stored.
* :func:`truncated`: a replica's log cut back to a new leader's loses the publishes after the
  cut, and so does the state.
* The state is saved with the partition's checkpoint (``state.json``, :func:`checkpoint`) as
  it stood at a log end; :func:`restore` reads it back when the partition is opened and reads
  the stamps of the records appended after that end (what the last checkpoint missed), after
  dropping what a crash took from the log's tail. A partition of the release before (a
  ``state.json`` without it, records without stamps) gets it saved when opened, before it takes
  any write (:func:`saved_state`), so a later start never looks for stamps in its old records;
  a partition with no ``state.json`` at all is new since its last checkpoint, and its records
  are read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from ..core.producers import Appended, Verdict
from ..storage.batch import BodyBatch, join
from ..storage.errors import StorageError
from ..storage.record import NewRecord, Record
from ..storage.stamp import read_stamp, stamped, stamps, stamps_of
from .partition import Partition

log = logging.getLogger("nsqd.broker")

#: state.json's key
KEY = "producers"
#: seconds between two warnings of a partition's producers forgotten within the ttl
EVICTIONS_LOG_INTERVAL = 60.0
SCAN_BATCH = 1000  # records read at a time when stamps are read back from the log
#: seconds between checkpoints saved for a change of the producer state alone
CHECKPOINT_INTERVAL = 1.0
#: records read back for stamps when a partition has no saved producer state to start from
#: (it is unreadable, or the partition is new since its last checkpoint)
SCAN_WITHOUT_CHECKPOINT = 100_000


def publish_numbered(
    partition: Partition,
    entries: Sequence[NewRecord],
    producer: int,
    first: int,
    now: float,
    append: Callable[[Sequence[NewRecord]], Sequence[Record]],
) -> Sequence[Record] | int:
    """``producer``'s publish of ``entries`` numbered from ``first`` to ``partition``
    (led here): the records ``append`` stored, or, for numbers stored already, the offset to
    acknowledge it at. Raises :class:`~nsqd.core.producers.SequenceError`."""
    producers = partition.producers
    verdict, found = producers.check(producer, first, len(entries), now)
    if verdict is Verdict.DUPLICATE:
        return found  # the offset to acknowledge it at
    start = first + found  # ``found`` first ones stored already: left out
    end = partition.log.end_offset
    try:
        records = append(numbered(entries[found:] if found else entries, producer, start))
    except Exception:
        written(partition, end, now)
        raise
    # the append took the log's end on: its last record is at ``end + len - 1`` (read so, not
    # as ``records[-1]``, which would make that record)
    producers.record(producer, start, len(records), end + len(records) - 1, now)
    partition.producers_changed = True
    return records


#: one publish among those appended together: its messages, and its producer and first number
#: (None: not numbered)
Run = tuple[BodyBatch, tuple[int, int] | None]


def publish_runs(
    partition: Partition,
    runs: Sequence[Run],
    now: float,
    append: Callable[[BodyBatch], Sequence[Record]],
) -> list[bool] | None:
    """Several publishers' ``runs`` to ``partition`` (led here) appended together by
    ``append``, numbered ones stamped (the publish reactor's): which were appended (None: all);
    the others (:meth:`~nsqd.core.producers.Producers.take`) were not, and must be judged
    alone (:func:`publish_numbered`)."""
    producers = partition.producers
    end = partition.log.end_offset  # the append takes the log's end on
    admitted, publishes = producers.take(runs, end, now)
    taken = (
        runs if admitted is None else [run for run, ok in zip(runs, admitted, strict=True) if ok]
    )
    if taken:
        try:
            append(joined(taken, publishes))
        except Exception:
            producers.truncate(end)  # taken as appended: not so
            written(partition, end, now)
            raise
        if publishes:
            partition.producers_changed = True
    return admitted


def numbered(entries: Sequence[NewRecord], producer: int, first: int) -> Sequence[NewRecord]:
    """``entries`` stamped as ``producer``'s numbers ``first, first + 1, ...`` (a batch of
    bodies stays one: the log's fast path)."""
    if isinstance(entries, BodyBatch) and entries.exts is None:
        return stamped_batch(entries, producer, first)
    return [
        replace(entry, ext=stamped(producer, first + index, entry.ext))
        for index, entry in enumerate(entries)
    ]


def stamped_batch(batch: BodyBatch, producer: int, first: int) -> BodyBatch:
    """``batch`` (no exts) with its bodies stamped as ``producer``'s numbers from ``first``."""
    exts = stamps(producer, first, len(batch.bodies))
    return BodyBatch(batch.timestamp_ns, batch.bodies, batch.deliver_at_ns, batch.timestamps, exts)


def joined(runs: Sequence[Run], publishes: Sequence[Appended]) -> BodyBatch:
    """The messages of ``runs`` (at least one; all for immediate delivery; none with exts)
    as one batch, the numbered ones stamped (several producers' publishes appended together;
    ``publishes``: the numbered ones among them, as appended). The stamps are gathered as
    numbers (:func:`~nsqd.storage.stamp.stamps_of`): a stamp made per message, and a batch or
    stamps object per run, cost a synchronous producer's PUB a third of what numbering it
    did."""
    if len(publishes) == len(runs):  # all numbered (a run alone is stamped in place)
        batch = join([batch for batch, _ in runs])
        batch.exts = stamps_of(publishes)
        return batch
    if publishes:  # numbered runs among plain ones: each its stamps, joined as a list
        for batch, numbering in runs:
            if numbering is not None:
                batch.exts = stamps(numbering[0], numbering[1], len(batch.bodies))
    return join([batch for batch, _ in runs])


def written(partition: Partition, end: int, now: float) -> None:
    """An append from ``end`` (the log's end before it) failed: the records it stored before
    it failed (a batch that crossed into a new segment the disk had no room for keeps its
    first part) are known by their stamps, as :func:`restore` would read them, so a retry of
    the publish stores only what they lack. Not acknowledged, they stay stored, as a plain
    publish's part does."""
    partition_log = partition.log
    at = end
    try:
        while at < partition_log.end_offset:
            records = partition_log.read(at, SCAN_BATCH)
            if not records:
                break
            copied(
                partition,
                [(r.offset, *stamp) for r in records if (stamp := read_stamp(r.ext)) is not None],
                now,
            )
            at = records[-1].offset + 1
    except StorageError as exc:  # read back at the next open (restore)
        log.warning("PARTITION(%s): stamps of a failed append unread: %s", partition.directory, exc)


def copied(partition: Partition, stamps: Iterable[tuple[int, int, int]], now: float) -> None:
    """A leader's records appended here as replica: ``(offset, producer, sequence)`` of each
    stamped one."""
    producers = partition.producers
    for offset, producer, sequence in stamps:
        producers.record(producer, sequence, 1, offset, now)
        partition.producers_changed = True


def expire(partition: Partition, now: float) -> None:
    """Forget the producers idle past the ttl (the checkpoint pass, every sync)."""
    if partition.producers.expire(now):
        partition.producers_changed = True


def report_evictions(topic: str, partition: Partition, now: float) -> None:
    """Log producers forgotten for --max-producers while seen within --producer-state-ttl (a
    retry of theirs is no longer recognised), at most every :data:`EVICTIONS_LOG_INTERVAL`
    seconds (``now``: monotonic)."""
    producers = partition.producers
    new = producers.evicted_early - producers.evicted_reported
    if new <= 0 or now < producers.report_after:
        return
    producers.evicted_reported = producers.evicted_early
    producers.report_after = now + EVICTIONS_LOG_INTERVAL
    log.warning(
        "PARTITION(%s/%d): %d numbering producers (HTTP Idempotency-Keys included) forgotten "
        "past --max-producers=%d within --producer-state-ttl, the last %.1f s after it was "
        "seen: a retry of their publishes may be stored twice; raise --max-producers",
        topic,
        partition.number,
        new,
        producers.limit,
        producers.last_window,
    )


def truncated(partition: Partition, end: int) -> None:
    """The log was cut back to ``end``."""
    partition.producers.truncate(end)
    partition.dirty = True


def checkpoint_due(partition: Partition, now: float) -> bool:
    """Whether the producer state changed and was last saved :data:`CHECKPOINT_INTERVAL` or
    more before ``now`` (monotonic): a change alone does not make the sync pass rewrite
    ``state.json`` (once per fsync, that cost a numbered publish a fifth more CPU); what the
    last checkpoint misses is read back from the log's stamps at open."""
    return partition.producers_changed and now - partition.producers_saved >= CHECKPOINT_INTERVAL


def saved(partition: Partition, now: float) -> None:
    """A checkpoint holding the producer state (:func:`checkpoint`) was written at ``now``."""
    partition.producers_changed = False
    partition.producers_saved = now


def checkpoint(partition: Partition) -> dict[str, object]:
    """The state as ``state.json`` keeps it: every producer, valid up to the log's end, with
    the epoch of the record before that end (whether a log read back later is still the same
    history, :func:`restore`)."""
    rows = [
        [f"{producer:016x}", touched, [list(entry) for entry in recent]]
        for producer, touched, recent in partition.producers.snapshot()
    ]
    records = partition.log
    end = records.end_offset
    document: dict[str, object] = {"end": end, "rows": rows}
    try:
        last = records.read(end - 1, 1) if end > records.start_offset else []  # cached
    except StorageError as exc:  # saved without: restore reads the producers from the log
        log.warning("PARTITION(%s): last record unreadable: %s", partition.directory, exc)
        last = []
    if last and last[0].offset == end - 1:
        document["epoch"] = last[0].epoch
    return document


def restore(partition: Partition, saved: Mapping[str, object] | None, now: float) -> None:
    """The state of a partition just opened: its checkpoint (if any, and well formed), less
    what the log no longer holds, plus the stamps of the records after its end (each touched
    at its publish time), less the producers idle past the ttl at ``now``."""
    producers = partition.producers
    end = partition.log.end_offset
    start = partition.log.start_offset
    document = saved.get(KEY) if saved else None
    if isinstance(document, dict):
        try:
            rows = _rows(document.get("rows"))
            scan_from = int(document["end"])
            _check_history(partition, scan_from, document.get("epoch"))
            producers.restore(rows)
        except (KeyError, TypeError, ValueError) as exc:
            where = partition.directory
            log.warning("PARTITION(%s): producer state unusable (%s): from the log", where, exc)
            producers.restore([])
            scan_from = end - SCAN_WITHOUT_CHECKPOINT
    elif saved:  # a state.json of the release before: no stamps (saved with the state at open)
        scan_from = end
    else:  # no state.json yet: a partition new since its last checkpoint (short, read it)
        scan_from = end - SCAN_WITHOUT_CHECKPOINT
    producers.truncate(end)
    at = max(min(scan_from, end), start)
    while at < end:
        records = partition.log.read(at, SCAN_BATCH)
        if not records:
            break  # damage: the rest is read as the log reads it (stamps there are lost)
        for record in records:
            stamp = read_stamp(record.ext)
            if stamp is not None:
                producers.record(stamp[0], stamp[1], 1, record.offset, record.timestamp_ns / 1e9)
        at = records[-1].offset + 1
    producers.expire(now)  # read back from old records: forgotten once, forgotten again


def _check_history(partition: Partition, end: int, epoch: object) -> None:
    """Raise ValueError unless the log up to ``end`` (or its end, if shorter) is the history
    a checkpoint saved at ``end`` (the record before it of ``epoch``) described. A replica cut
    back to a new leader's log and then written again past the cut holds other records at
    those offsets: the checkpoint's producers there would be stored numbers that are not (an
    acknowledged retry lost). A record is the same when its offset and epoch are (one leader
    writes an offset once per epoch, and a replica's log matches its leader's before it
    copies); a log shorter than ``end`` is the same history when its last record is of no
    later epoch (a new leader's records, written after the cut, are)."""
    probe = min(end, partition.log.end_offset) - 1
    if probe < partition.log.start_offset:
        return  # nothing of it kept: nothing to tell apart
    if not isinstance(epoch, int):
        raise ValueError("no epoch to check the log against")
    records = partition.log.read(probe, 1)
    if not records or records[0].offset != probe:
        raise ValueError(f"offset {probe} unreadable")
    found = records[0].epoch
    if found > epoch or (probe == end - 1 and found != epoch):
        raise ValueError(f"the log was rewritten: offset {probe} of epoch {found}, not {epoch}")


def saved_state(state: Mapping[str, object], partition: Partition) -> dict[str, object] | None:
    """``state`` (a ``state.json`` as loaded, of the release before) with the producer state
    added, to be saved at once; None when there is nothing to add (it has one, or there is no
    ``state.json``: a new partition, whose records :func:`restore` reads)."""
    if not state or KEY in state:
        return None
    return {**state, KEY: checkpoint(partition)}


def _rows(raw: object) -> list[tuple[int, float, list[tuple[int, int, int]]]]:
    if not isinstance(raw, list):
        raise TypeError("rows is not a list")
    rows = []
    for producer, touched, recent in raw:
        entries = [(int(a), int(b), int(c)) for a, b, c in recent]
        rows.append((int(producer, 16), float(touched), entries))
    return rows
