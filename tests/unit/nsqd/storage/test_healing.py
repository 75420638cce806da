"""Damage a replica can heal, and damage everywhere else stepped over: a read for delivery
holds a damaged region for a repair when asked to (RepairPending), a replica's intact copy is
written over it in place, a wrong copy is refused (the region then skipped); lost-record
markers read as skipped records; truncation and time seeks step over damage."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqd.storage import CacheBudget, NewRecord, PartitionLog
from nsqd.storage.corruption import Region
from nsqd.storage.encoded_run import check_encoded
from nsqd.storage.errors import CorruptRecordError, RepairPending
from nsqd.storage.layout import LOG_SUFFIX
from nsqd.storage.record import HEADER_SIZE, encode_lost, encode_run

COUNT = 60
BODY = 200


def _log(directory: Path) -> PartitionLog:
    return PartitionLog.open(
        directory, partition=3, max_bytes_per_file=1 << 20, cache=CacheBudget(0)
    )


def _body(i: int) -> bytes:
    return b"%05d" % i + b"." * (BODY - 5)


def _written(directory: Path, count: int = COUNT) -> PartitionLog:
    log = _log(directory)
    log.append([NewRecord(timestamp_ns=10 * (i + 1), body=_body(i)) for i in range(count)])
    return log


def _damage(directory: Path, offset: int) -> Path:
    """Flip a byte in the body of the record at ``offset`` (one segment, equal sizes)."""
    (path,) = sorted(directory.glob(f"*{LOG_SUFFIX}"))
    data = bytearray(path.read_bytes())
    data[offset * (HEADER_SIZE + BODY) + HEADER_SIZE + 50] ^= 0x20
    path.write_bytes(bytes(data))
    return path


def _all(log: PartitionLog, *, hold: bool = False) -> list[int]:
    got, offset = [], log.start_offset
    while offset < log.end_offset:
        records = log.read(offset, 7, hold=hold)
        assert records
        for r in records:
            assert r.body == _body(r.offset)
        got.extend(r.offset for r in records)
        offset = records[-1].offset + 1
    return got


def test_a_held_region_waits_for_a_repair_and_a_replicas_copy_heals_it(tmp_path: Path) -> None:
    log = _written(tmp_path)
    good = encode_run(log.read(10, 1))[0]  # what a replica holds: the same bytes
    path = _damage(tmp_path, 10)
    log.skipped.healing = lambda: True
    with pytest.raises(RepairPending) as caught:
        log.read(8, 5, hold=True)
    assert (caught.value.first, caught.value.resumed) == (10, 11)
    position = 10 * (HEADER_SIZE + BODY)
    assert log.skipped.held() == [Region(path.name, position, 10, 11, HEADER_SIZE + BODY)]
    assert [r.offset for r in log.read(8, 5)] == [8, 9, 11, 12]  # others still skip it
    assert log.repair(10, good)
    assert _all(log, hold=True) == list(range(COUNT))
    assert (log.skipped.healed, log.skipped.held()) == (1, [])
    log.close()
    assert _all(_log(tmp_path)) == list(range(COUNT))  # healed on disk, durably


def test_a_wrong_copy_is_refused_and_the_region_skipped(tmp_path: Path) -> None:
    log = _written(tmp_path)
    wrong = encode_run(log.read(11, 1))[0]  # the right size, another offset
    _damage(tmp_path, 10)
    log.skipped.healing = lambda: True
    with pytest.raises(RepairPending):
        log.read(10, 5, hold=True)
    assert not log.repair(10, wrong)
    assert _all(log, hold=True) == [o for o in range(COUNT) if o != 10]
    assert (log.skipped.healed, log.skipped.records) == (0, 1)
    log.close()


def test_without_a_replica_a_read_for_delivery_skips_at_once(tmp_path: Path) -> None:
    log = _written(tmp_path)
    _damage(tmp_path, 10)
    assert _all(log, hold=True) == [o for o in range(COUNT) if o != 10]
    assert log.skipped.held() == []
    log.close()


def test_lost_record_markers_keep_the_offsets_and_read_as_skipped(tmp_path: Path) -> None:
    log = _written(tmp_path, 5)
    data, _ = encode_lost(5, 3, 2)
    run = check_encoded(data, 5)
    assert (run.count, run.lost) == (3, 3)
    assert log.append_encoded(data, run, rotate=True)
    log.append([NewRecord(timestamp_ns=10 * (i + 1), body=_body(i)) for i in range(8, 12)])
    assert log.end_offset == 12
    assert _all(log) == [0, 1, 2, 3, 4, 8, 9, 10, 11]
    assert log.skipped.records == 3
    log.close()
    log = _log(tmp_path)  # recovery keeps them: intact records follow
    assert (log.end_offset, _all(log)) == (12, [0, 1, 2, 3, 4, 8, 9, 10, 11])
    log.close()


def test_a_lost_record_marker_that_rotted_is_refused(tmp_path: Path) -> None:
    data = bytearray(encode_lost(5, 1, 2)[0])
    data[20] ^= 1  # the timestamp
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_encoded(bytes(data), 5)


@pytest.mark.parametrize("damaged", [20, 23, 24])
def test_truncation_steps_over_damage(tmp_path: Path, damaged: int) -> None:
    log = _written(tmp_path)
    _damage(tmp_path, damaged)
    log.truncate(25)
    assert log.end_offset == 25
    log.append([NewRecord(timestamp_ns=1, body=_body(o)) for o in range(25, 30)])
    expected = [o for o in range(30) if o != damaged]
    assert _all(log) == expected
    log.close()
    log = _log(tmp_path)
    assert (log.end_offset, _all(log)) == (30, expected)
    log.close()


def test_a_time_seek_steps_over_damage(tmp_path: Path) -> None:
    log = _written(tmp_path)
    _damage(tmp_path, 10)
    assert log.offset_for_timestamp(10 * 11) == 11  # offset 10's own time: it is lost
    assert log.offset_for_timestamp(10 * 12) == 11
    assert log.offset_for_timestamp(10 * 13) == 12
    log.close()


def test_a_rebuilt_index_steps_over_damage_in_its_segment(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, partition=3, max_bytes_per_file=4000, cache=CacheBudget(0))
    log.append([NewRecord(timestamp_ns=i + 1, body=_body(i)) for i in range(COUNT)])
    log.close()
    first, *_ = sorted(tmp_path.glob(f"*{LOG_SUFFIX}"))  # sealed: 15 records of 254 bytes
    data = bytearray(first.read_bytes())
    data[5 * (HEADER_SIZE + BODY) + HEADER_SIZE + 9] ^= 1  # offset 5's body
    first.write_bytes(bytes(data))
    first.with_suffix(".index").write_bytes(b"\x01" * 7)  # inconsistent: rebuilt when read
    log = _log(tmp_path)
    assert _all(log) == [o for o in range(COUNT) if o != 5]
    log.close()


def test_lost_record_markers_at_the_end_survive_a_restart(tmp_path: Path) -> None:
    log = _written(tmp_path, 5)
    data, _ = encode_lost(5, 3, 2)
    assert log.append_encoded(data, check_encoded(data, 5), rotate=True)
    log.close()
    log = _log(tmp_path)  # not taken for a torn tail: the offsets stay the leader's
    assert log.end_offset == 8
    assert [r.offset for r in log.read(0, 10)] == [0, 1, 2, 3, 4]
    assert log.read(5, 3) == []  # nothing readable up to the end (delivery waits: DamagedTail)
    log.append([NewRecord(timestamp_ns=1, body=_body(8))])
    assert _all(log) == [0, 1, 2, 3, 4, 8]
    log.close()
