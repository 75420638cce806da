"""protocol.lookup_v1: the sans-IO V1 parser (whole, byte at a time, with trailing data, and
arbitrary bytes), IDENTIFY body decoding as Go's json.Unmarshal does it, pnsq's partitioned
REGISTER form, and the client-side encoders and reply splitter."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, strategies as st

from protocol.lookup_v1 import (
    NEED_DATA,
    Closed,
    Event,
    Identify,
    LookupV1Error,
    LookupV1Parser,
    PeerIdentity,
    Ping,
    Register,
    ResponseReader,
    Unregister,
    decode_identify,
    encode_command,
    encode_identify,
    encode_response,
    identify_reply,
)

NODE = {
    "version": "1.3.0",
    "tcp_port": 4150,
    "http_port": 4151,
    "hostname": "h",
    "broadcast_address": "10.0.0.1",
}
IDENTIFY = encode_identify(NODE)
READY = b"  V1" + IDENTIFY  # magic, then an accepted IDENTIFY


def events(data: bytes, *, partitioned: bool = False, eof: bool = True) -> list[Event]:
    """Feed ``data`` at once; the events up to NEED_DATA (or Closed at EOF)."""
    parser = LookupV1Parser()
    parser.receive_data(data)
    if eof:
        parser.receive_data(b"")
    found: list[Event] = []
    while True:
        event = parser.next_event()
        if event is NEED_DATA:
            return found
        found.append(event)
        if isinstance(event, Identify):
            parser.partitioned = partitioned
        if isinstance(event, Closed):
            return found


def events_bytewise(data: bytes) -> list[Event]:
    parser = LookupV1Parser()
    found: list[Event] = []
    for i in range(len(data) + 1):
        while (event := parser.next_event()) is not NEED_DATA:
            found.append(event)
            if isinstance(event, Closed):
                return found
        parser.receive_data(data[i : i + 1] if i < len(data) else b"")
    found.append(parser.next_event())  # type: ignore[arg-type]
    return found


SESSION = (
    b"  V1"
    + b"PING\n"
    + IDENTIFY
    + b"REGISTER t\nREGISTER t c\nUNREGISTER t c\nUNREGISTER t\n  PING  \r\n"
)
EXPECTED: list[Event] = [
    Ping(),
    Identify(PeerIdentity("10.0.0.1", 4150, 4151, "1.3.0", "h")),
    Register("t"),
    Register("t", "c"),
    Unregister("t", "c"),
    Unregister("t"),
    Ping(),
    Closed(),
]


def test_session_whole_and_byte_at_a_time() -> None:
    assert events(SESSION) == EXPECTED
    assert events_bytewise(SESSION) == EXPECTED


def test_need_data_then_trailing_bytes_stay_buffered() -> None:
    parser = LookupV1Parser()
    parser.receive_data(b"  V1PI")
    assert parser.next_event() is NEED_DATA
    parser.receive_data(b"NG\nREG")
    assert parser.next_event() == Ping()
    assert parser.next_event() is NEED_DATA


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"  V2", "E_BAD_PROTOCOL"),
        (b"  V1FOO\n", "E_INVALID invalid command FOO"),
        (b"  V1\n", "E_INVALID invalid command "),
        (b"  V1REGISTER t\n", "E_INVALID client must IDENTIFY"),
        (READY + b"IDENTIFY\n", "E_INVALID cannot IDENTIFY again"),
        (READY + b"REGISTER\n", "E_INVALID REGISTER insufficient number of params"),
        (READY + b"REGISTER a!\n", "E_BAD_TOPIC REGISTER topic name 'a!' is not valid"),
        (READY + b"UNREGISTER t c!\n", "E_BAD_CHANNEL UNREGISTER channel name 'c!' is not valid"),
        (b"  V1IDENTIFY\n", "E_BAD_BODY IDENTIFY failed to read body size"),
        (b"  V1IDENTIFY\n\x00\x00\x00\x05{}", "E_BAD_BODY IDENTIFY failed to read body"),
        (b"  V1IDENTIFY\n\xff\xff\xff\xff", "E_BAD_BODY IDENTIFY failed to read body"),
    ],
)  # fmt: skip
def test_fatal_errors(data: bytes, text: str) -> None:
    with pytest.raises(LookupV1Error) as caught:
        events(data)
    assert str(caught.value) == text
    assert caught.value.reply == struct.pack(">i", len(text)) + text.encode()


def test_a_partial_line_at_eof_just_closes() -> None:
    assert events(b"  V1PI") == [Closed()]
    assert events(b"  V") == [Closed()]


def test_partitioned_peers_register_partitions() -> None:
    data = b"  V1" + IDENTIFY + b"REGISTER t 0\nREGISTER t 3 c\nUNREGISTER t 3 c\nUNREGISTER t 0\n"
    found = events(data, partitioned=True)
    assert found[1:] == [
        Register("t", None, 0),
        Register("t", "c", 3),
        Unregister("t", "c", 3),
        Unregister("t", None, 0),
        Closed(),
    ]


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (b"REGISTER t\n", "E_INVALID REGISTER insufficient number of params"),
        (b"REGISTER t x\n", "E_BAD_PARTITIONID REGISTER partition id 'x' is not valid"),
        (b"REGISTER t 255\n", "E_BAD_PARTITIONID REGISTER partition id '255' is not valid"),
        (b"REGISTER t -1 c\n", "E_BAD_PARTITIONID REGISTER partition id '-1' is not valid"),
        (b"REGISTER a! 0\n", "E_BAD_TOPIC REGISTER topic name 'a!' is not valid"),
    ],
)
def test_partitioned_errors(line: bytes, text: str) -> None:
    with pytest.raises(LookupV1Error) as caught:
        events(b"  V1" + IDENTIFY + line, partitioned=True)
    assert str(caught.value) == text


@given(st.binary(max_size=200))
def test_arbitrary_bytes_give_events_or_a_protocol_error(data: bytes) -> None:
    for magic in (b"", b"  V1", b"  V1" + IDENTIFY):
        code = "E_"
        try:
            events(magic + data)
        except LookupV1Error as exc:
            code = exc.code
        assert code.startswith("E_")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["REGISTER", "UNREGISTER"]),
            st.from_regex(r"[a-z0-9_.-]{1,20}", fullmatch=True),
            st.none() | st.from_regex(r"[a-z0-9_.-]{1,20}(#ephemeral)?", fullmatch=True),
            st.none() | st.integers(0, 254),
        ),
        max_size=10,
    )
)
def test_encoded_commands_parse_back(
    commands: list[tuple[str, str, str | None, int | None]],
) -> None:
    for partitioned in (False, True):
        data = b"  V1" + IDENTIFY
        expected: list[Event] = []
        for name, topic, channel, part in commands:
            part = part if partitioned else None
            if partitioned and part is None:
                part = 0
            data += encode_command(name, topic, part, channel)
            kind = Register if name == "REGISTER" else Unregister
            expected.append(kind(topic, channel, part))
        assert events(data, partitioned=partitioned)[1:] == [*expected, Closed()]


# ---------------------------------------------------------------- IDENTIFY bodies


def test_identify_keys_match_case_insensitively_and_unknown_keys_are_ignored() -> None:
    body = {k.upper(): v for k, v in NODE.items()} | {"extra": [1], "distributed_id": "x"}
    peer = decode_identify(json.dumps(body).encode())
    assert (peer.broadcast_address, peer.tcp_port, peer.http_port) == ("10.0.0.1", 4150, 4151)
    assert peer.distributed_id == "x"
    assert peer.node_id == "10.0.0.1:4150"


def test_identify_extensions_and_nulls() -> None:
    body = {**NODE, "pnsq_extensions": ["partitions", 3], "hostname": None}
    peer = decode_identify(json.dumps(body).encode())
    assert peer.extensions == ("partitions",)
    assert peer.hostname == ""


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b'"x"', b"1", b"{", b'{"tcp_port": NaN}', b'{"tcp_port": true}',
     b'{"tcp_port": 9223372036854775808}', b'{"version": {}}', b"[" * 100_000],
)  # fmt: skip
def test_identify_bodies_go_cannot_decode(raw: bytes) -> None:
    with pytest.raises(LookupV1Error) as caught:
        decode_identify(raw)
    assert str(caught.value) == "E_BAD_BODY IDENTIFY failed to decode JSON body"


def test_invalid_utf8_in_a_string_is_replaced_as_go_does() -> None:
    raw = json.dumps(NODE).encode().replace(b'"h"', b'"\xff"')
    assert decode_identify(raw).hostname == "\ufffd"


def test_identify_reply_is_sorted_and_compact() -> None:
    reply = identify_reply(
        broadcast_address="b", hostname="h", http_port=2, tcp_port=1, version="1.3.0"
    )
    assert (
        reply
        == b'{"broadcast_address":"b","hostname":"h","http_port":2,"tcp_port":1,"version":"1.3.0"}'
    )
    granted = identify_reply(
        broadcast_address="b",
        hostname="h",
        http_port=2,
        tcp_port=1,
        version="1.3.0",
        extensions=("partitions",),
    )
    assert list(json.loads(granted)) == [
        "broadcast_address", "hostname", "http_port", "pnsq_extensions", "tcp_port", "version",
    ]  # fmt: skip


# ---------------------------------------------------------------- client side


def test_response_reader_splits_replies() -> None:
    reader = ResponseReader()
    stream = encode_response(b"OK") + encode_response(b'{"a":1}') + encode_response(b"")
    for i in range(len(stream)):
        reader.receive_data(stream[i : i + 1])
    assert [reader.next_response(), reader.next_response(), reader.next_response()] == [
        b"OK",
        b'{"a":1}',
        b"",
    ]
    assert reader.next_response() is None
    reader.receive_data(struct.pack(">i", -1))
    with pytest.raises(ValueError, match="out of range"):
        reader.next_response()


def test_encode_command_leaves_out_missing_parts() -> None:
    assert encode_command("REGISTER", "t", None, None) == b"REGISTER t\n"
    assert encode_command("REGISTER", "t", 0, "c") == b"REGISTER t 0 c\n"
    assert encode_command("PING") == b"PING\n"
