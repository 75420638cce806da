"""The tail caches of partition logs are bounded in bytes, together, by one CacheBudget."""

from __future__ import annotations

from pathlib import Path

from nsqd.storage import CacheBudget, NewRecord, PartitionLog
from nsqd.storage.cache import RECORD_OVERHEAD

BODY = 100_000


def entries(n: int, size: int = BODY) -> list[NewRecord]:
    return [NewRecord(timestamp_ns=i, body=b"%06d" % i + b"b" * (size - 6)) for i in range(n)]


def test_big_records_are_cached_up_to_the_byte_budget(tmp_path: Path) -> None:
    budget = CacheBudget(1_000_000)
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=budget)
    written = log.append(entries(100))  # 10 MB: ten times the budget
    assert 0 < budget.used <= budget.limit
    cached = budget.used // (BODY + RECORD_OVERHEAD)
    assert 7 <= cached <= 9  # the newest records, trimmed to 7/8 of the limit
    assert log.read(0, 200) == written  # evicted records come back from disk
    assert log.read(95, 5) == written[95:]
    log.close()
    assert budget.used == 0


def test_tiny_records_count_their_overhead(tmp_path: Path) -> None:
    budget = CacheBudget(100 * (RECORD_OVERHEAD + 10))
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=budget)
    written = log.append(entries(1000, size=10))
    assert budget.used <= budget.limit
    assert log.read(0, 1000) == written
    log.close()


def test_one_budget_across_logs_evicts_the_least_recently_appended_first(tmp_path: Path) -> None:
    budget = CacheBudget(2_000_000)
    quiet = PartitionLog.open(tmp_path / "a", partition=0, cache=budget)
    busy = PartitionLog.open(tmp_path / "b", partition=1, cache=budget)
    old = quiet.append(entries(5))
    assert budget.used == 5 * (BODY + RECORD_OVERHEAD)
    for _ in range(10):
        busy.append(entries(3))
    assert budget.used <= budget.limit
    assert quiet.read(0, 5) == old  # from disk now
    # the quiet log gave up its records before the busy one gave up its newest
    assert budget.used == busy._cache.bytes  # the cache's own accounting
    quiet.close()
    busy.close()
    assert budget.used == 0


def test_a_zero_budget_caches_nothing(tmp_path: Path) -> None:
    budget = CacheBudget(0)
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=budget)
    written = log.append(entries(3))
    assert budget.used == 0
    assert log.read(1, 2) == written[1:]
    log.close()


def test_disk_reads_stop_at_max_bytes(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=CacheBudget(0))
    written = log.append(entries(20))
    assert log.read(0, 20, max_bytes=3 * BODY) == written[:3]
    assert log.read(4, 20, max_bytes=1) == written[4:5]  # one record at least
    assert log.read(0, 20) == written
    log.close()


def test_truncate_and_retention_release_cached_bytes(tmp_path: Path) -> None:
    budget = CacheBudget(10_000_000)
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=budget, max_bytes_per_file=300_000)
    written = log.append(entries(10))
    log.truncate(6)
    assert budget.used == 6 * (BODY + RECORD_OVERHEAD)
    assert log.delete_segments(before_offset=6, older_than_ns=1 << 62) > 0
    assert budget.used == (6 - log.start_offset) * (BODY + RECORD_OVERHEAD)
    assert log.read(log.start_offset, 10) == written[log.start_offset : 6]
    log.close()
