"""A data directory written by the release before record format 1 (format 0 records, no leader
epoch) is read by this one as it is: every record bit for bit, the channel's checkpoint, new
records appended after the old ones (format 2, with their epoch), and all of it after a
restart."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nsqd.storage import PartitionLog
from nsqd.storage.epochs import end_offset_for_epoch
from nsqd.storage.record import NewRecord
from protocol import Fin, Rdy, Sub
from tests.daemons import pnsq_nsqd
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "datadir-v0"
PLAIN = [b"plain-%02d" % i + b"." * 12 for i in range(12)]


def _copy(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    return data


def test_format_0_records_read_bit_for_bit_then_format_2_appended(tmp_path: Path) -> None:
    directory = _copy(tmp_path) / "topics" / "t-fix" / "0"
    log = PartitionLog.open(directory, partition=0, max_bytes_per_file=400)
    old = log.read(0, 100)
    assert [r.offset for r in old] == list(range(14))
    assert [r.body for r in old] == [*PLAIN, b"traced", b"deferred"]
    assert [r.internal_id for r in old] == [i + 1 for i in range(14)]  # partition 0
    assert old[12].trace_id == 0xFEEDFACE
    assert old[13].deliver_at_ns - old[13].timestamp_ns == pytest.approx(50 * 60 * 10**9, rel=0.01)
    assert all(r.epoch == 0 and r.ext == b"" for r in old)
    assert [r.timestamp_ns for r in old] == sorted(r.timestamp_ns for r in old)

    new = log.append([NewRecord(timestamp_ns=1, body=b"new-a", epoch=3), NewRecord(2, b"new-b")])
    assert [(r.offset, r.epoch) for r in new] == [(14, 3), (15, 0)]
    log.close()
    log = PartitionLog.open(directory, partition=0, max_bytes_per_file=400)
    assert log.read(0, 100) == [*old, *new]  # both formats, after a restart
    assert end_offset_for_epoch(log, 0) == 14
    assert end_offset_for_epoch(log, 3) == 16
    log.close()


def test_a_daemon_resumes_the_old_channel_where_it_was(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    daemon = pnsq_nsqd(data).start()
    try:
        client = RawClient(daemon.tcp_address, timeout=10)
        client.send(Sub("fix", "ch"), Rdy(1))
        assert client.read().data == b"OK"
        got = []
        for _ in range(10):  # confirmed=3: plain-03 .. plain-11, then the traced one
            frame = client.read(skip_heartbeats=True)
            got.append(frame.body)
            assert int.from_bytes(frame.message_id[:8], "big") == len(got) + 3
            client.send(Fin(frame.message_id))
        assert got == [*PLAIN[3:], b"traced"]
        client.close()
    finally:
        daemon.stop()
