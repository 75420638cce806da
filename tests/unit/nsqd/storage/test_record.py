"""The record layout: round trips, CRC coverage, torn data, the fast constructor, the batched
read path against the per-record scan."""

from __future__ import annotations

import functools
import struct
import tracemalloc
from collections.abc import Callable
from dataclasses import replace

import crc32c
import pytest
from hypothesis import given, strategies as st

from nsqd.storage import CorruptRecordError, Record, decode_record, encode_record
from nsqd.storage.batch import new_records
from nsqd.storage.bodies import encode_bodies
from nsqd.storage.encoded_run import check_encoded
from nsqd.storage.record import (
    CONCATENATED_MAX,
    CRC_START,
    HEADER_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_V0,
    NewRecord,
    encode_run,
    peek_size,
    scan_records,
)
from nsqd.storage.runs import read_run

records_st = st.builds(
    Record,
    offset=st.integers(0, 2**63),
    timestamp_ns=st.integers(-(2**63), 2**63 - 1),
    internal_id=st.integers(0, 2**64 - 1),
    trace_id=st.integers(0, 2**64 - 1),
    deliver_at_ns=st.integers(-(2**63), 2**63 - 1),
    body=st.binary(max_size=300),
    ext=st.binary(max_size=40),
    epoch=st.integers(0, 2**32 - 1),
)


def _reader(data: bytes) -> Callable[[int, int], bytes]:
    return lambda size, position: data[position : position + size]


def test_layout_is_fixed() -> None:
    # A change here changes the on-disk format: bump a format version first.
    assert RECORD_HEADER.format == ">IIQqQQqIH"
    assert HEADER_SIZE == 54
    assert RECORD_HEADER_V0.format == ">IIQqQQqH"  # the previous release's, still read
    assert CRC_START == 8


def _encode_v0(record: Record) -> bytes:
    """A record as the previous release wrote it (format 0: no epoch, top bits clear)."""
    covered = (
        RECORD_HEADER_V0.pack(
            0,
            0,
            record.offset,
            record.timestamp_ns,
            record.internal_id,
            record.trace_id,
            record.deliver_at_ns,
            len(record.ext),
        )[8:]
        + record.ext
        + record.body
    )
    return struct.pack(">II", 4 + len(covered), crc32c.crc32c(covered)) + covered


def _encode_v1(record: Record) -> bytes:
    """A record as the previous release wrote it (format 1: this layout, a CRC from 0)."""
    encoded = bytearray(encode_record(record))
    field = (1 << 30) | (len(encoded) - 4)
    struct.pack_into(">II", encoded, 0, field, crc32c.crc32c(bytes(encoded[CRC_START:])))
    return bytes(encoded)


@given(st.lists(records_st, min_size=1, max_size=4))
def test_format_1_records_are_still_read_and_followed(records: list[Record]) -> None:
    """Segments and leaders of the previous release: format 1 beside format 2."""
    records = [Record(50 + i, *_fields(r)) for i, r in enumerate(records)]
    blob = b"".join(
        _encode_v1(r) if i % 2 == 0 else encode_record(r) for i, r in enumerate(records)
    )
    assert decode_record(_encode_v1(records[0]), 0) == records[0]
    scanned = [
        r for _, _, r in scan_records(_reader(blob), "s", position=0, limit=len(blob), offset=50)
    ]
    assert scanned == records
    out: list[Record] = []
    read_run(
        _reader(blob),
        "s",
        position=0,
        limit=len(blob),
        offset=50,
        start=50,
        stop=50 + len(records),
        budget=1 << 30,
        out=out,
    )
    assert out == records
    assert check_encoded(blob, 50).count == len(records)


def test_every_flip_of_the_format_and_length_field_is_detected() -> None:
    """Format 2's CRC starts from the format/length field: a flip that makes the record read as
    format 0 (4 header bytes fewer, the same CRC range) or as another length fails the CRC."""
    record = Record(0, 0, 1, 0, 0, b"", b"", 0)  # all zeros: epoch 0 reads as ext_len 0
    encoded = encode_record(record)
    for bit in range(32):
        flipped = bytearray(encoded)
        flipped[bit // 8] ^= 0x80 >> (bit % 8)
        with pytest.raises(CorruptRecordError):
            list(
                scan_records(_reader(bytes(flipped)), "s", position=0, limit=len(flipped), offset=0)
            )
        with pytest.raises(CorruptRecordError):
            check_encoded(bytes(flipped), 0)


@given(records_st)
def test_format_0_records_are_still_read(record: Record) -> None:
    data = _encode_v0(record)
    assert peek_size(data, 0) == len(data)
    assert decode_record(b"xy" + data, 2) == replace(record, epoch=0)
    mixed = data + encode_record(replace(record, offset=record.offset + 1))
    got = [
        r
        for _, _, r in scan_records(
            _reader(mixed), "mixed", position=0, limit=len(mixed), offset=record.offset
        )
    ]
    assert got == [replace(record, epoch=0), replace(record, offset=record.offset + 1)]


def test_an_unknown_format_is_corruption() -> None:
    data = bytearray(encode_record(Record(0, 0, 1, 0, 0, b"x", b"", 7)))
    data[0] |= 0xC0  # format 3
    with pytest.raises(CorruptRecordError, match="record format 3"):
        peek_size(bytes(data), 0)


@given(records_st)
def test_round_trip(record: Record) -> None:
    data = encode_record(record)
    assert len(data) == HEADER_SIZE + len(record.ext) + len(record.body)
    assert peek_size(data, 0) == len(data)
    assert decode_record(data, 0) == record
    assert decode_record(b"xy" + data, 2) == record


@given(records_st, st.data())
def test_any_bit_flip_is_detected(record: Record, data: st.DataObject) -> None:
    encoded = bytearray(encode_record(record))
    bit = data.draw(st.integers(0, len(encoded) * 8 - 1), label="bit")
    encoded[bit // 8] ^= 1 << (bit % 8)
    reader = _reader(bytes(encoded))
    with pytest.raises(CorruptRecordError) as info:
        list(
            scan_records(
                reader, "seg", position=0, limit=len(encoded), offset=record.offset, chunk=7
            )
        )
    assert info.value.position == 0
    assert info.value.offset == record.offset


@given(st.lists(records_st, min_size=1, max_size=5), st.integers(1, 64), st.data())
def test_scan_yields_positions_and_stops_at_a_torn_tail(
    records: list[Record], chunk: int, data: st.DataObject
) -> None:
    records = [Record(100 + i, *_fields(r)) for i, r in enumerate(records)]
    encoded = [encode_record(r) for r in records]
    blob = b"".join(encoded)
    got = list(
        scan_records(_reader(blob), "seg", position=0, limit=len(blob), offset=100, chunk=chunk)
    )
    positions = [sum(map(len, encoded[:i])) for i in range(len(encoded))]
    assert got == [(p, len(e), r) for p, e, r in zip(positions, encoded, records, strict=True)]
    cut = data.draw(st.integers(1, len(encoded[-1]) - 1), label="cut")
    torn = blob[:-cut]
    with pytest.raises(CorruptRecordError) as info:
        list(scan_records(_reader(torn), "seg", position=0, limit=len(torn), offset=100))
    assert info.value.position == positions[-1]
    assert info.value.offset == 100 + len(records) - 1


def test_scan_rejects_out_of_sequence_offsets() -> None:
    blob = encode_record(Record(7, 0, 8, 0, 0, b"a", b""))
    with pytest.raises(CorruptRecordError, match="out of sequence"):
        list(scan_records(_reader(blob), "seg", position=0, limit=len(blob), offset=6))


def test_implausible_length_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="implausible"):
        peek_size(b"\x00\x00\x00\x05" + bytes(60), 0)
    with pytest.raises(CorruptRecordError, match="implausible"):
        peek_size(b"\xbf\xff\xff\xff" + bytes(60), 0)  # format 2, 2**30 - 1 bytes
    with pytest.raises(CorruptRecordError, match="implausible"):
        peek_size(b"\x40\x00\x00\x30" + bytes(60), 0)  # format 1, shorter than its header
    with pytest.raises(CorruptRecordError, match="implausible"):
        peek_size(b"\x80\x00\x00\x30" + bytes(60), 0)  # format 2, shorter than its header


def _fields(r: Record) -> tuple[int, int, int, int, bytes, bytes, int]:
    return r.timestamp_ns, r.internal_id, r.trace_id, r.deliver_at_ns, r.body, r.ext, r.epoch


@given(records_st)
def test_records_are_values(record: Record) -> None:
    """Equal and hashable by their fields (the cache, the tests and sets of records rely on it)."""
    made = Record(record.offset, *_fields(record))
    assert made == record
    assert hash(made) == hash(record)
    assert made != Record(record.offset + 1, *_fields(record))


def test_encode_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_record(Record(0, 0, 1, 2**64, 0, b"", b""))
    with pytest.raises(ValueError, match="out of range"):
        encode_record(Record(0, 0, 1, 0, 0, b"", bytes(70_000)))


@given(
    st.lists(st.tuples(records_st, st.booleans()), min_size=1, max_size=8),
    st.integers(1, 300),
    st.data(),
)
def test_read_run_reads_and_rejects_what_scan_does(
    drawn: list[tuple[Record, bool]], chunk: int, data: st.DataObject
) -> None:
    """The read path's batched decoder gives the records the per-record scan gives, and stops
    at the same damaged record (position and offset) with what preceded it read."""
    records = [Record(100 + i, *_fields(r)) for i, (r, _) in enumerate(drawn)]
    encoded = [
        _encode_v0(r) if old else encode_record(r)
        for r, (_, old) in zip(records, drawn, strict=True)
    ]
    blob = bytearray(b"".join(encoded))
    if data.draw(st.booleans(), label="damaged"):
        bit = data.draw(st.integers(0, len(blob) * 8 - 1), label="bit")
        blob[bit // 8] ^= 1 << (bit % 8)
    start = data.draw(st.integers(100, 100 + len(records) - 1), label="start")
    stop = data.draw(st.integers(start + 1, 100 + len(records)), label="stop")
    budget = data.draw(st.integers(1, 2000), label="budget")
    reader = _reader(bytes(blob))

    want: list[Record] = []
    left = budget
    failure: CorruptRecordError | None = None
    try:
        for _, _, record in scan_records(
            reader, "seg", position=0, limit=len(blob), offset=100, chunk=chunk
        ):
            if record.offset >= start:
                want.append(record)
                left -= len(record.body)
            if record.offset + 1 >= stop or left <= 0:
                break
    except CorruptRecordError as exc:
        failure = exc

    out: list[Record] = []
    run = functools.partial(
        read_run,
        reader,
        "seg",
        position=0,
        limit=len(blob),
        offset=100,
        start=start,
        stop=stop,
        budget=budget,
        out=out,
        chunk=chunk,
    )
    if failure is None:
        end, rest = run()
        assert end == want[-1].offset + 1
        assert rest == left
    else:
        with pytest.raises(CorruptRecordError) as info:
            run()
        assert (info.value.position, info.value.offset) == (failure.position, failure.offset)
    assert out == want


def test_new_records_share_the_publish_time() -> None:
    batch = new_records(7, [b"a", b"bc"])
    assert list(batch) == [NewRecord(7, b"a"), NewRecord(7, b"bc")]
    assert list(new_records(7, [b"a"], 9)) == [NewRecord(7, b"a", deliver_at_ns=9)]
    assert (len(batch), batch[1], batch.body_bytes) == (2, NewRecord(7, b"bc"), 3)
    assert list(batch[1:]) == [NewRecord(7, b"bc")]  # a slice is a batch too
    assert list(new_records(7, iter([b"x"]))) == [NewRecord(7, b"x")]  # any iterable
    assert hash(NewRecord(7, b"a")) == hash(NewRecord(7, b"a"))


@pytest.mark.parametrize("damaged", [False, True])
def test_read_run_checks_big_records_as_small_ones(damaged: bool) -> None:
    """Records past the size the CRC reads a copy of (a view instead) are read and rejected
    the same way."""
    records = [
        Record(5, 1, 6, 0, 0, b"a" * 70_000, b""),
        Record(6, 2, 7, 0, 0, b"b" * 10, b"x"),
        Record(7, 3, 8, 0, 0, b"c" * 20_000, b""),
    ]
    blob = bytearray(b"".join(encode_record(r) for r in records))
    if damaged:
        blob[60_000] ^= 4  # inside the first body
    out: list[Record] = []
    run = functools.partial(
        read_run,
        _reader(bytes(blob)),
        "seg",
        position=0,
        limit=len(blob),
        offset=5,
        start=5,
        stop=8,
        budget=1 << 30,
        out=out,
    )
    if damaged:
        with pytest.raises(CorruptRecordError, match="CRC mismatch"):
            run()
        assert out == []
    else:
        assert run() == (8, (1 << 30) - 90_010)
        assert out == records


@pytest.mark.parametrize("ext", [None, b'{"k":1}'])
def test_a_large_body_is_copied_once_into_the_encoded_run(ext: bytes | None) -> None:
    """Not also into a copy of header and body to checksum (traced allocations, not time)."""
    body = b"L" * 4_000_000
    exts = None if ext is None else [ext]
    expected = Record(3, 9, (1 << 50) | 4, 0, 0, body, ext or b"", epoch=2)
    tracemalloc.start()
    try:
        data, stamps = encode_bodies(3, 1 << 50, [9], 0, 2, [body], exts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * len(body)  # the run itself (two copies: 8 MB)
    assert data == encode_run([expected])[0]  # the same bytes as from a record
    assert decode_record(data, 0) == expected  # its CRC checks out
    assert stamps == [(9, HEADER_SIZE + len(ext or b"") + len(body))]


def test_bodies_either_side_of_the_copy_limit_encode_alike() -> None:
    bodies = [b"s" * CONCATENATED_MAX, b"t" * (CONCATENATED_MAX + 1)]
    data, _ = encode_bodies(0, 0, [1, 2], 0, 0, bodies)
    out: list[Record] = []
    read_run(
        _reader(data),
        "seg",
        position=0,
        limit=len(data),
        offset=0,
        start=0,
        stop=2,
        budget=1 << 30,
        out=out,
    )  # every CRC checked
    assert [r.body for r in out] == bodies
    assert encode_run(out)[0] == data
