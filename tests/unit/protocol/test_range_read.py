"""The range-read codec (protocol.range_read): round trips, golden bytes, malformed input."""

from __future__ import annotations

import json
from contextlib import suppress

import pytest
from hypothesis import given, strategies as st

from protocol.range_read import (
    RANGE_HEADER,
    RANGE_RECORD,
    RangeBatch,
    RangeFormatError,
    RangeRecord,
    decode_binary,
    decode_ndjson,
    encode_binary,
    encode_ndjson,
    record_size,
)

u64 = st.integers(0, (1 << 64) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, list[RangeRecord]]:
    partition = draw(st.integers(0, 1023))
    first = draw(st.integers(0, 1 << 60))
    count = draw(st.integers(0, 8))
    records = [
        RangeRecord(
            offset=first + i,
            timestamp_ns=draw(i64),
            internal_id=draw(u64),
            trace_id=draw(u64),
            deliver_at_ns=draw(i64),
            body=draw(st.binary(max_size=64)),
            ext=draw(st.binary(max_size=16)),
        )
        for i in range(count)
    ]
    return partition, first, records


@given(batches())
def test_binary_round_trip(batch: tuple[int, int, list[RangeRecord]]) -> None:
    partition, first, records = batch
    data = encode_binary(partition, first, records)
    assert len(data) == RANGE_HEADER.size + sum(record_size(r) for r in records)
    assert decode_binary(data) == RangeBatch(partition, first, first + len(records), tuple(records))
    assert encode_binary(partition, first, records) == data  # deterministic


@given(batches())
def test_ndjson_round_trip(batch: tuple[int, int, list[RangeRecord]]) -> None:
    partition, first, records = batch
    data = encode_ndjson(records)
    assert data.count(b"\n") == len(records)
    decoded = decode_ndjson(data, partition, first)
    assert decoded == RangeBatch(partition, first, first + len(records), tuple(records))


@given(batches(), st.data())
def test_truncated_binary_is_an_error(
    batch: tuple[int, int, list[RangeRecord]], data: st.DataObject
) -> None:
    encoded = encode_binary(*batch)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RangeFormatError):
        decode_binary(encoded[:cut])
    with pytest.raises(RangeFormatError):
        decode_binary(encoded + b"\0")


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_format_error(data: bytes) -> None:
    for payload in (data, b"PNRR\x00\x01" + data):
        with suppress(RangeFormatError):
            decode_binary(payload)
    with suppress(RangeFormatError):
        decode_ndjson(data, 0, 0)


def test_golden_binary_bytes() -> None:
    record = RangeRecord(
        offset=7,
        timestamp_ns=1,
        internal_id=(2 << 50) | 8,
        trace_id=0xABCD,
        deliver_at_ns=0,
        body=b"hi",
        ext=b"",
    )
    data = encode_binary(2, 7, [record])
    assert data[: RANGE_HEADER.size] == (
        b"PNRR"
        + b"\x00\x01"  # version
        + b"\x00\x02"  # partition
        + b"\x00\x00\x00\x01"  # count
        + (7).to_bytes(8, "big")  # first offset
        + (8).to_bytes(8, "big")  # next offset
    )
    assert data[RANGE_HEADER.size :] == (
        (7).to_bytes(8, "big")
        + (1).to_bytes(8, "big")
        + ((2 << 50) | 8).to_bytes(8, "big")
        + (0xABCD).to_bytes(8, "big")
        + (0).to_bytes(8, "big")
        + b"\x00\x00"  # ext length
        + b"\x00\x00\x00\x02"  # body length
        + b"hi"
    )
    assert RANGE_RECORD.size == 46
    assert record.message_id == ((2 << 50) | 8).to_bytes(8, "big") + (0xABCD).to_bytes(8, "big")


def test_golden_ndjson_line() -> None:
    record = RangeRecord(3, 10, 4, 0, 0, b"\x00\xff", b"{}")
    assert encode_ndjson([record]) == (
        b'{"offset":3,"timestamp_ns":10,"internal_id":4,"trace_id":0,"deliver_at_ns":0,'
        b'"ext":"e30=","body":"AP8="}\n'
    )


def test_empty_ranges() -> None:
    assert decode_binary(encode_binary(0, 5, [])) == RangeBatch(0, 5, 5, ())
    assert encode_ndjson([]) == b""
    assert decode_ndjson(b"", 1, 9) == RangeBatch(1, 9, 9, ())


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda d: b"XXXX" + d[4:], id="magic"),
        pytest.param(lambda d: d[:4] + b"\x00\x02" + d[6:], id="version"),
        pytest.param(lambda d: d[:20] + (0).to_bytes(8, "big") + d[28:], id="next-before-first"),
    ],
)
def test_bad_binary_headers(mutate: object) -> None:
    data = encode_binary(0, 5, [RangeRecord(5, 0, 6, 0, 0, b"x")])
    assert callable(mutate)
    with pytest.raises(RangeFormatError):
        decode_binary(mutate(data))


def test_binary_offsets_must_increase() -> None:
    records = [RangeRecord(5, 0, 6, 0, 0, b"x"), RangeRecord(5, 0, 6, 0, 0, b"y")]
    data = bytearray(encode_binary(0, 5, records))
    data[20:28] = (9).to_bytes(8, "big")  # next offset room for both
    with pytest.raises(RangeFormatError, match="offset"):
        decode_binary(bytes(data))


@pytest.mark.parametrize(
    "line",
    [
        b"[]",
        b'{"offset":0}',
        json.dumps(
            {
                "offset": True,
                "timestamp_ns": 0,
                "internal_id": 1,
                "trace_id": 0,
                "deliver_at_ns": 0,
                "ext": "",
                "body": "",
            }
        ).encode(),
        json.dumps(
            {
                "offset": 0,
                "timestamp_ns": 0,
                "internal_id": 1,
                "trace_id": 0,
                "deliver_at_ns": 0,
                "ext": "",
                "body": "not base64!",
            }
        ).encode(),
        b"not json",
    ],
)
def test_bad_ndjson_lines(line: bytes) -> None:
    with pytest.raises(RangeFormatError):
        decode_ndjson(line + b"\n", 0, 0)
