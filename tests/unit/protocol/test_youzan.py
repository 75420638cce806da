"""youzan's consume starts and JSON header ext, with youzan's texts."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import ClientError, CommandParser, ConnState, ErrorCode, InternalCreateTopic
from protocol.consume import ConsumeStart, ConsumeStartError, StartKind, parse_consume_start
from protocol.encode import encode_command
from protocol.ext import JsonHeader, parse_json_header
from protocol.message import encode_ext_block


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"timestamp:1700000000", ConsumeStart(StartKind.TIMESTAMP, 1700000000)),
        (b"msgcount:0", ConsumeStart(StartKind.MSGCOUNT, 0)),
        ("virtual_queue:+12", ConsumeStart(StartKind.VIRTUAL_QUEUE, 12)),
        (b"special:-1", ConsumeStart(StartKind.SPECIAL, -1)),
    ],
)
def test_consume_starts(raw: bytes | str, expected: ConsumeStart) -> None:
    assert parse_consume_start(raw) == expected


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"count:1", "invalid consume offset:count:1"),
        (b"timestamp", "invalid consume offset:timestamp"),
        (b"timestamp:1:2", "invalid consume offset:timestamp:1:2"),
        (b"msgcount:", 'strconv.ParseInt: parsing "": invalid syntax'),
        (b"msgcount:1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
        (
            b"msgcount:9223372036854775808",
            'strconv.ParseInt: parsing "9223372036854775808": value out of range',
        ),
    ],
)
def test_bad_consume_starts(raw: bytes, text: str) -> None:
    with pytest.raises(ConsumeStartError) as info:
        parse_consume_start(raw)
    assert str(info.value) == text


@given(st.sampled_from(StartKind), st.integers(-(2**63), 2**63 - 1))
def test_consume_start_round_trip(kind: StartKind, value: int) -> None:
    start = ConsumeStart(kind, value)
    assert parse_consume_start(str(start)) == start


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (b'{"k":"v"}', JsonHeader(None, False)),
        (b'{"##trace_id":"18446744073709551615"}', JsonHeader(2**64 - 1, True)),
        (b'{"##client_dispatch_tag":"x","zan_test":false}', JsonHeader(None, True)),
        (b'{"zan_test":"true"}', JsonHeader(None, False)),
        (b" [1, 2]", JsonHeader(None, True)),  # not an object: nothing to keep
    ],
)
def test_json_headers(header: bytes, expected: JsonHeader) -> None:
    assert parse_json_header(header) == expected


@pytest.mark.parametrize(
    ("header", "text"),
    [
        (b"", "E_INVALID_JSON_HEADER fail to parse json header"),
        (b"{", "E_INVALID_JSON_HEADER fail to parse json header"),
        (b"[" * 100_000, "E_INVALID_JSON_HEADER fail to parse json header"),  # too deep
        (b'{"##trace_id":1}', "INVALID_TRACE_ID passin trace id should be string"),
        (b'{"##trace_id":"x"}', "INVALID_TRACE_ID invalid trace id"),
        (b'{"##trace_id":"18446744073709551616"}', "INVALID_TRACE_ID invalid trace id"),
    ],
)
def test_bad_json_headers(header: bytes, text: str) -> None:
    with pytest.raises(ClientError) as info:
        parse_json_header(header)
    assert info.value.text == text
    assert not info.value.fatal
    assert info.value.code in (ErrorCode.INVALID_JSON_HEADER, ErrorCode.INVALID_TRACE_ID)


def test_ext_block() -> None:
    assert encode_ext_block(b"") == b"\x00"
    assert encode_ext_block(b'{"a":"b"}') == b"\x04\x00\x09" + b'{"a":"b"}'


@pytest.mark.parametrize(
    ("command", "state"),
    [
        (InternalCreateTopic("t", 0), ConnState.INIT),
        (InternalCreateTopic("t", 7, True), ConnState.INIT),
        (InternalCreateTopic("t", 3, False), ConnState.SUBSCRIBED),
    ],
)
def test_internal_create_topic_round_trip_in_any_state(
    command: InternalCreateTopic, state: ConnState
) -> None:
    parser = CommandParser()
    parser.state = state
    parser.receive_data(encode_command(command))
    assert parser.next_event() == command


@pytest.mark.parametrize(
    ("flag", "ext"), [(b"1", True), (b"T", True), (b"True", True), (b"0", False), (b"F", False)]
)
def test_internal_create_topic_takes_gos_booleans(flag: bytes, ext: bool) -> None:
    parser = CommandParser()
    parser.receive_data(b"INTERNAL_CREATE_TOPIC t 1 " + flag + b"\n")
    assert parser.next_event() == InternalCreateTopic("t", 1, ext)
