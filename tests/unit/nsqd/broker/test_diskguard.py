"""The disk high-water mark's decisions, over a file system whose usage the test sets."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from nsqd.broker.diskguard import DiskGuard
from nsqd.core.errors import NotWritableError
from nsqd.storage.disk import DiskUsage, is_out_of_space
from nsqd.storage.errors import StorageError

MB = 1024 * 1024


class FakeDisk:
    def __init__(self, used: int, available: int) -> None:
        self.usage = DiskUsage(used, available)
        self.reads = 0

    def __call__(self, path: Path) -> DiskUsage:
        del path
        self.reads += 1
        return self.usage


def test_usage_is_df_s_use_percent() -> None:
    usage = DiskUsage(used=60 * MB, available=40 * MB)
    assert usage.percent == 60.0
    assert usage.headroom(80) == 20 * MB
    assert usage.headroom(50) == 0


def test_past_the_mark_writes_are_refused_until_usage_drops() -> None:
    disk = FakeDisk(used=79 * MB, available=21 * MB)
    guard = DiskGuard(Path("/data"), 80, usage=disk)
    guard.check()
    guard.require_writable()
    disk.usage = DiskUsage(used=81 * MB, available=19 * MB)
    guard.check()
    with pytest.raises(NotWritableError):
        guard.require_writable()
    assert guard.reason is not None
    assert "81.0% >= --max-disk-usage-percent=80 on /data" in guard.reason
    disk.usage = DiskUsage(used=50 * MB, available=50 * MB)
    guard.check()
    assert guard.reason is None
    guard.require_writable()


def test_appends_recheck_once_they_use_a_quarter_of_the_headroom() -> None:
    disk = FakeDisk(used=40 * MB, available=60 * MB)  # 40 MB of headroom below 80 %
    guard = DiskGuard(Path("/data"), 80, usage=disk)
    guard.check()
    guard.appended(9 * MB)
    assert disk.reads == 1
    disk.usage = DiskUsage(used=85 * MB, available=15 * MB)  # someone else filled the disk
    guard.appended(2 * MB)  # 11 MB > 10 MB: a check now, not at the next tick
    assert disk.reads == 2
    with pytest.raises(NotWritableError):
        guard.require_writable()


def test_out_of_space_refuses_writes_until_a_check_finds_room() -> None:
    disk = FakeDisk(used=10 * MB, available=90 * MB)
    guard = DiskGuard(Path("/data"), 100, usage=disk)
    guard.check()
    error = StorageError("append failed")
    error.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert is_out_of_space(error)
    assert not is_out_of_space(StorageError("CRC mismatch"))
    guard.out_of_space(error)
    with pytest.raises(NotWritableError):
        guard.require_writable()
    guard.check()
    guard.require_writable()
