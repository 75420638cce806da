"""Where each leader epoch ends in a partition log (what a deposed leader truncates to)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, strategies as st

from nsqd.storage import PartitionLog
from nsqd.storage.epochs import end_offset_for_epoch
from nsqd.storage.memory import MemoryLog
from nsqd.storage.record import NewRecord


def test_epoch_ends_on_a_disk_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", partition=1, max_bytes_per_file=200)
    assert end_offset_for_epoch(log, 5) == 0  # empty
    epochs = [0, 0, 1, 1, 1, 4]
    log.append([NewRecord(i, b"x" * 30, epoch=e) for i, e in enumerate(epochs)])
    assert [end_offset_for_epoch(log, e) for e in range(6)] == [2, 5, 5, 5, 6, 6]
    log.close()


@given(st.lists(st.integers(0, 5), max_size=40).map(sorted), st.integers(0, 6))
def test_the_search_agrees_with_a_scan(epochs: list[int], epoch: int) -> None:
    log = MemoryLog(0, 1000)
    log.append([NewRecord(i, b"x", epoch=e) for i, e in enumerate(epochs)])
    expected = max((i + 1 for i, e in enumerate(epochs) if e <= epoch), default=0)
    assert end_offset_for_epoch(log, epoch) == expected
