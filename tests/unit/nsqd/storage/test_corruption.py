"""Damage in the middle of a sealed segment: reads step over it, deliver the rest, report it once.

A torn or corrupt tail of the active segment is still truncated at recovery
(tests/unit/nsqd/storage/test_log.py); sealed segments are never truncated.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from nsqd.core.cursor import PartitionCursor
from nsqd.storage import CacheBudget, NewRecord, PartitionLog
from nsqd.storage.layout import LOG_SUFFIX

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
