"""A leader ships its latest appends to followers as written: the runs a segment remembers,
and ``PartitionLog.read_written`` against the records read and encoded again."""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import given

from nsqd.storage import NewRecord, PartitionLog
from nsqd.storage.recent_runs import REMEMBERED, RecentRuns, Run
from nsqd.storage.record import encode_record


def _batch(n: int, tag: int) -> list[NewRecord]:
    return [NewRecord(timestamp_ns=tag * 100 + i, body=bytes([tag, i]) * 50) for i in range(n)]


def _encoded(log: PartitionLog, start: int, stop: int) -> bytes:
    return b"".join(encode_record(r) for r in log.read(start, stop - start))


def test_the_latest_runs_are_read_as_written_and_match_the_records(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", partition=3)
    try:
        for tag, n in enumerate((3, 2, 4)):
            log.append(_batch(n, tag), epoch=7 if tag == 2 else None)
        assert log.read_written(5, 1 << 20, 1 << 20) == (4, _encoded(log, 5, 9))
        assert log.read_written(0, 1 << 20, 1 << 20) == (9, _encoded(log, 0, 9))  # all three
        first_two = len(_encoded(log, 0, 5))
        assert log.read_written(0, first_two, 1 << 20) == (5, _encoded(log, 0, 5))
        assert log.read_written(0, 1, 1 << 20) == (3, _encoded(log, 0, 3))  # one run at least
        assert log.read_written(0, 1, 10) is None  # ... unless over the hard limit
        assert log.read_written(1, 1 << 20, 1 << 20) is None  # not where a run starts
        assert log.read_written(9, 1 << 20, 1 << 20) is None  # the end
        log.truncate(5)
        assert log.read_written(3, 1 << 20, 1 << 20) is None  # forgotten: read and encode
        log.append(_batch(2, 9))
        assert log.read_written(5, 1 << 20, 1 << 20) == (2, _encoded(log, 5, 7))
    finally:
        log.close()


def test_the_newest_run_is_given_from_memory_and_older_spans_from_the_file(
    tmp_path: Path,
) -> None:
    """The last append's bytes are kept (a follower keeping up asks for them right after):
    given without a read; a span of older runs, or of several, is read from the file."""
    log = PartitionLog.open(tmp_path / "p", partition=0)
    try:
        log.append(_batch(3, 1))
        log.append(_batch(2, 2))
        newest, older = _encoded(log, 3, 5), _encoded(log, 0, 3)
        segment = log._segments[-1]
        assert segment.fd is not None
        # the file's copy of every record altered (same length): only a read would see it
        os.pwrite(segment.fd, bytes(segment.size), 0)
        assert log.read_written(3, 1 << 20, 1 << 20) == (2, newest)
        assert log.read_written(0, len(older), 1 << 20) == (3, bytes(len(older)))
        assert log.read_written(0, 1 << 20, 1 << 20) == (5, bytes(segment.size))
        log.truncate(4)  # forgets the kept bytes with the runs
        assert log.read_written(3, 1 << 20, 1 << 20) is None
    finally:
        log.close()


def test_bytes_a_caller_may_reuse_are_not_kept() -> None:
    runs = RecentRuns()
    runs.add(0, 2, 0, 4, b"abcd")
    assert runs.newest_bytes(Run(0, 2, 0, 4)) == b"abcd"
    runs.add(2, 3, 4, 6, bytearray(b"ef"))  # a buffer: its owner may write over it
    assert runs.newest_bytes(Run(2, 3, 4, 6)) is None
    runs.add(3, 4, 6, 8, memoryview(b"gh"))
    assert runs.newest_bytes(Run(3, 4, 6, 8)) is None


def test_a_rotated_segment_and_a_reopened_log_remember_nothing(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", partition=0, max_bytes_per_file=400)
    try:
        log.append(_batch(3, 1))  # 3 x 154 bytes: rotates after the second
        log.append(_batch(1, 2))
        assert log.read_written(0, 1 << 20, 1 << 20) is None  # not in the active segment
        last = log.end_offset - 1
        assert log.read_written(last, 1 << 20, 1 << 20) == (1, _encoded(log, last, last + 1))
    finally:
        log.close()
    log = PartitionLog.open(tmp_path / "p", partition=0, max_bytes_per_file=400)
    try:
        assert log.read_written(log.end_offset - 1, 1 << 20, 1 << 20) is None
    finally:
        log.close()


@given(st.lists(st.integers(1, 5), min_size=1, max_size=REMEMBERED + 20), st.data())
def test_a_span_is_contiguous_runs_from_the_one_asked_for(
    sizes: list[int], data: st.DataObject
) -> None:
    runs = RecentRuns()
    offset = position = 0
    added = []
    for n in sizes:
        added.append(Run(offset, offset + n, position, position + 10 * n))
        runs.add(*added[-1])
        offset, position = offset + n, position + 10 * n
    kept = added[-REMEMBERED:]
    pick = data.draw(st.sampled_from(added))
    max_bytes = data.draw(st.integers(1, 200))
    span = runs.span(pick.first, max_bytes, 1 << 30)
    if pick not in kept:
        assert span is None
        return
    assert span is not None
    assert (span.first, span.start) == (pick.first, pick.start)
    covered = [r for r in kept if pick.first <= r.first < span.end]
    assert covered[-1].stop == span.stop
    assert covered[0] == pick
    assert len(covered) == 1 or span.stop - span.start <= max_bytes
    after = [r for r in kept if r.first == span.end]
    assert not after or after[0].stop - span.start > max_bytes
