"""Server-to-client frames, message frames and message ids.

Golden bytes come from the protocol reference (§1.3, §1.12): ``OK`` is
``00 00 00 06 00 00 00 00 4F 4B`` and a heartbeat is ``00 00 00 0F 00 00 00 00`` + ``_heartbeat_``.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from protocol import ClientError, ErrorCode, frames
from protocol.frames import FrameType, encode_error, encode_frame, encode_response
from protocol.message import (
    MAX_PARTITIONS,
    MESSAGE_DETAIL,
    MESSAGE_FRAME_HEADER,
    MESSAGE_ID_SIZE,
    PARTITION_SHIFT,
    decode_message_id,
    encode_message_frame,
    encode_message_id,
    make_internal_id,
    message_frame_header,
    partition_of,
)
from tests import strategies as S


def decode_frames(data: bytes) -> list[tuple[int, bytes]]:
    """``[u32 size][i32 type][data]``* → [(type, data)]; the data must be consumed exactly."""
    out = []
    at = 0
    while at < len(data):
        size, frame_type = struct.unpack_from(">Ii", data, at)
        assert size >= 4
        out.append((frame_type, data[at + 8 : at + 4 + size]))
        at += 4 + size
    assert at == len(data)
    return out


@pytest.mark.parametrize(
    ("frame", "golden"),
    [
        pytest.param(frames.OK, bytes.fromhex("00000006 00000000 4F4B"), id="OK"),
        pytest.param(
            frames.HEARTBEAT, bytes.fromhex("0000000F 00000000") + b"_heartbeat_", id="heartbeat"
        ),
        pytest.param(
            frames.CLOSE_WAIT, bytes.fromhex("0000000E 00000000") + b"CLOSE_WAIT", id="CLOSE_WAIT"
        ),
        pytest.param(
            encode_error("E_BAD_PROTOCOL"),
            bytes.fromhex("00000012 00000001") + b"E_BAD_PROTOCOL",
            id="E_BAD_PROTOCOL",
        ),
        pytest.param(
            encode_error("E_INVALID invalid command "),
            bytes.fromhex("0000001E 00000001") + b"E_INVALID invalid command ",
            id="empty-command",
        ),
        pytest.param(encode_response(b""), bytes.fromhex("00000004 00000000"), id="empty"),
    ],
)
def test_golden_frames(frame: bytes, golden: bytes) -> None:
    assert frame == golden


def test_magic() -> None:
    assert frames.MAGIC_V2 == b"  V2"
    assert frames.HEARTBEAT_DATA == b"_heartbeat_"


@given(data=st.binary(max_size=300), frame_type=st.sampled_from(FrameType))
def test_frames_decode_back(data: bytes, frame_type: FrameType) -> None:
    frame = encode_frame(frame_type, data)
    assert struct.unpack_from(">I", frame)[0] == 4 + len(data)
    assert decode_frames(frame) == [(frame_type, data)]
    assert decode_frames(encode_response(data)) == [(FrameType.RESPONSE, data)]


def test_error_frame_keeps_raw_id_bytes() -> None:
    """FIN's error text echoes the id's bytes unchanged, whatever they are."""
    message_id = b"\x00\xff \n\xfe\x80abcdefghij"
    as_text = message_id.decode("utf-8", "surrogateescape")
    exc = ClientError(ErrorCode.FIN_FAILED, f"FIN {as_text} failed ID not in flight")
    assert not exc.fatal
    assert decode_frames(encode_error(exc.text)) == [
        (FrameType.ERROR, b"E_FIN_FAILED FIN " + message_id + b" failed ID not in flight")
    ]


@given(text=st.text(max_size=100))
def test_error_frames_decode_back(text: str) -> None:
    assert decode_frames(encode_error(text)) == [(FrameType.ERROR, text.encode())]


# --------------------------------------------------------------------------- message frames


_ID = bytes(range(16))


@pytest.mark.parametrize(
    ("timestamp", "attempts", "message_id", "body"),
    [
        pytest.param(0, 1, _ID, b"", id="empty-body"),
        pytest.param(1_700_000_000_123_456_789, 1, b"0123456789abcdef", b"hello", id="hex-id"),
        pytest.param(-1, 65_535, b" " * 16, b"\n", id="negative-ts-max-attempts"),
        pytest.param(2**63 - 1, 2, b"\n" * 16, b"x" * 1000, id="max-ts"),
    ],
)
def test_message_frame_layout(
    timestamp: int, attempts: int, message_id: bytes, body: bytes
) -> None:
    frame = encode_message_frame(timestamp, attempts, message_id, body)
    [(frame_type, data)] = decode_frames(frame)
    assert frame_type == FrameType.MESSAGE == 2
    assert struct.unpack_from(">I", frame)[0] == 4 + 8 + 2 + 16 + len(body)
    # [ts i64][attempts u16][16-byte id][body]
    assert struct.unpack_from(">qH", data) == (timestamp, attempts)
    assert data[10:26] == message_id
    assert data[26:] == body
    assert message_frame_header(timestamp, attempts, len(body)) + message_id + body == frame


def test_message_frame_golden() -> None:
    frame = encode_message_frame(1, 1, b"0123456789abcdef", b"hi")
    assert frame == (
        bytes.fromhex("00000020 00000002 0000000000000001 0001")  # size 32, type 2, ts, attempts
        + b"0123456789abcdef"
        + b"hi"
    )


@given(
    timestamp=st.integers(-(2**63), 2**63 - 1),
    attempts=st.integers(0, 65_535),
    message_id=S.message_ids,
    body=st.binary(max_size=300),
)
def test_message_frames_decode_back(
    timestamp: int, attempts: int, message_id: bytes, body: bytes
) -> None:
    frame = encode_message_frame(timestamp, attempts, message_id, body)
    size, frame_type, ts, att = MESSAGE_FRAME_HEADER.unpack_from(frame)
    assert (size, frame_type, ts, att) == (len(frame) - 4, 2, timestamp, attempts)
    rest = frame[MESSAGE_FRAME_HEADER.size :]
    assert (rest[:MESSAGE_ID_SIZE], rest[MESSAGE_ID_SIZE:]) == (message_id, body)


def test_detail_block_size() -> None:
    assert MESSAGE_DETAIL.size == 12  # youzan: [u64 offset][u32 raw size]


# --------------------------------------------------------------------------- message ids


@given(internal_id=st.integers(0, 2**64 - 1), trace_id=st.integers(0, 2**64 - 1))
def test_message_id_round_trip(internal_id: int, trace_id: int) -> None:
    raw = encode_message_id(internal_id, trace_id)
    assert len(raw) == MESSAGE_ID_SIZE
    assert raw == internal_id.to_bytes(8, "big") + trace_id.to_bytes(8, "big")
    assert decode_message_id(raw) == (internal_id, trace_id)


def test_message_id_default_trace_is_zero() -> None:
    assert encode_message_id(5) == (5).to_bytes(8, "big") + bytes(8)


@given(
    partition=st.integers(0, MAX_PARTITIONS - 1), sequence=st.integers(0, 2**PARTITION_SHIFT - 1)
)
def test_partition_of(partition: int, sequence: int) -> None:
    internal_id = make_internal_id(partition, sequence)
    assert partition_of(internal_id) == partition
    assert internal_id & (2**PARTITION_SHIFT - 1) == sequence
    assert partition_of(decode_message_id(encode_message_id(internal_id, 7))[0]) == partition


@pytest.mark.parametrize(
    ("partition", "prefix"),
    [(1, "112589"), (2, "225179")],  # youzan docs: "partition 1 IDs start with 112589…"
)
def test_partition_id_prefixes(partition: int, prefix: str) -> None:
    assert str(make_internal_id(partition, 2)).startswith(prefix)


def test_the_frame_prefix_is_the_header_and_the_id_back_to_back() -> None:
    from protocol.message import (
        MESSAGE_FRAME_FIXED,
        MESSAGE_FRAME_PREFIX,
        encode_message_frame,
        encode_message_id,
    )

    body = b"payload"
    prefix = MESSAGE_FRAME_PREFIX.pack(MESSAGE_FRAME_FIXED + len(body), 2, 123, 4, 7 << 50 | 9, 77)
    assert prefix + body == encode_message_frame(123, 4, encode_message_id(7 << 50 | 9, 77), body)
