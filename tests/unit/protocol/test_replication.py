"""Tests for protocol.replication and protocol.replication_decoder: the "  R1" frame codec between
a leader and its followers."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol import NEED_DATA, ProtocolError
from protocol.replication import (
    ADMIN,
    ADMIN_CHANNEL,
    APPEND,
    FEATURE_ADMIN,
    FEATURE_TOPIC_ID,
    FEATURES,
    HELLO_EX,
    MAGIC,
    MAX_APPEND_RECORDS_SIZE,
    MAX_FRAME_SIZE,
    MAX_STRING_SIZE,
    Ack,
    Admin,
    AdminAck,
    Append,
    ChannelAdmin,
    Cursors,
    CursorsAck,
    Error,
    FollowerFrame,
    Frame,
    FrameType,
    Hello,
    HighWatermark,
    LeaderFrame,
    Refuse,
    RepairRecords,
    RepairRequest,
    ReplicationErrorCode,
    ReplicationProtocolError,
    Welcome,
)
from protocol.replication_decoder import FollowerFrameDecoder, FrameDecoder, LeaderFrameDecoder
from protocol.replication_encoder import encode, encode_append_header

U16, U32, U64 = 2**16 - 1, 2**32 - 1, 2**64 - 1

# ---------------------------------------------------------------------------------- strategies

# empty, maximal (65535 bytes of UTF-8, in 1-, 2- and 3-byte characters) and arbitrary strings
_strings = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "x" * MAX_STRING_SIZE, "é" * (MAX_STRING_SIZE // 2), "€" * 21845]),
)
_u16, _u32, _u64 = st.integers(0, U16), st.integers(0, U32), st.integers(0, U64)
_i64 = st.integers(-(2**63), 2**63 - 1)
_small_records = st.binary(min_size=1, max_size=100)
_records = st.one_of(
    st.binary(min_size=1, max_size=200),
    st.integers(1, 4 * 1024 * 1024).map(lambda n: bytes(range(256)) * (n // 256) + b"\x01"),
)


def _follower_frames(strings: st.SearchStrategy[str]) -> st.SearchStrategy[FollowerFrame]:
    return st.one_of(
        st.builds(Hello, strings, strings, _u16, _u32, _u64, _u32),
        st.builds(Hello, strings, strings, _u16, _u32, _u64, _u32, st.just(FEATURE_ADMIN)),
        st.builds(Hello, strings, strings, _u16, _u32, _u64, _u32, st.just(FEATURES), strings),
        st.builds(Ack, _u32, _u64),
        st.builds(Refuse, _u32, strings),
        st.builds(CursorsAck, _u32, strings, _u64),
        st.builds(AdminAck, _u32, _u64),
        st.builds(RepairRecords, _u32, _u64, st.integers(1, U32), _small_records),
        st.builds(RepairRecords, _u32, _u64, st.just(0), st.just(b"")),
    )


def _leader_frames(
    strings: st.SearchStrategy[str], records: st.SearchStrategy[bytes]
) -> st.SearchStrategy[LeaderFrame]:
    return st.one_of(
        st.builds(Welcome, _u32, _u64, _u64),
        st.builds(Append, _u32, _u64, _u64, st.integers(1, U32), records),
        st.builds(Append, _u32, _u64, _u64, st.just(0), st.just(b"")),
        st.builds(HighWatermark, _u32, _u64),
        st.builds(
            Cursors,
            _u32,
            strings,
            _u64,
            st.lists(st.tuples(_u64, _i64), max_size=50).map(tuple),
            st.booleans(),
        ),
        st.builds(Error, st.sampled_from(ReplicationErrorCode) | strings, strings),
        st.builds(
            Admin,
            _u32,
            _u64,
            st.booleans(),
            st.lists(
                st.builds(
                    ChannelAdmin,
                    strings,
                    st.booleans(),
                    st.booleans(),
                    st.booleans(),
                    st.booleans(),
                ),
                max_size=20,
            ).map(tuple),
        ),
        st.builds(RepairRequest, _u32, _u64, _u32),
    )


# small frames, for the byte-by-byte feeds
_small_strings = st.text(max_size=10)

_SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _drain(decoder: FrameDecoder[Any]) -> list[Frame]:
    out: list[Frame] = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        out.append(frame)
    return out


def _decode_one(data: bytes, decoder: FrameDecoder[Any]) -> Frame:
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == 0
    return frame


def _fails(data: bytes, *, leader_side: bool, match: str) -> None:
    """``data`` makes the decoder raise ``match``, and again on the next call (sticky)."""
    decoder = FollowerFrameDecoder() if leader_side else LeaderFrameDecoder()
    decoder.feed(data)
    with pytest.raises(ReplicationProtocolError, match=match):
        decoder.next_frame()
    with pytest.raises(ReplicationProtocolError, match=match):
        decoder.next_frame()


def _frame(frame_type: int, body: bytes) -> bytes:
    return struct.pack(">IB", 1 + len(body), frame_type) + body


def _s(text: bytes) -> bytes:
    return struct.pack(">H", len(text)) + text


# ---------------------------------------------------------------------------------- round trip


@_SLOW
@given(_follower_frames(_strings))
def test_follower_frames_round_trip(frame: FollowerFrame) -> None:
    assert _decode_one(encode(frame), FollowerFrameDecoder()) == frame


@_SLOW
@given(_leader_frames(_strings, _records))
def test_leader_frames_round_trip(frame: LeaderFrame) -> None:
    assert _decode_one(encode(frame), LeaderFrameDecoder()) == frame


def test_append_header_then_records_is_the_encoded_frame() -> None:
    records = bytes(range(256)) * 4096  # 1 MiB, sent after the header without a copy
    header = encode_append_header(3, 1000, 990, 7, len(records))
    frame = Append(3, 1000, 990, 7, records)
    assert header + records == encode(frame)
    decoder = LeaderFrameDecoder()
    decoder.feed(header)
    assert decoder.next_frame() is NEED_DATA
    decoder.feed(memoryview(records))
    assert _drain(decoder) == [frame]


def test_largest_frame_passes_and_one_byte_more_does_not() -> None:
    records = b"r" * MAX_APPEND_RECORDS_SIZE
    data = encode(Append(1, 0, 0, 1, records))
    assert len(data) == 4 + MAX_FRAME_SIZE
    frame = _decode_one(data, LeaderFrameDecoder())
    assert isinstance(frame, Append)
    assert frame.records == records
    with pytest.raises(ValueError, match="size"):
        encode_append_header(1, 0, 0, 1, MAX_APPEND_RECORDS_SIZE + 1)


# ---------------------------------------------------------------------------------- golden bytes


def test_hello_golden_bytes() -> None:
    frame = Hello(node="n1", topic="tø", partition=3, epoch=7, log_end=0x0102, last_epoch=6)
    expected = (
        b"\x00\x00\x00\x1c"  # size: 28 = type 1 + fixed 18 + node 4 + topic 5
        b"\x01"  # type: HELLO
        b"\x00\x03"  # partition u16
        b"\x00\x00\x00\x07"  # epoch u32
        b"\x00\x00\x00\x00\x00\x00\x01\x02"  # log_end u64
        b"\x00\x00\x00\x06"  # last_epoch u32
        b"\x00\x02n1"  # node: u16 length + UTF-8
        b"\x00\x03t\xc3\xb8"  # topic: "tø", 3 bytes of UTF-8
    )
    assert encode(frame) == expected
    assert _decode_one(expected, FollowerFrameDecoder()) == frame


def test_cursors_golden_bytes() -> None:
    frame = Cursors(
        epoch=2, channel="ch", confirmed=41, deferred=((50, 1_000), (52, -1)), deleted=True
    )
    expected = (
        b"\x00\x00\x00\x36"  # size: 54 = type 1 + fixed 17 + channel 4 + 2 pairs of 16
        b"\x84"  # type: CURSORS
        b"\x00\x00\x00\x02"  # epoch u32
        b"\x00\x00\x00\x00\x00\x00\x00\x29"  # confirmed u64: 41
        b"\x01"  # deleted u8
        b"\x00\x00\x00\x02"  # deferred count u32
        b"\x00\x02ch"  # channel
        b"\x00\x00\x00\x00\x00\x00\x00\x32"  # offset u64: 50
        b"\x00\x00\x00\x00\x00\x00\x03\xe8"  # deliver_at_ns i64: 1000
        b"\x00\x00\x00\x00\x00\x00\x00\x34"  # offset u64: 52
        b"\xff\xff\xff\xff\xff\xff\xff\xff"  # deliver_at_ns i64: -1
    )
    assert encode(frame) == expected
    assert _decode_one(expected, LeaderFrameDecoder()) == frame


def test_append_golden_bytes() -> None:
    expected = (
        b"\x00\x00\x00\x1c"  # size: 28 = type 1 + fixed 24 + 3 record bytes
        b"\x82"  # type: APPEND
        b"\x00\x00\x00\x09"  # epoch u32
        b"\x00\x00\x00\x00\x00\x00\x00\x0a"  # base_offset u64
        b"\x00\x00\x00\x00\x00\x00\x00\x08"  # high_watermark u64
        b"\x00\x00\x00\x01"  # count u32
        b"abc"  # the records, verbatim
    )
    assert encode(Append(9, 10, 8, 1, b"abc")) == expected
    assert MAGIC == b"  R1"


# ---------------------------------------------------------------------------------- splits


@_SLOW
@given(st.lists(_leader_frames(_small_strings, _small_records), max_size=8), st.data())
def test_leader_stream_in_any_split(frames: list[LeaderFrame], data: st.DataObject) -> None:
    _check_splits(b"".join(map(encode, frames)), frames, LeaderFrameDecoder, data)


@_SLOW
@given(st.lists(_follower_frames(_small_strings), max_size=8), st.data())
def test_follower_stream_in_any_split(frames: list[FollowerFrame], data: st.DataObject) -> None:
    _check_splits(b"".join(map(encode, frames)), frames, FollowerFrameDecoder, data)


def _check_splits(
    stream: bytes,
    frames: list[LeaderFrame] | list[FollowerFrame],
    make: type[LeaderFrameDecoder] | type[FollowerFrameDecoder],
    data: st.DataObject,
) -> None:
    at_once = make()
    at_once.feed(stream)
    assert _drain(at_once) == frames

    byte_by_byte = make()
    out: list[Frame] = []
    for i in range(len(stream)):
        byte_by_byte.feed(stream[i : i + 1])
        out += _drain(byte_by_byte)
    assert out == frames

    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunked = make()
    out = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        chunked.feed(stream[start:end])
        out += _drain(chunked)
    assert out == frames
    assert chunked.buffered == 0


# ---------------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    ("frame_type", "body", "match"),
    [
        (FrameType.ACK, b"\x00" * 11, r"ACK frame: body truncated: 12 bytes .* 11 left"),
        (FrameType.ACK, b"\x00" * 13, r"ACK frame: 1 bytes after the body"),
        (FrameType.HELLO, b"\x00" * 18 + _s(b"n"), r"HELLO frame: body truncated before the topic"),
        (FrameType.HELLO, b"\x00" * 18 + _s(b"n") + b"\x00\x09ab", r"topic length 9 runs past"),
        (FrameType.HELLO, b"\x00" * 18 + _s(b"\xff") + _s(b"t"), r"node is not valid UTF-8"),
        (FrameType.HELLO, b"\x00" * 18 + _s(b"\xed\xa0\x80") + _s(b""), r"node is not valid"),
        (FrameType.REFUSE, b"\x00" * 4 + _s(b"a") + b"!", r"REFUSE frame: 1 bytes after"),
    ],
)
def test_malformed_follower_bodies(frame_type: FrameType, body: bytes, match: str) -> None:
    _fails(_frame(frame_type, body), leader_side=True, match=match)


_CURSORS_HEAD = struct.Struct(">IQBI")


@pytest.mark.parametrize(
    ("frame_type", "body", "match"),
    [
        (FrameType.WELCOME, b"\x00" * 19, r"WELCOME frame: body truncated"),
        (FrameType.HIGH_WATERMARK, b"\x00" * 13, r"HIGH_WATERMARK frame: 1 bytes after"),
        (FrameType.APPEND, b"\x00" * 23, r"APPEND frame: body truncated"),
        (FrameType.APPEND, APPEND.pack(1, 0, 0, 0) + b"rec", r"count 0 with 3 record bytes"),
        (FrameType.APPEND, APPEND.pack(1, 0, 0, 2), r"count 2 with 0 record bytes"),
        (FrameType.CURSORS, _CURSORS_HEAD.pack(1, 0, 2, 0) + _s(b""), r"deleted flag 2"),
        (FrameType.CURSORS, _CURSORS_HEAD.pack(1, 0, 0, 1) + _s(b"c"), r"1 deferred pairs need"),
        (
            FrameType.CURSORS,
            _CURSORS_HEAD.pack(1, 0, 0, 0) + _s(b"c") + b"\x00" * 16,
            r"0 deferred pairs need 0 bytes, 16 left",
        ),
        (FrameType.CURSORS, _CURSORS_HEAD.pack(1, 0, 0, 0) + b"\x00\x05ab", r"channel length 5"),
        (FrameType.ERROR, _s(b"E_X") + b"\x00", r"ERROR frame: body truncated before the text"),
        (FrameType.ERROR, _s(b"E_X") + _s(b"\xc3("), r"text is not valid UTF-8"),
    ],
)
def test_malformed_leader_bodies(frame_type: FrameType, body: bytes, match: str) -> None:
    _fails(_frame(frame_type, body), leader_side=False, match=match)


@pytest.mark.parametrize("frame_type", [FrameType.WELCOME, FrameType.APPEND, FrameType.ERROR])
def test_leader_frames_are_refused_by_the_leader(frame_type: FrameType) -> None:
    _fails(_frame(frame_type, b""), leader_side=True, match=r"only a leader sends it")


@pytest.mark.parametrize(
    "frame_type",
    [
        FrameType.HELLO,
        FrameType.ACK,
        FrameType.REFUSE,
        FrameType.CURSORS_ACK,
        FrameType.ADMIN_ACK,
        FrameType.HELLO_EX,
    ],
)
def test_follower_frames_are_refused_by_the_follower(frame_type: FrameType) -> None:
    _fails(
        _frame(frame_type, b""), leader_side=False, match=rf"{frame_type.name} .*only a follower"
    )


@pytest.mark.parametrize("leader_side", [True, False])
@pytest.mark.parametrize("type_byte", [0x00, 0x07, 0x80, 0x87, 0xFF])
def test_unknown_type_fails_before_the_body_arrives(leader_side: bool, type_byte: int) -> None:
    header = struct.pack(">IB", 1000, type_byte)  # the 999-byte body never comes
    _fails(header, leader_side=leader_side, match=f"unknown frame type 0x{type_byte:02x}")


def test_oversize_frame_fails_on_its_size_field_alone() -> None:
    _fails(struct.pack(">I", MAX_FRAME_SIZE + 1), leader_side=False, match=r"frame size 67108865")
    small = LeaderFrameDecoder(max_frame_size=100)
    small.feed(encode(Append(1, 0, 0, 1, b"x" * 75)))  # size 100
    assert small.next_frame() is not NEED_DATA
    small.feed(encode(Append(1, 0, 0, 1, b"x" * 76))[:4])
    with pytest.raises(ReplicationProtocolError, match=r"frame size 101 outside 1\.\.100"):
        small.next_frame()


def test_empty_frame_fails() -> None:
    _fails(b"\x00\x00\x00\x00", leader_side=True, match=r"frame size 0")


def test_frames_before_an_error_are_delivered_and_later_input_is_ignored() -> None:
    decoder = LeaderFrameDecoder()
    decoder.feed(encode(HighWatermark(1, 5)) + _frame(0x42, b""))
    assert decoder.next_frame() == HighWatermark(1, 5)
    with pytest.raises(ReplicationProtocolError, match="unknown frame type 0x42"):
        decoder.next_frame()
    decoder.feed(encode(HighWatermark(1, 6)))
    with pytest.raises(ReplicationProtocolError, match="unknown frame type 0x42"):
        decoder.next_frame()
    assert issubclass(ReplicationProtocolError, ProtocolError)


@_SLOW
@given(st.binary(max_size=300), st.booleans(), st.data())
def test_garbage_gives_frames_or_the_protocol_error_in_any_split(
    garbage: bytes, leader_side: bool, data: st.DataObject
) -> None:
    def outcome(chunks: list[bytes]) -> tuple[list[Frame], str | None]:
        decoder = FollowerFrameDecoder() if leader_side else LeaderFrameDecoder()
        frames: list[Frame] = []
        try:
            for chunk in chunks:
                decoder.feed(chunk)
                frames += _drain(decoder)
        except ReplicationProtocolError as exc:
            return frames, str(exc)
        return frames, None

    cut = data.draw(st.integers(0, len(garbage)))
    whole = outcome([garbage])
    assert outcome([garbage[:cut], garbage[cut:]]) == whole
    assert outcome([garbage[i : i + 1] for i in range(len(garbage))]) == whole


# ---------------------------------------------------------------------------------- encoder


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (Ack(U32 + 1, 0), r"Ack frame"),
        (Ack(0, -1), r"Ack frame"),
        (Hello("n", "t", U16 + 1, 0, 0, 0), r"Hello frame"),
        (Hello("n" * (MAX_STRING_SIZE + 1), "t", 0, 0, 0, 0), r"65536 bytes over 65535"),
        (Refuse(1, "\udc80"), r"surrogates not allowed"),
        (Cursors(1, "c", 0, ((0, 2**63),)), r"Cursors frame"),
        (Append(1, 0, 0, 0, b"r"), r"count 0 with 1 record bytes"),
        (Append(1, 0, 0, 1, b""), r"count 1 with 0 record bytes"),
        (Append(1, 0, 0, U32 + 1, b"r"), r"Append frame"),
    ],
)
def test_encoder_refuses_what_does_not_fit(frame: Frame, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode(frame)


# ---------------------------------------------------------------------------------- cost


def test_many_small_frames_fed_at_once_all_decode() -> None:
    """A burst of frames in one read decodes to every frame in order, the buffer emptied
    (consumed bytes are dropped once per feed, not once per frame)."""
    stream = b"".join(encode(Ack(1, i)) for i in range(10_000))
    decoder = FollowerFrameDecoder()
    decoder.feed(stream)
    frames = _drain(decoder)
    assert frames == [Ack(1, i) for i in range(10_000)]
    assert decoder.buffered == 0


# ---------------------------------------------------------------------------------- admin state


def test_admin_frame_layout() -> None:
    """The Admin body: fixed fields, then per channel its flag byte and its name."""
    frame = Admin(
        7,
        3,
        True,
        (ChannelAdmin("a", paused=True), ChannelAdmin("bé", ordered=True, skip_zan_test=True)),
    )
    body = (
        ADMIN.pack(7, 3, 0x1, 2)
        + ADMIN_CHANNEL.pack(0x1)
        + _s(b"a")
        + ADMIN_CHANNEL.pack(0x2 | 0x8)
        + _s("bé".encode())
    )
    assert encode(frame) == _frame(FrameType.ADMIN, body)
    assert _decode_one(encode(frame), LeaderFrameDecoder()) == frame
    skipped = Admin(1, 1, False, (ChannelAdmin("s", skipped=True),))
    assert encode(skipped).endswith(ADMIN_CHANNEL.pack(0x4) + _s(b"s"))


def test_hello_with_features_is_hello_ex_and_a_plain_hello_stays_plain() -> None:
    plain = Hello("n", "t", 2, 5, 10, 4)
    assert encode(plain)[4] == FrameType.HELLO  # what a leader from before HELLO_EX reads
    featured = Hello("n", "t", 2, 5, 10, 4, FEATURE_ADMIN)
    data = encode(featured)
    assert data[4] == FrameType.HELLO_EX
    assert data[5 : 5 + HELLO_EX.size] == HELLO_EX.pack(2, 5, 10, 4, FEATURE_ADMIN)
    assert _decode_one(data, FollowerFrameDecoder()) == featured
    with pytest.raises(ValueError, match="unknown feature bits"):
        encode(Hello("n", "t", 0, 0, 0, 0, 0x20))
    with pytest.raises(ValueError, match="only with FEATURE_TOPIC_ID"):
        encode(Hello("n", "t", 0, 0, 0, 0, FEATURE_ADMIN, "id"))


def test_hello_with_a_topic_id_ends_with_it() -> None:
    frame = Hello("n", "t", 2, 5, 10, 4, FEATURE_ADMIN | FEATURE_TOPIC_ID, "1f2e")
    data = encode(frame)
    assert data[4] == FrameType.HELLO_EX
    fixed = HELLO_EX.pack(2, 5, 10, 4, FEATURE_ADMIN | FEATURE_TOPIC_ID)
    assert data[5:] == fixed + _s(b"n") + _s(b"t") + _s(b"1f2e")
    assert _decode_one(data, FollowerFrameDecoder()) == frame
    empty = Hello("n", "t", 2, 5, 10, 4, FEATURE_TOPIC_ID)  # a copy whose id is not known
    assert encode(empty).endswith(_s(b"t") + _s(b""))
    assert _decode_one(encode(empty), FollowerFrameDecoder()) == empty


@pytest.mark.parametrize(
    ("frame_type", "body", "match", "leader_side"),
    [
        (FrameType.HELLO_EX, HELLO_EX.pack(0, 0, 0, 0, 0) + _s(b"n") + _s(b"t"), "none", True),
        (FrameType.HELLO_EX, HELLO_EX.pack(0, 0, 0, 0, 33) + _s(b"n") + _s(b"t"), "unknown", True),
        (FrameType.HELLO_EX, HELLO_EX.pack(0, 0, 0, 0, 17) + _s(b"n") + _s(b"t"), "topic_id", True),
        (FrameType.ADMIN_ACK, b"\x00" * 11, "ADMIN_ACK frame: body truncated", True),
        (FrameType.ADMIN, ADMIN.pack(1, 1, 0x2, 0), "topic flags 0x2", False),
        (FrameType.ADMIN, ADMIN.pack(1, 1, 0, 1) + b"\x10" + _s(b"c"), "flags 0x10", False),
        (FrameType.ADMIN, ADMIN.pack(1, 1, 0, 2) + b"\x01" + _s(b"c"), "body truncated", False),
        (FrameType.ADMIN, ADMIN.pack(1, 1, 0, 0) + b"!", "1 bytes after the body", False),
    ],
)
def test_malformed_admin_frames(
    frame_type: FrameType, body: bytes, match: str, leader_side: bool
) -> None:
    _fails(_frame(frame_type, body), leader_side=leader_side, match=match)


def test_admin_frames_are_refused_the_wrong_way() -> None:
    _fails(_frame(FrameType.ADMIN, b""), leader_side=True, match=r"only a leader sends it")
