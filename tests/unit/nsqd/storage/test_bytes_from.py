"""PartitionLog.bytes_from: the bytes of the records from an offset to the end (what a follower
acknowledged up to that offset still lacks): exact at an append's edge, otherwise over by less
than one index interval (plus a record), across segments, and after a reopen."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings, strategies as st

from nsqd.storage import NewRecord, PartitionLog
from nsqd.storage.record import HEADER_SIZE

INTERVAL = 256  # bytes between index entries in these logs


def _records(sizes: list[int]) -> list[NewRecord]:
    return [NewRecord(timestamp_ns=i, body=b"x" * size) for i, size in enumerate(sizes)]


def test_bytes_from_counts_whole_appends_exactly(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(index_interval_bytes=INTERVAL)
    for _ in range(3):
        log.append(_records([16] * 4))
    record = HEADER_SIZE + 16
    assert log.bytes_from(0) == 12 * record == log.size_bytes
    assert log.bytes_from(4) == 8 * record  # where an append started: a follower's ack
    assert log.bytes_from(8) == 4 * record
    assert log.bytes_from(12) == 0  # the end: nothing left
    assert log.bytes_from(40) == 0


def test_below_the_start_the_whole_log_is_left(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(max_bytes_per_file=200, index_interval_bytes=INTERVAL)
    for _ in range(10):
        log.append(_records([40]))
    log.delete_segments(before_offset=5, older_than_ns=1 << 62)
    assert log.start_offset > 0
    assert log.bytes_from(0) == log.size_bytes == log.bytes_from(log.start_offset)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=8),
        min_size=1,
        max_size=25,
    )
)
def test_bytes_from_is_within_an_index_interval_of_the_exact_count(
    batches: list[list[int]],
) -> None:
    sizes = [HEADER_SIZE + size for batch in batches for size in batch]
    slack = INTERVAL + HEADER_SIZE + 300  # an index entry is at most this far before a record
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work) / "p"
        log = PartitionLog.open(
            directory, partition=0, max_bytes_per_file=1500, index_interval_bytes=INTERVAL
        )
        edges = {0}
        for batch in batches:
            log.append(_records(batch))
            edges.add(log.end_offset)
        active = int(sorted(directory.glob("*.log"))[-1].stem)  # the last segment's base offset
        for reopened in (False, True):
            for offset in range(log.end_offset + 1):
                exact = sum(sizes[offset:])
                got = log.bytes_from(offset)
                assert exact <= got < exact + slack, (offset, exact, got)
                if offset in edges and not reopened and offset >= active:
                    assert got == exact  # the active segment's appends are remembered
            log.close()
            log = PartitionLog.open(
                directory, partition=0, max_bytes_per_file=1500, index_interval_bytes=INTERVAL
            )
        log.close()
