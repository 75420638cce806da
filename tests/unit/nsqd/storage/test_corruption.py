"""Damage in the middle of a segment, sealed or current: reads (and, in the current segment's
tail, recovery) step over it, deliver the rest, report it once.

A torn tail of the current segment (nothing intact after the bad record) is still truncated at
recovery (tests/unit/nsqd/storage/test_log.py); sealed segments are never truncated.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nsqd.core.cursor import PartitionCursor
from nsqd.storage import CacheBudget, NewRecord, PartitionLog
from nsqd.storage.layout import LOG_SUFFIX
from nsqd.storage.record import HEADER_SIZE

COUNT = 300
BODY = 200


def _log(directory: Path) -> PartitionLog:
    return PartitionLog.open(
        directory, partition=3, max_bytes_per_file=16 * 1024, cache=CacheBudget(0)
    )


def _write(directory: Path) -> list[Path]:
    log = _log(directory)
    for i in range(COUNT):
        log.append([NewRecord(timestamp_ns=i + 1, body=b"%05d" % i + b"." * (BODY - 5))])
    log.close()
    return sorted(directory.glob(f"*{LOG_SUFFIX}"))


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _read_all(log: PartitionLog) -> list[int]:
    """Read as a consumer does: from the last offset returned plus one, until the end."""
    offsets: list[int] = []
    offset = log.start_offset
    while offset < log.end_offset:
        records = log.read(offset, 7)
        assert records, f"empty read at {offset} below end {log.end_offset}"
        offsets.extend(r.offset for r in records)
        offset = records[-1].offset + 1
    return offsets


def test_a_flipped_byte_mid_segment_skips_only_the_damaged_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    segments = _write(tmp_path / "p")
    assert len(segments) >= 4
    sealed = segments[1]
    _flip(sealed, sealed.stat().st_size // 2)
    log = _log(tmp_path / "p")
    with caplog.at_level(logging.ERROR):
        first = _read_all(log)
        again = _read_all(log)
    assert first == again
    assert len(first) == COUNT - 1  # one record lost, every other one delivered in order
    assert first == sorted(first)
    assert log.skipped.records == 1
    assert BODY < log.skipped.bytes < 2 * BODY + 100
    lines = [r.getMessage() for r in caplog.records if "skipped corrupt records" in r.getMessage()]
    assert len(lines) == 1  # reported once, not on every read
    assert "partition 3" in lines[0]
    assert sealed.name in lines[0]
    log.close()


def test_damage_in_several_places_and_at_a_segment_start(tmp_path: Path) -> None:
    segments = _write(tmp_path / "p")
    _flip(segments[0], 10)  # the first record's CRC field
    _flip(segments[1], segments[1].stat().st_size // 3)
    _flip(segments[1], 2 * segments[1].stat().st_size // 3)
    _flip(segments[2], 3)  # a length field: the first record's size is implausible
    log = _log(tmp_path / "p")
    offsets = _read_all(log)
    assert len(offsets) == COUNT - 4
    assert offsets == sorted(set(offsets))
    assert log.skipped.records == 4
    log.close()


def test_a_cursor_confirms_past_the_lost_offsets(tmp_path: Path) -> None:
    segments = _write(tmp_path / "p")
    _flip(segments[1], segments[1].stat().st_size // 2)
    log = _log(tmp_path / "p")
    cursor = PartitionCursor(3, 0)
    owner = object()
    delivered = 0
    while True:
        messages = cursor.take(log.read, 50, 0, log.end_offset)
        if not messages:
            break
        for m in messages:
            cursor.start_flight(m, owner, 10**18, 0)
            cursor.finish(m.offset, owner)
        delivered += len(messages)
    assert delivered == COUNT - 1
    assert cursor.confirmed == COUNT  # not stuck below the hole
    assert cursor.acked == set()
    log.close()


def _write_current(directory: Path, count: int = COUNT) -> Path:
    """``count`` records, all in the current segment (never sealed)."""
    log = PartitionLog.open(directory, partition=3, cache=CacheBudget(0))
    for i in range(count):
        log.append([NewRecord(timestamp_ns=i + 1, body=b"%05d" % i + b"." * (BODY - 5))])
    log.close()
    (segment,) = directory.glob(f"*{LOG_SUFFIX}")
    return segment


def _body_at(segment: Path, number: int) -> int:
    """Byte position of the middle of record ``number``'s body."""
    return segment.read_bytes().index(b"%05d" % number + b"." * (BODY - 5)) + BODY // 2


@pytest.mark.parametrize(
    ("victim", "field"),
    [(150, "body"), (COUNT - 3, "body"), (150, "length"), (COUNT - 3, "length")],
)
def test_damage_in_the_current_segment_skips_only_the_damaged_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, victim: int, field: str
) -> None:
    """Before the last index entry the read finds it; after it, recovery's scan does, and must
    not cut the records after it as a torn tail."""
    segment = _write_current(tmp_path / "p")
    body = _body_at(segment, victim)
    _flip(segment, body if field == "body" else body - BODY // 2 - HEADER_SIZE + 1)
    size = segment.stat().st_size
    with caplog.at_level(logging.WARNING):
        log = PartitionLog.open(tmp_path / "p", partition=3, cache=CacheBudget(0))
        first = _read_all(log)
        again = _read_all(log)
    assert segment.stat().st_size == size  # nothing truncated
    assert first == again == [i for i in range(COUNT) if i != victim]
    assert log.skipped.records == 1
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "truncating" in m]
    lines = [m for m in messages if "skipped corrupt records" in m]
    assert len(lines) == 1
    assert f"offsets {victim}-{victim}" in lines[0]
    after = log.append([NewRecord(timestamp_ns=1, body=b"after")])  # appends go on at the end
    assert [r.offset for r in after] == [COUNT]
    assert log.read(COUNT, 1)[0].body == b"after"
    log.close()


def test_the_last_record_damaged_is_a_tail_and_is_cut(tmp_path: Path) -> None:
    segment = _write_current(tmp_path / "p")
    _flip(segment, _body_at(segment, COUNT - 1))
    log = PartitionLog.open(tmp_path / "p", partition=3, cache=CacheBudget(0))
    assert log.end_offset == COUNT - 1  # nothing intact after it: cut, as a torn tail
    assert _read_all(log) == list(range(COUNT - 1))
    assert log.skipped.records == 0
    log.close()
