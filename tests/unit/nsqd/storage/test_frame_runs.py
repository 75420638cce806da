"""Frame reads (nsqd/storage/frame_runs.py): a run read for delivery has the frames the record
path would write, and the records :func:`decode_run` would give, decoded when asked for; what
it does not take (damage, an older format, a record not due) is left to the record path."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given

import nsqd.storage.segment as segment_module
from nsqd.storage import CacheBudget, FrameLayout, NewRecord, PartitionLog, Record
from nsqd.storage.frame_runs import scan_frames
from nsqd.storage.record import RECORD_HEADER_V0, encode_run
from nsqd.storage.runs import decode_run
from protocol.message import MESSAGE_FRAME_FIXED, MESSAGE_FRAME_PREFIX

LAYOUT = FrameLayout(MESSAGE_FRAME_PREFIX.pack, MESSAGE_FRAME_FIXED, 2)
NOW = 10_000


def frames_of(records: list[Record]) -> bytes:
    """What the record path writes for first deliveries (nsqd.tcp.delivery.write_plain)."""
    out = bytearray()
    for r in records:
        out += MESSAGE_FRAME_PREFIX.pack(
            MESSAGE_FRAME_FIXED + len(r.body), 2, r.timestamp_ns, 1, r.internal_id, r.trace_id
        )
        out += r.body
    return bytes(out)


def expected(records: list[Record], start: int, stop: int, budget: int) -> list[Record]:
    """The run a frame read gives: from ``start``, due by NOW, bodies up to ``budget``."""
    out: list[Record] = []
    size = 0
    for r in records[start:stop]:
        if r.deliver_at_ns > NOW:
            break
        out.append(r)
        size += len(r.body)
        if size >= budget:
            break
    return out


record_lists = st.lists(
    st.tuples(
        st.binary(max_size=40),  # body
        st.binary(max_size=6),  # ext
        st.sampled_from([0, 0, 0, NOW, NOW + 1]),  # deliver_at_ns
        st.integers(0, 2**64 - 1),  # trace id
    ),
    min_size=1,
    max_size=30,
)


def make(specs: list[tuple[bytes, bytes, int, int]], base: int = 5) -> list[Record]:
    return [
        Record(
            offset=base + i,
            timestamp_ns=1_000 + i,
            internal_id=(3 << 50) + base + i + 1,
            trace_id=trace,
            deliver_at_ns=deliver_at,
            body=body,
            ext=ext,
            epoch=2,
        )
        for i, (body, ext, deliver_at, trace) in enumerate(specs)
    ]


@given(specs=record_lists, data=st.data())
def test_a_run_has_the_record_paths_frames_and_records(
    specs: list[tuple[bytes, bytes, int, int]], data: st.DataObject
) -> None:
    records = make(specs)
    buf, _ = encode_run(records)
    start = data.draw(st.integers(0, len(records) - 1))
    stop = data.draw(st.integers(start + 1, len(records)))
    budget = data.draw(st.sampled_from([1, 10, 100, 1 << 40]))
    run = scan_frames(buf, 5, 5 + start, 5 + stop, budget, NOW, LAYOUT)
    want = expected(records, start, stop, budget)
    if not want:
        assert run is None
        return
    assert run is not None
    assert (run.first, len(run), run.offsets) == (
        5 + start,
        len(want),
        range(5 + start, 5 + start + len(want)),
    )
    assert bytes(run.frames) == frames_of(want)
    assert run.body_bytes == sum(len(r.body) for r in want)
    assert list(run) == want  # decoded when asked for, every field as stored
    assert run[1:3] == want[1:3]
    decoded: list[Record] = []
    decode_run(buf, 0, 5, 5 + start, 5 + start + len(want), 1 << 40, decoded)
    assert decoded == want  # what the record path reads


def test_damage_ends_the_run_before_the_damaged_record() -> None:
    records = make([(b"body %d" % i, b"", 0, i) for i in range(6)])
    buf = bytearray(encode_run(records)[0])
    size = len(buf) // 6
    buf[3 * size + 30] ^= 0xFF  # inside the fourth record: its CRC fails
    run = scan_frames(bytes(buf), 5, 5, 11, 1 << 40, NOW, LAYOUT)
    assert run is not None
    assert list(run) == records[:3]  # the record path reads on and reports the damage
    assert scan_frames(bytes(buf), 5, 8, 11, 1 << 40, NOW, LAYOUT) is None


def test_an_older_format_or_a_record_not_due_is_left_to_the_record_path() -> None:
    old = RECORD_HEADER_V0.size  # a format-0 record header: not this loop's
    records = make([(b"x", b"", 0, 0), (b"later", b"", NOW + 5, 0), (b"y", b"", 0, 0)])
    buf, _ = encode_run(records)
    assert scan_frames(buf, 5, 6, 8, 1 << 40, NOW, LAYOUT) is None  # the first is a DPUB
    run = scan_frames(buf, 5, 5, 8, 1 << 40, NOW, LAYOUT)
    assert run is not None
    assert list(run) == records[:1]
    assert scan_frames(b"\0" * old, 5, 5, 6, 1 << 40, NOW, LAYOUT) is None


def test_a_log_reads_frames_from_disk_within_one_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(max_bytes_per_file=4000, index_interval_bytes=300, cache=CacheBudget(0))
    for i in range(20):
        log.append([NewRecord(timestamp_ns=i, body=b"%05d" % (10 * i + j) * 8) for j in range(10)])
    every = log.read(0, 200)
    bases = sorted(int(path.stem) for path in (tmp_path / "p").glob("*.log"))
    assert len(bases) > 3
    for offset in (0, 1, 17, 33, 90, 199):
        run = log.read_frames(offset, 50, 1 << 40, NOW, LAYOUT)
        assert run is not None
        assert run.first == offset
        got = list(run)
        assert got == every[offset : offset + len(got)]
        assert bytes(run.frames) == frames_of(got)
        # up to the end of the segment holding the first record (the next read goes on)
        segment_end = min([base for base in bases if base > offset] + [200])
        assert len(got) == min(50, segment_end - offset)
    run = log.read_frames(0, 200, 100, NOW, LAYOUT)  # bodies up to 100 bytes: 3 of 40
    assert run is not None
    assert len(run) == 3
    assert log.read_frames(200, 10, 1 << 40, NOW, LAYOUT) is None  # at the end


def test_a_log_leaves_what_its_cache_holds_to_read(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(cache=CacheBudget(1 << 20))
    log.append([NewRecord(timestamp_ns=i, body=b"b%d" % i) for i in range(10)])
    assert log.read_frames(0, 10, 1 << 40, NOW, LAYOUT) is None  # all cached: read serves


def test_a_read_is_bounded_by_the_budget_not_the_records_asked_for(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer far behind with room for 1,000 messages of 100 kB but 256 KiB of socket
    space reads about that much, and its run keeps no more than it read."""
    log = open_log(max_bytes_per_file=1 << 30, cache=CacheBudget(0))
    for i in range(300):
        log.append([NewRecord(timestamp_ns=i, body=bytes([i % 251]) * 100_000)])
    sizes: list[int] = []
    real = segment_module.read_frame_run

    def measured(read_at: Callable[[int, int], bytes], *args: object, **kwargs: object) -> object:
        def read(size: int, position: int) -> bytes:
            sizes.append(size)
            return read_at(size, position)

        return real(read, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(segment_module, "read_frame_run", measured)
    run = log.read_frames(5, 295, 256 * 1024, NOW, LAYOUT)
    assert run is not None
    assert list(run) == log.read(5, 295, 256 * 1024)  # 3 records, as the record path reads
    assert len(sizes) == 1
    assert sizes[0] < 256 * 1024 + 200_000  # not 295 records' 29.5 MB
    small = log.read_frames(10, 1, 1 << 40, NOW, LAYOUT)
    assert small is not None
    assert len(small) == 1
    assert [r.body for r in small] == [bytes([10]) * 100_000]


def test_a_large_body_is_copied_once_into_its_frame() -> None:
    """From what was read straight into the frames, not through a slice of its own (traced
    allocations, not time)."""
    records = make([(b"B" * 4_000_000, b"", 0, 7)])
    data, _ = encode_run(records)
    tracemalloc.start()
    try:
        run = scan_frames(data, 5, 5, 6, 1 << 30, NOW, LAYOUT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert run is not None
    assert bytes(run.frames) == frames_of(records)
    assert list(run) == records
    assert peak < 1.5 * 4_000_000  # the frames (with a slice first: 8 MB)
