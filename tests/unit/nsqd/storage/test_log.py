"""PartitionLog: seeks, rotation, recovery, retention, threads (the state machine is elsewhere)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from nsqd.storage import (
    CacheBudget,
    LogClosedError,
    NewRecord,
    OffsetOutOfRangeError,
    PartitionLog,
    Record,
    StorageError,
)
from nsqd.storage.batch import new_records
from nsqd.storage.record import HEADER_SIZE


def _entries(n: int, *, ts: Callable[[int], int] = lambda i: i, size: int = 16) -> list[NewRecord]:
    return [
        NewRecord(timestamp_ns=ts(i), body=i.to_bytes(4, "big") * (size // 4)) for i in range(n)
    ]


def _segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_empty_log(open_log: Callable[..., PartitionLog], tmp_path: Path) -> None:
    log = open_log()
    assert (log.start_offset, log.end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 10) == []
    assert log.append([]) == []
    assert log.offset_for_timestamp(0) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1)
    assert [p.name for p in _segment_files(tmp_path / "p")] == ["00000000000000000000.log"]


def test_append_assigns_ids_and_reads_back(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(partition=3)
    records = log.append([NewRecord(5, b"a", trace_id=9, deliver_at_ns=77, ext=b"x")])
    assert records == [Record(0, 5, (3 << 50) | 1, 9, 77, b"a", b"x")]
    more = log.append(_entries(3))
    assert [r.internal_id for r in more] == [(3 << 50) | n for n in (2, 3, 4)]
    assert log.read(0, 100) == records + more
    assert log.read(2, 1) == more[1:2]


def test_a_body_batch_appends_what_its_new_records_would(
    open_log: Callable[..., PartitionLog],
) -> None:
    """An MPUB's batch makes its records from the bodies directly: the same records, ids,
    epoch and bytes on disk as the equivalent NewRecords."""
    log = open_log(partition=3)
    entries = [NewRecord(5, b"a", deliver_at_ns=9), NewRecord(5, b"bb", deliver_at_ns=9)]
    plain = log.append(entries, epoch=4)
    batched = log.append(new_records(5, [b"a", b"bb"], 9), epoch=4)
    assert [replace(r, offset=0, internal_id=0) for r in plain] == [
        replace(r, offset=0, internal_id=0) for r in batched
    ]
    assert [r.offset for r in batched] == [2, 3]
    assert [r.internal_id for r in batched] == [(3 << 50) | 3, (3 << 50) | 4]
    assert all(r.epoch == 4 for r in batched)
    assert log.read(0, 100) == [*plain, *batched]
    assert log.append(new_records(6, [b"c"]))[0].epoch == 0  # no epoch given: 0, as before


def test_batch_is_one_write_and_rotation_splits_it(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=1000, index_interval_bytes=100_000)
    calls: list[int] = []
    real_pwrite = os.pwrite

    def counting_pwrite(fd: int, data: bytes, position: int) -> int:
        calls.append(len(data))
        return real_pwrite(fd, data, position)

    monkeypatch.setattr(os, "pwrite", counting_pwrite)
    log.append(_entries(10))  # 700 bytes: fits
    assert calls == [700]
    calls.clear()
    log.append(_entries(30))  # straddles two more segments
    monkeypatch.undo()
    sizes = [p.stat().st_size for p in _segment_files(tmp_path / "p")]
    assert sizes == [980, 980, 840]
    assert calls == [280, 20, 980, 20, 840]  # 20: the index entry that seals a segment
    assert log.read(0, 100)[-1].offset == 39


def test_a_body_batch_that_crosses_segments_reads_back_whole(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    """An MPUB's batch split over segments: each part cached with its own offsets."""
    log = open_log(max_bytes_per_file=1000, index_interval_bytes=100_000, partition=2)
    written = log.append(new_records(4, [bytes([i]) * 16 for i in range(30)]))
    assert len(_segment_files(tmp_path / "p")) == 3
    assert log.read(0, 100) == written
    assert [r.offset for r in log.read(12, 5)] == [12, 13, 14, 15, 16]
    assert log.read(0, 100)[29].internal_id == (2 << 50) | 30
    log.close()
    assert open_log(max_bytes_per_file=1000).read(0, 100) == written  # from disk


def test_record_larger_than_a_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=100)
    log.append([NewRecord(1, b"x" * 500), NewRecord(2, b"y" * 500), NewRecord(3, b"z")])
    sizes = [HEADER_SIZE + 500, HEADER_SIZE + 500, HEADER_SIZE + 1]
    assert [p.stat().st_size for p in _segment_files(tmp_path / "p")] == sizes
    assert [r.timestamp_ns for r in log.read(0, 5)] == [1, 2, 3]


def test_append_rejects_bad_fields_without_writing(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    log.append(_entries(2))
    with pytest.raises(ValueError, match="out of range"):
        log.append([NewRecord(1, b"ok"), NewRecord(1, b"", ext=bytes(70_000))])
    assert log.end_offset == 2
    assert log.append(_entries(1))[0].offset == 2


def test_disk_reads_seek_through_the_index(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=64 * 1024, index_interval_bytes=1024, cache=CacheBudget(0))
    written = log.append(_entries(5000, size=100))  # ~750 KB over 12 segments
    read_bytes: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, position: int) -> bytes:
        data = real_pread(fd, size, position)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    assert log.read(4321, 3) == written[4321:4324]
    assert sum(read_bytes) <= 64 * 1024
    assert log.read(0, 5000) == written


def test_offset_for_timestamp_is_a_seek(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    interval = 512
    log = open_log(max_bytes_per_file=16 * 1024, index_interval_bytes=interval)
    # Monotone with runs of equal timestamps: 0,0,0,10,10,10,20,...
    log.append(_entries(20_000, ts=lambda i: (i // 3) * 10, size=40))
    log.close()
    log = open_log(max_bytes_per_file=16 * 1024, index_interval_bytes=interval)
    assert len(_segment_files(tmp_path / "p")) > 80
    read_bytes: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, position: int) -> bytes:
        data = real_pread(fd, size, position)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    started = time.perf_counter()
    for t, expected in [
        (-5, 0),
        (0, 0),
        (1, 3),
        (10, 3),
        (15, 6),
        (66_650, 19_995),
        (66_660, 19_998),
    ]:
        read_bytes.clear()
        assert log.offset_for_timestamp(t) == expected, t
        assert sum(read_bytes) <= 2 * (interval + 4 * HEADER_SIZE)
    assert log.offset_for_timestamp(66_661) == log.end_offset == 20_000
    assert time.perf_counter() - started < 2.0


def test_offset_for_timestamp_with_clock_going_backwards(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(max_bytes_per_file=300, index_interval_bytes=80)
    stamps = [5, 9, 3, 3, 12, 1, 8, 20, 2, 15, 7]
    log.append(_entries(len(stamps), ts=stamps.__getitem__))
    for t in range(-1, 23):
        expected = next((i for i, s in enumerate(stamps) if s >= t), len(stamps))
        assert log.offset_for_timestamp(t) == expected, t


def test_sync_from_a_thread_while_appending(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=8 * 1024, cache=CacheBudget(100 * 200))
    stop = threading.Event()
    errors: list[BaseException] = []
    syncs = 0

    def syncer() -> None:
        nonlocal syncs
        try:
            while not stop.is_set():
                log.sync()
                syncs += 1
        except BaseException as exc:  # noqa: BLE001  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=syncer)
    thread.start()
    written: list[Record] = []
    try:
        for _ in range(400):
            written += log.append(_entries(50, size=40))
            assert log.read(written[-7].offset, 7) == written[-7:]
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert syncs > 0
    log.close()
    reopened = open_log(max_bytes_per_file=8 * 1024)
    assert reopened.end_offset == 20_000
    assert reopened.read(0, 20_000) == written


def test_ids_never_repeat_across_reopen_and_retention(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    kwargs = {"max_bytes_per_file": 500, "partition": 7}
    seen: set[int] = set()
    for round_ in range(5):
        log = open_log(**kwargs)
        ids = [r.internal_id for r in log.append(_entries(17))]
        assert seen.isdisjoint(ids)
        seen.update(ids)
        if round_ % 2:
            log.delete_segments(before_offset=log.end_offset, older_than_ns=2**63 - 1)
        log.close()
    assert len(seen) == 85


def test_end_offset_survives_deleting_every_sealed_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=350)  # 5 records of 70 bytes per segment
    log.append(_entries(10))  # exactly two full segments: the active one is still segment 2
    deleted = log.delete_segments(before_offset=10, older_than_ns=1_000)
    assert deleted == 1
    assert (log.start_offset, log.end_offset) == (5, 10)
    log.append(_entries(1))  # rotates
    assert log.delete_segments(before_offset=100, older_than_ns=1_000) == 1
    assert (log.start_offset, log.end_offset) == (10, 11)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9, 1)
    log.close()
    log = open_log(max_bytes_per_file=350)
    assert (log.start_offset, log.end_offset) == (10, 11)
    assert log.append(_entries(1))[0].offset == 11


def test_retention_respects_age_and_stops_at_the_first_kept_segment(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(max_bytes_per_file=350)
    stamps = [1, 2, 3, 4, 5, 90, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # segment 1 holds a young record
    log.append(_entries(len(stamps), ts=stamps.__getitem__))
    assert log.delete_segments(before_offset=100, older_than_ns=50) == 1
    assert log.start_offset == 5
    assert log.delete_segments(before_offset=9, older_than_ns=100) == 0  # segment 1 ends at 10
    assert log.delete_segments(before_offset=10, older_than_ns=100) == 1
    assert log.read(10, 100)[0].offset == 10


def test_truncate_then_append_reuses_offsets(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=350, cache=CacheBudget(2 * 200))
    first = log.append(_entries(23))
    log.truncate(7)
    assert log.end_offset == 7
    assert len(_segment_files(tmp_path / "p")) == 2
    again = log.append(_entries(2, ts=lambda i: 100 + i))
    assert [r.offset for r in again] == [7, 8]
    assert log.read(0, 100) == first[:7] + again
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate(10)
    log.truncate(0)
    assert (log.start_offset, log.end_offset, log.size_bytes) == (0, 0, 0)
    log.close()
    log = open_log(max_bytes_per_file=350)
    assert (log.start_offset, log.end_offset) == (0, 0)


def test_torn_tail_is_truncated_and_reported(
    open_log: Callable[..., PartitionLog], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(max_bytes_per_file=350)
    written = log.append(_entries(12))
    log.close()
    last = _segment_files(tmp_path / "p")[-1]
    with last.open("r+b") as f:
        f.truncate(70 + 30)  # record 10 intact, record 11 torn after 30 bytes
    with caplog.at_level(logging.WARNING, logger="nsqd.storage"):
        log = open_log(max_bytes_per_file=350)
    assert log.end_offset == 11
    assert log.read(0, 100) == written[:11]
    (message,) = [r.getMessage() for r in caplog.records]
    assert str(last) in message
    assert "byte 70" in message
    assert "offset 11" in message
    assert "dropping 30 bytes" in message
    assert last.stat().st_size == 70


def test_corrupt_record_in_a_sealed_segment_is_skipped_on_read(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=350, cache=CacheBudget(0))
    written = log.append(_entries(12))
    log.close()
    first = _segment_files(tmp_path / "p")[0]
    data = bytearray(first.read_bytes())
    data[3 * 70 + HEADER_SIZE] ^= 0xFF  # body of record 3
    first.write_bytes(bytes(data))
    log = open_log(max_bytes_per_file=350, cache=CacheBudget(0))
    assert log.end_offset == 12  # sealed segments are not scanned on open
    assert log.read(0, 3) == written[:3]
    assert log.read(2, 5) == [written[2], *written[4:7]]  # record 3 is lost, the rest delivered
    assert (log.skipped.records, log.skipped.bytes) == (1, 70)
    assert log.read(3, 1) == [written[4]]  # a read inside the damage starts after it
    assert log.read(5, 100) == written[5:]


def test_missing_or_garbled_indexes_are_rebuilt(
    open_log: Callable[..., PartitionLog], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kwargs = {"max_bytes_per_file": 2000, "index_interval_bytes": 100, "cache": CacheBudget(0)}
    log = open_log(**kwargs)
    written = log.append(_entries(100))
    log.close()
    indexes = sorted((tmp_path / "p").glob("*.index"))
    good = [p.read_bytes() for p in indexes]
    indexes[0].unlink()
    indexes[1].write_bytes(b"\x00" * 40)
    indexes[-1].write_bytes(good[-1][:-7])  # torn active index: silently repaired
    with caplog.at_level(logging.WARNING, logger="nsqd.storage"):
        log = open_log(**kwargs)
        assert log.read(0, 100) == written
        assert log.offset_for_timestamp(55) == 55
    assert len(caplog.records) == 2
    assert [p.read_bytes() for p in indexes] == good


def test_closed_log_refuses_everything(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    log.append(_entries(1))
    log.close()
    log.close()  # idempotent
    for call in (
        lambda: log.append(_entries(1)),
        lambda: log.read(0, 1),
        lambda: log.sync(),
        lambda: log.truncate(0),
        lambda: log.offset_for_timestamp(0),
        lambda: log.delete_segments(before_offset=1, older_than_ns=1),
    ):
        with pytest.raises(LogClosedError):
            call()
    assert issubclass(LogClosedError, StorageError)


def test_unrelated_files_are_left_alone(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    directory = tmp_path / "p"
    directory.mkdir()
    (directory / "channels.json").write_text("{}")
    (directory / "00000000000000000042.index").write_bytes(b"stale")
    log = open_log()
    log.append(_entries(1))
    assert (directory / "channels.json").exists()
    assert not (directory / "00000000000000000042.index").exists()


def test_bad_field_in_a_rotating_batch_writes_nothing(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=350)
    log.append(_entries(4))
    with pytest.raises(ValueError, match="out of range"):
        log.append([*_entries(5), NewRecord(1, b"", trace_id=2**64)])
    assert log.end_offset == 4
    assert len(_segment_files(tmp_path / "p")) == 1


def test_failed_write_leaves_the_log_unchanged(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = open_log()
    written = log.append(_entries(3))
    real_pwrite = os.pwrite

    def short_then_full_disk(fd: int, data: bytes, position: int) -> int:
        if len(data) > 10:  # write a fragment, then fail like a full disk would
            real_pwrite(fd, bytes(data[:10]), position)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", short_then_full_disk)
    with pytest.raises(StorageError, match="No space left"):
        log.append(_entries(2))
    monkeypatch.undo()
    assert log.end_offset == 3
    written += log.append(_entries(2, ts=lambda i: 50 + i))
    assert log.read(0, 10) == written
    log.close()
    log = open_log()
    assert log.read(0, 10) == written


def test_failed_fsync_is_reported(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log()
    log.append(_entries(3))

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match="Input/output error"):
        log.sync()
    monkeypatch.undo()
    log.sync()
