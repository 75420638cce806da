"""The snappy framing-format and raw-deflate codecs, against python-snappy and zlib as
independent peers, fed in arbitrary splits; and the Trio stream wrappers on memory streams."""

from __future__ import annotations

import struct
import zlib

import pytest
import snappy
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings, strategies as st

from nsqd.tcp.compression import (
    MAX_BLOCK,
    STREAM_IDENTIFIER,
    CompressionError,
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
    masked_crc,
)
from nsqd.tcp.streams import DeflateStream, SnappyStream
from tests import strategies as S

_PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

payloads = st.lists(
    st.one_of(
        st.binary(max_size=300),
        st.builds(lambda n, b: b * n, st.integers(0, 150_000), st.sampled_from([b"a", b"xyz"])),
    ),
    min_size=1,
    max_size=4,
)


def _decode_all(decoder: SnappyDecoder | DeflateDecoder, chunks: list[bytes]) -> bytes:
    out = bytearray()
    for chunk in chunks:
        out += decoder.decode(chunk)
        while decoder.pending:
            out += decoder.decode(b"")
    return bytes(out)


def _chunk(kind: int, payload: bytes) -> bytes:
    return struct.pack("<I", (len(payload)) << 8 | kind) + payload


# --------------------------------------------------------------------------- snappy


@_PROPS
@given(data=st.data(), messages=payloads)
def test_snappy_round_trip_in_any_split(data: st.DataObject, messages: list[bytes]) -> None:
    encoder = SnappyEncoder()
    wire = b"".join(encoder.encode(m) for m in messages)
    assert wire.startswith(STREAM_IDENTIFIER)
    expected = b"".join(messages)
    assert _decode_all(SnappyDecoder(), data.draw(S.splits(wire))) == expected
    assert bytes(snappy.StreamDecompressor().decompress(wire)) == expected  # python-snappy


@_PROPS
@given(data=st.data(), messages=payloads)
def test_snappy_decodes_pynsq_style_sends(data: st.DataObject, messages: list[bytes]) -> None:
    """pynsq compresses every send with a new StreamCompressor: identifiers repeat."""
    wire = b"".join(bytes(snappy.StreamCompressor().compress(m)) for m in messages)
    assert _decode_all(SnappyDecoder(), data.draw(S.splits(wire))) == b"".join(messages)


def test_snappy_chunks_hold_at_most_one_block() -> None:
    wire = SnappyEncoder().encode(bytes(range(256)) * 1024)  # incompressible-ish, 256 KiB
    pos, sizes = len(STREAM_IDENTIFIER), []
    while pos < len(wire):
        kind, length = wire[pos], int.from_bytes(wire[pos + 1 : pos + 4], "little")
        assert kind in (0, 1)
        sizes.append(length)
        pos += 4 + length
    assert len(sizes) == 4
    assert all(size <= MAX_BLOCK + 4 + MAX_BLOCK // 6 + 32 for size in sizes)


def test_snappy_uncompressed_and_skippable_chunks() -> None:
    body = b"plain bytes"
    crc = struct.pack("<I", masked_crc(body))
    wire = (
        STREAM_IDENTIFIER
        + _chunk(0x01, crc + body)
        + _chunk(0xFE, b"\x00" * 10)  # padding
        + _chunk(0x80, b"skip me")  # skippable
        + STREAM_IDENTIFIER
        + _chunk(0x01, crc + body)
    )
    assert SnappyDecoder().decode(wire) == body * 2


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(_chunk(0x01, b"\x00" * 4 + b"x"), id="no-stream-identifier"),
        pytest.param(STREAM_IDENTIFIER + _chunk(0x01, b"\x00" * 4 + b"x"), id="bad-crc"),
        pytest.param(STREAM_IDENTIFIER + _chunk(0x00, b"\x00" * 4 + b"\xff\xff"), id="bad-block"),
        pytest.param(STREAM_IDENTIFIER + _chunk(0x02, b"reserved"), id="reserved-type"),
        pytest.param(b"\xff\x07\x00\x00sNaPpYZ", id="bad-identifier"),
        pytest.param(STREAM_IDENTIFIER + _chunk(0x01, b"ab"), id="chunk-shorter-than-crc"),
        pytest.param(STREAM_IDENTIFIER + b"\x00\xff\xff\xff", id="chunk-too-long"),
    ],
)
def test_snappy_corrupt_input(wire: bytes) -> None:
    with pytest.raises(CompressionError):
        SnappyDecoder().decode(wire)


def test_snappy_corrupt_compressed_crc() -> None:
    wire = bytearray(SnappyEncoder().encode(b"a" * 1000))
    wire[len(STREAM_IDENTIFIER) + 4] ^= 0xFF  # first CRC byte
    with pytest.raises(CompressionError):
        SnappyDecoder().decode(bytes(wire))


# --------------------------------------------------------------------------- deflate


@_PROPS
@given(data=st.data(), messages=payloads, level=st.integers(1, 9))
def test_deflate_round_trip_in_any_split(
    data: st.DataObject, messages: list[bytes], level: int
) -> None:
    encoder = DeflateEncoder(level)
    sends = [encoder.encode(m) for m in messages]
    assert all(send.endswith(b"\x00\x00\xff\xff") for send in sends)  # every flush is a sync
    decoder = zlib.decompressobj(-zlib.MAX_WBITS)
    for message, send in zip(messages, sends, strict=True):
        assert decoder.decompress(send) == message  # decodable as soon as it is sent
    expected = b"".join(messages)
    assert _decode_all(DeflateDecoder(), data.draw(S.splits(b"".join(sends)))) == expected


def test_deflate_corrupt_input() -> None:
    with pytest.raises(CompressionError):
        DeflateDecoder().decode(b"\xff\xff\xff\xff")


# --------------------------------------------------------------------------- streams


def test_deflate_output_is_bounded_per_call() -> None:
    bomb = zlib.compress(b"\0" * (64 << 20), 9)[2:-4]  # raw DEFLATE: 64 MiB of zeros, ~64 KiB
    decoder = DeflateDecoder(max_output=1 << 20)
    first = decoder.decode(bomb)
    assert len(first) == 1 << 20
    assert decoder.pending
    total = len(first)
    while decoder.pending:
        chunk = decoder.decode(b"")
        assert len(chunk) <= 1 << 20
        total += len(chunk)
    assert total == 64 << 20


@pytest.mark.parametrize("make", [SnappyStream, lambda s: DeflateStream(s, 6)])
async def test_compressed_streams_both_ways(make: object) -> None:
    assert callable(make)
    left, right = trio.testing.memory_stream_pair()
    a, b = make(left), make(right)
    big = b"0123456789" * 20_000
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a.send_all, b"hello " + big)
        received = b""
        while len(received) < 6 + len(big):
            received += await b.receive_some(1000)  # max_bytes is honoured
            assert len(received) <= 6 + len(big)
        assert received == b"hello " + big
        nursery.start_soon(b.send_all, b"back")
        assert await a.receive_some() == b"back"
    await a.aclose()
    assert await b.receive_some() == b""


async def test_corrupt_stream_is_a_broken_resource() -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = SnappyStream(right)
    await left.send_all(b"garbage!")
    with pytest.raises(trio.BrokenResourceError):
        await stream.receive_some()
