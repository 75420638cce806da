"""Tests for protocol.client_frames: the client's incremental server-frame decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import NEED_DATA, ProtocolError
from protocol.client_frames import (
    ErrorFrame,
    FrameDecoder,
    MessageFrame,
    Response,
    ServerFrame,
)
from protocol.frames import (
    CLOSE_WAIT,
    FRAME_HEADER,
    HEARTBEAT,
    OK,
    FrameType,
    encode_error,
    encode_frame,
    encode_response,
)
from protocol.message import encode_message_frame, encode_message_id


def _encode(frame: ServerFrame) -> bytes:
    match frame:
        case Response(data=data):
            return encode_response(data)
        case ErrorFrame(text=text):
            return encode_error(text)
        case MessageFrame(timestamp_ns=ts, attempts=attempts, message_id=mid, body=body):
            return encode_message_frame(ts, attempts, mid, body)
    raise AssertionError(frame)


def _drain(decoder: FrameDecoder) -> list[ServerFrame]:
    out: list[ServerFrame] = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        out.append(frame)
    return out


_error_texts = st.builds(
    lambda code, rest: f"{code} {rest}",
    st.sampled_from(["E_INVALID", "E_BAD_TOPIC", "E_FIN_FAILED", "E_PUB_FAILED"]),
    st.text(max_size=40),
)
_frames: st.SearchStrategy[ServerFrame] = st.one_of(
    st.builds(Response, st.binary(max_size=64)),
    st.builds(ErrorFrame, _error_texts),
    st.builds(
        MessageFrame,
        timestamp_ns=st.integers(-(2**63), 2**63 - 1),
        attempts=st.integers(0, 2**16 - 1),
        message_id=st.builds(
            encode_message_id, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)
        ),
        body=st.binary(max_size=200),
    ),
)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(OK, Response(b"OK"), id="ok"),
        pytest.param(CLOSE_WAIT, Response(b"CLOSE_WAIT"), id="close-wait"),
        pytest.param(HEARTBEAT, Response(b"_heartbeat_"), id="heartbeat"),
        pytest.param(
            b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_", Response(b"_heartbeat_"), id="golden"
        ),
        pytest.param(
            encode_error("E_INVALID invalid command FOO"),
            ErrorFrame("E_INVALID invalid command FOO"),
            id="error",
        ),
        pytest.param(
            b"\x00\x00\x00\x20\x00\x00\x00\x02" + b"\x00" * 7 + b"\x05\x00\x01" + b"A" * 16 + b"hi",
            MessageFrame(5, 1, b"A" * 16, b"hi"),
            id="message-golden",
        ),
        pytest.param(
            encode_message_frame(1, 2, b" \n" * 8, b""),
            MessageFrame(1, 2, b" \n" * 8, b""),
            id="message-empty-body-binary-id",
        ),
    ],
)
def test_golden_frames(wire: bytes, expected: ServerFrame) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(wire)
    assert _drain(decoder) == [expected]
    assert decoder.buffered == 0


def test_error_frame_code_and_fatality() -> None:
    assert ErrorFrame("E_FIN_FAILED FIN x failed ID not in flight").code == "E_FIN_FAILED"
    assert not ErrorFrame("E_FIN_FAILED FIN x failed").fatal
    assert ErrorFrame('E_BAD_TOPIC PUB topic name "a b" is not valid').fatal
    assert ErrorFrame("E_INVALID").code == "E_INVALID"


def test_raw_bytes_in_error_text_survive() -> None:
    raw = b"E_FIN_FAILED FIN \xff\xfe\x00 failed"
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(FrameType.ERROR, raw))
    (frame,) = _drain(decoder)
    assert isinstance(frame, ErrorFrame)
    assert frame.text.encode("utf-8", "surrogateescape") == raw


@given(st.lists(_frames, max_size=8))
def test_round_trip_in_one_chunk(frames: list[ServerFrame]) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(_encode(f) for f in frames))
    assert _drain(decoder) == frames
    assert decoder.buffered == 0


@given(st.lists(_frames, max_size=5))
def test_round_trip_byte_by_byte(frames: list[ServerFrame]) -> None:
    decoder = FrameDecoder()
    out: list[ServerFrame] = []
    for byte in b"".join(_encode(f) for f in frames):
        decoder.receive_data(bytes([byte]))
        out.extend(_drain(decoder))
    assert out == frames


@given(st.lists(_frames, max_size=8), st.data())
def test_round_trip_arbitrary_chunks(frames: list[ServerFrame], data: st.DataObject) -> None:
    wire = b"".join(_encode(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder = FrameDecoder()
    out: list[ServerFrame] = []
    for start, end in zip([0, *cuts], [*cuts, len(wire)], strict=True):
        decoder.receive_data(wire[start:end])
        out.extend(_drain(decoder))
    assert out == frames


@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_frames_or_protocol_error(wire: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.receive_data(wire)
    try:
        frames = _drain(decoder)
    except ProtocolError:
        with pytest.raises(ProtocolError):  # the error sticks
            decoder.next_frame()
        return
    assert all(isinstance(f, Response | ErrorFrame | MessageFrame) for f in frames)


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        pytest.param(FRAME_HEADER.pack(3, 0), "invalid frame size 3", id="size-below-type"),
        pytest.param(FRAME_HEADER.pack(2000, 0), "invalid frame size 2000", id="too-big"),
        pytest.param(encode_frame(FrameType.MESSAGE, b"x" * 25), "too short", id="short-message"),
        pytest.param(FRAME_HEADER.pack(4, 7), "unknown frame type 7", id="bad-type"),
    ],
)
def test_invalid_framing(wire: bytes, message: str) -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.receive_data(wire)
    with pytest.raises(ProtocolError, match=message):
        decoder.next_frame()


def test_partial_frame_needs_data_and_keeps_its_bytes() -> None:
    wire = OK + encode_message_frame(7, 1, b"B" * 16, b"body")
    decoder = FrameDecoder()
    decoder.receive_data(wire[:-1])
    assert decoder.next_frame() == Response(b"OK")
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == len(wire) - len(OK) - 1
    decoder.receive_data(wire[-1:])
    assert decoder.next_frame() == MessageFrame(7, 1, b"B" * 16, b"body")
    assert decoder.next_frame() is NEED_DATA
