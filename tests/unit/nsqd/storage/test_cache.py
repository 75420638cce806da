"""The tail caches of partition logs are bounded in bytes, together, by one CacheBudget."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqd.storage import CacheBudget, NewRecord, PartitionLog, Record
from nsqd.storage.batch import AppendedBatch, new_records
from nsqd.storage.cache import LARGE_RECORD_BYTES, RECORD_OVERHEAD, RUN_RECORDS

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


def test_large_records_are_read_from_disk_and_free_the_tail_they_follow(tmp_path: Path) -> None:
    budget = CacheBudget()  # the default 16 MiB: room for fifteen 1 MB records
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=budget)
    small = log.append(entries(5))
    assert budget.used == 5 * (BODY + RECORD_OVERHEAD)
    big = log.append(entries(3, size=LARGE_RECORD_BYTES + 1))
    assert budget.used == 0  # not cached, and the cache stays a contiguous tail
    assert log.read(0, 8) == small + big  # from disk
    after = log.append(entries(2))  # small again: cached from there on
    assert budget.used == 2 * (BODY + RECORD_OVERHEAD)
    assert log.read(6, 10) == big[1:] + after
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


def _count_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the appended batches whose records are made from now on."""
    made: list[int] = []
    real = AppendedBatch.records

    def counting(self: AppendedBatch) -> list[Record]:
        made.append(len(self))
        return real(self)

    monkeypatch.setattr(AppendedBatch, "records", counting)
    return made


def test_a_cached_batch_makes_the_records_each_read_returns_and_keeps_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _count_made(monkeypatch)
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=CacheBudget(10_000_000))
    first = log.append(new_records(1, [b"a" * 10] * 5))
    log.append(new_records(2, [b"b" * 10] * 3))
    assert made == []  # an MPUB makes no records
    assert len(first) == 5  # the cache grew its own run, not the batch the caller holds
    got = log.read(0, 8)
    assert made == [8]  # the two batches are one cached run
    assert [(r.offset, r.timestamp_ns, r.body) for r in got] == [
        *((i, 1, b"a" * 10) for i in range(5)),
        *((i, 2, b"b" * 10) for i in range(5, 8)),
    ]
    made.clear()
    assert log.read(2, 4) == got[2:6]
    assert made == [4]  # only what the read returns
    # the cache still holds the batch, not records: nothing per message to collect
    assert [type(run) for run in log._cache._runs] == [AppendedBatch]
    log.close()


def test_cached_runs_of_batches_stop_growing_at_their_size(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=CacheBudget(10_000_000))
    for i in range(13):  # 100 each: the run grows past RUN_RECORDS once, then a new one starts
        log.append(new_records(i, [b"%d" % i] * 100))
    log.append(entries(1, size=10))  # a list of records: a run of its own
    log.append(new_records(99, [b"y"]))
    grown = -(-RUN_RECORDS // 100) * 100  # the append that reaches RUN_RECORDS is the last
    assert [len(run) for run in log._cache._runs] == [grown, 1300 - grown, 1, 1]
    got = log.read(0, 10_000)
    assert [r.body for r in got[:1300]] == [b"%d" % (i // 100) for i in range(1300)]
    assert [r.offset for r in got] == list(range(1302))
    log.close()


def test_batches_evicted_unread_are_never_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _count_made(monkeypatch)
    budget = CacheBudget(20 * (BODY + RECORD_OVERHEAD))
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=budget)
    for i in range(10):
        log.append(new_records(i, [b"%06d" % i + b"b" * (BODY - 6)] * 5))
    assert 0 < budget.used <= budget.limit
    assert made == []
    got = log.read(0, 50)  # from disk, then what the cache kept
    assert [r.timestamp_ns for r in got] == [i for i in range(10) for _ in range(5)]
    assert sum(made) < 50  # only what was still cached was made from its batch
    log.close()
    assert budget.used == 0


def test_the_list_an_append_returns_is_the_callers(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", partition=0, cache=CacheBudget(10_000_000))
    written = log.append(entries(3, size=10))
    assert isinstance(written, list)
    kept = list(written)
    written.clear()
    assert log.read(0, 3) == kept
    log.close()


def test_truncation_and_retention_cut_a_cached_batch(tmp_path: Path) -> None:
    budget = CacheBudget(10_000_000)
    cache = budget.cache(100)
    bodies = [b"x" * n for n in range(1, 11)]
    batch = AppendedBatch(100, 0, [1] * 10, 0, 0, bodies)
    cache.extend(100, batch, sum(len(b) + RECORD_OVERHEAD for b in bodies))
    cache.extend(110, [*AppendedBatch(110, 0, [2], 0, 0, [b"y"])], 1 + RECORD_OVERHEAD)
    cache.truncate(107)  # inside the first batch: the second goes, the first keeps 100..106
    assert cache.read(0, 200) == (100, batch.records()[:7])
    cache.drop_below(103)  # retention inside it: 103..106 stay
    assert cache.read(0, 200) == (103, batch.records()[3:7])
    assert budget.used == cache.bytes == sum(n + RECORD_OVERHEAD for n in range(4, 8))
    cache.drop_below(107)  # all of it
    assert cache.read(0, 200) == (107, [])
    assert budget.used == 0
    cache.extend(107, AppendedBatch(107, 0, [3], 0, 0, [b"z"]), 1 + RECORD_OVERHEAD)
    assert [r.offset for r in cache.read(107, 108)[1]] == [107]


def test_a_cached_run_of_stamped_records_counts_and_returns_their_exts() -> None:
    budget = CacheBudget(10_000_000)
    cache = budget.cache(0)
    plain = AppendedBatch(0, 0, [1, 1], 0, 0, [b"a", b"b"])
    stamped = AppendedBatch(2, 0, [2, 2], 0, 0, [b"c", b"d"], [b"e" * 17, b"f" * 17])
    cache.extend(0, plain, 2 * (1 + RECORD_OVERHEAD))
    cache.extend(2, stamped, 2 * (18 + RECORD_OVERHEAD))
    assert [r.ext for r in cache.read(0, 4)[1]] == [b"", b"", b"e" * 17, b"f" * 17]
    cache.drop_below(3)  # the budget gives back what each dropped record cost
    assert budget.used == 18 + RECORD_OVERHEAD
