"""A follower's check of a leader's encoded batch: what it reads of each record, and that no
single flipped bit anywhere in the batch gets through."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nsqd.storage import CorruptRecordError, Record
from nsqd.storage.encoded_run import check_encoded
from nsqd.storage.record import encode_lost, encode_run
from nsqd.storage.stamp import stamped

U64 = st.integers(0, 2**64 - 1)
exts = st.one_of(
    st.just(b""),
    st.builds(stamped, U64, st.integers(0, 2**63 - 1)),
    st.builds(
        lambda p, s, h: stamped(p, s, b'{"k":' + h),
        U64,
        st.integers(0, 2**63 - 1),
        st.binary(max_size=8),
    ),
    st.just(b'{"k":1}'),
)
fields = st.tuples(
    st.integers(-(2**63), 2**63 - 1),  # timestamp_ns
    U64,  # internal_id
    U64,  # trace_id
    st.integers(-(2**63), 2**63 - 1),  # deliver_at_ns
    st.one_of(st.binary(max_size=40), st.binary(min_size=16_380, max_size=16_400)),  # body
    exts,
    st.integers(0, 2**32 - 1),  # epoch
)


def batch(first: int, rows: list[tuple[int, int, int, int, bytes, bytes, int]]) -> list[Record]:
    return [Record(offset, *row) for offset, row in enumerate(rows, first)]


@given(
    first=st.integers(0, 2**40),
    rows=st.lists(fields, min_size=1, max_size=5),
    lost=st.integers(0, 3),
)
def test_a_batch_is_read_as_its_records_and_markers(
    first: int, rows: list[tuple[int, int, int, int, bytes, bytes, int]], lost: int
) -> None:
    records = batch(first, rows)
    data, sizes = encode_run(records)
    markers, marker_sizes = encode_lost(first + len(records), lost, 7)
    run = check_encoded(data + markers, first)
    assert run.count == len(records) + lost
    assert run.lost == lost
    assert run.entries == tuple(sizes + marker_sizes)
    assert run.max_epoch == max([r.epoch for r in records] + [7 if lost else 0])
    expected = []
    for r in records:
        if r.ext[:1] == b"\xfe" and len(r.ext) >= 17:
            expected.append((r.offset, int.from_bytes(r.ext[1:9]), int.from_bytes(r.ext[9:17])))
    assert run.stamps == tuple(expected)


@given(rows=st.lists(fields, min_size=1, max_size=3), data=st.data())
def test_any_flipped_bit_of_a_batch_is_refused(
    rows: list[tuple[int, int, int, int, bytes, bytes, int]], data: st.DataObject
) -> None:
    encoded, _ = encode_run(batch(3, rows))
    bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
    flipped = bytearray(encoded)
    flipped[bit // 8] ^= 0x80 >> (bit % 8)
    with pytest.raises(CorruptRecordError):
        check_encoded(bytes(flipped), 3)


def test_a_batch_cut_short_or_out_of_place_is_refused() -> None:
    encoded, _ = encode_run(batch(3, [(1, 2, 3, 0, b"body", b"", 1)] * 2))
    with pytest.raises(CorruptRecordError, match="cut short"):
        check_encoded(encoded[:-1], 3)
    with pytest.raises(CorruptRecordError, match="record 3 where 4 was due"):
        check_encoded(encoded, 4)
