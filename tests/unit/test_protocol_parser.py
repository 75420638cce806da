"""CommandParser: round trips with encode_command, chunking, fuzzing, and nsqd's error texts.

Error texts are nsqd 1.3.0's (``nsqd/protocol_v2.go``); the ones that reach the wire are also
checked against the real Go nsqd in ``tests/integration/test_error_table.py``. ``go_quote``
expectations were produced by Go 1.26's ``fmt.Sprintf("%q", string(b))``.
"""

from __future__ import annotations

import struct
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol import (
    NEED_DATA,
    ClientError,
    Command,
    CommandParser,
    ConnectionAbort,
    ConnState,
    Dpub,
    Fin,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    ParserLimits,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubMode,
    Touch,
)
from protocol.encode import encode_command, encode_mpub_body
from protocol.gostr import go_bytes, go_quote, parse_base10
from protocol.names import is_ephemeral, is_valid_name
from tests import strategies as S

ID = b"0123456789abcdef"
BIN_ID = b" \n\r\x00\xff FIN \n\n\r\n \xfe"  # 16 bytes a line parser would mis-split
assert len(BIN_ID) == 16

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def size(n: int) -> bytes:
    """A 4-byte big-endian signed size field."""
    return struct.pack(">i", n)


def parser_in(
    state: ConnState = ConnState.INIT, limits: ParserLimits | None = None
) -> CommandParser:
    parser = CommandParser(limits)
    parser.state = state
    return parser


def drain(parser: CommandParser) -> list[Command]:
    """Every complete command buffered right now."""
    out: list[Command] = []
    while (event := parser.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def error_of(
    data: bytes, state: ConnState = ConnState.INIT, limits: ParserLimits | None = None
) -> ClientError:
    parser = parser_in(state, limits)
    parser.receive_data(data)
    with pytest.raises(ClientError) as info:
        drain(parser)
    return info.value


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    ("strategy", "state"),
    [pytest.param(strategy, state, id=name) for name, strategy, state in S.COMMANDS],
)
@_PROPS
@given(data=st.data())
def test_round_trip_every_command_type(
    strategy: st.SearchStrategy[Command], state: ConnState, data: st.DataObject
) -> None:
    command = data.draw(strategy)
    parser = parser_in(state)
    parser.receive_data(encode_command(command))
    assert parser.next_event() == command
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == 0
    assert parser.state is S.next_state(state, command)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(b"SUB_ORDER t c\n", Sub("t", "c", None, SubMode.ORDERED), id="SUB_ORDER"),
        pytest.param(b"SUB_ORDERED t c 3\n", Sub("t", "c", 3, SubMode.ORDERED), id="SUB_ORDERED"),
        pytest.param(
            b"SUB_ADVANCED t c 0 timestamp:123\n",
            Sub("t", "c", 0, SubMode.ADVANCED, "timestamp:123"),
            id="SUB_ADVANCED-start",
        ),
        pytest.param(
            b"SUB_ADVANCED t c 1 \n",
            Sub("t", "c", 1, SubMode.ADVANCED),
            id="SUB_ADVANCED-empty-start",
        ),
        pytest.param(b"SUB t c 3 extra\n", Sub("t", "c", 3), id="extra-params-ignored"),
        pytest.param(b"SUB t c\r\n", Sub("t", "c"), id="crlf"),
        pytest.param(b"SUB t#ephemeral c#ephemeral\n", Sub("t#ephemeral", "c#ephemeral"), id="eph"),
    ],
)
def test_sub_forms(line: bytes, expected: Sub) -> None:
    parser = parser_in()
    parser.receive_data(line)
    assert drain(parser) == [expected]
    assert parser.state is ConnState.SUBSCRIBED


def test_pub_ext_with_an_empty_header_is_parsed() -> None:
    # youzan refuses it while reading the JSON: E_INVALID_JSON_HEADER, not fatal (the session)
    parser = parser_in()
    parser.receive_data(b"PUB_EXT t 2\n" + size(3) + b"\x00\x00x")
    assert drain(parser) == [PubExt("t", b"", b"x", 2)]


@pytest.mark.parametrize(
    ("data", "state", "expected"),
    [
        pytest.param(b"RDY\n", ConnState.SUBSCRIBED, [Rdy(1)], id="rdy-default-1"),
        pytest.param(b"RDY \n", ConnState.SUBSCRIBED, [Rdy(0)], id="rdy-empty-is-0"),
        pytest.param(b"RDY 5\r\n", ConnState.SUBSCRIBED, [Rdy(5)], id="rdy-crlf"),
        pytest.param(b"RDY 5\n", ConnState.CLOSING, [], id="rdy-ignored-closing"),
        pytest.param(b"FIN " + ID + b"\r\n", ConnState.SUBSCRIBED, [Fin(ID)], id="fin-crlf"),
        pytest.param(b"FIN " + BIN_ID + b"\n", ConnState.CLOSING, [Fin(BIN_ID)], id="fin-bin"),
        pytest.param(
            b"REQ " + BIN_ID + b" 10\n", ConnState.SUBSCRIBED, [Req(BIN_ID, 10)], id="req"
        ),
        pytest.param(b"REQ " + ID + b" 10\r\n", ConnState.SUBSCRIBED, [Req(ID, 10)], id="req-crlf"),
        pytest.param(b"REQ " + ID + b" \n", ConnState.SUBSCRIBED, [Req(ID, 0)], id="req-empty-0"),
        pytest.param(b"REQ " + ID + b" 7 x\n", ConnState.SUBSCRIBED, [Req(ID, 7)], id="req-extra"),
        pytest.param(b"TOUCH " + BIN_ID + b"\n", ConnState.SUBSCRIBED, [Touch(BIN_ID)], id="touch"),
        pytest.param(b"NOP\nNOP\r\n", ConnState.INIT, [Nop(), Nop()], id="nops"),
        pytest.param(
            b"PUB t 7\n" + size(1) + b"x", ConnState.INIT, [Pub("t", b"x", 7)], id="pub-p"
        ),
        pytest.param(
            b"PUB t\r\n" + size(1) + b"\n", ConnState.INIT, [Pub("t", b"\n")], id="pub-cr"
        ),
        pytest.param(
            b"PUB t -3\n" + size(1) + b"x", ConnState.INIT, [Pub("t", b"x", -3)], id="neg"
        ),
        pytest.param(
            b"PUB t +3\n" + size(1) + b"x", ConnState.INIT, [Pub("t", b"x", 3)], id="plus"
        ),
        pytest.param(
            b"MPUB_EXT t\n" + size(11) + encode_mpub_body([b"\x00\x00b"]),
            ConnState.INIT,
            [MpubExt("t", [(b"", b"b")])],
            id="mpub-ext-empty-header",
        ),
    ],
)
def test_specific_parses(data: bytes, state: ConnState, expected: list[Command]) -> None:
    parser = parser_in(state)
    parser.receive_data(data)
    assert drain(parser) == expected
    assert parser.buffered == 0


# --------------------------------------------------------------------------- chunking


def _encoded(commands: list[Command]) -> tuple[bytes, list[tuple[int, Command]]]:
    """The stream, and (end offset, command) of each command that produces an event."""
    state = ConnState.INIT
    stream = b""
    ends: list[tuple[int, Command]] = []
    for command in commands:
        stream += encode_command(command)
        if S.produces_event(state, command):
            ends.append((len(stream), command))
        state = S.next_state(state, command)
    return stream, ends


def _feed(chunks: list[bytes]) -> tuple[CommandParser, list[Command]]:
    """Feed chunk by chunk, draining after each; returns the parser and all events."""
    parser = CommandParser()
    events: list[Command] = []
    for chunk in chunks:
        parser.receive_data(chunk)
        events += drain(parser)
        assert parser.next_event() is NEED_DATA  # and it stays NEED_DATA
    return parser, events


@_PROPS
@given(data=st.data(), stream=S.command_streams())
def test_stream_all_at_once_and_random_splits(
    data: st.DataObject, stream: tuple[list[Command], ConnState]
) -> None:
    commands, final_state = stream
    raw, ends = _encoded(commands)
    expected = [command for _, command in ends]

    whole, events = _feed([raw])
    assert events == expected
    assert whole.buffered == 0
    assert whole.state is final_state

    chunks = data.draw(S.splits(raw))
    parser = CommandParser()
    seen: list[Command] = []
    fed = 0
    for chunk in chunks:
        parser.receive_data(chunk)
        fed += len(chunk)
        seen += drain(parser)
        # NEED_DATA only when incomplete: every command fully fed has come out, no more
        assert seen == [command for end, command in ends if end <= fed]
    assert seen == expected
    assert parser.state is final_state


@settings(max_examples=60, deadline=None)
@given(stream=S.command_streams(max_size=6))
def test_stream_byte_by_byte(stream: tuple[list[Command], ConnState]) -> None:
    commands, _ = stream
    raw, ends = _encoded(commands)
    parser = CommandParser()
    seen: list[Command] = []
    for fed in range(1, len(raw) + 1):
        parser.receive_data(raw[fed - 1 : fed])
        seen += drain(parser)
        assert seen == [command for end, command in ends if end <= fed]
    assert seen == [command for _, command in ends]


@_PROPS
@given(data=st.data(), stream=S.command_streams())
def test_trailing_partial_command(
    data: st.DataObject, stream: tuple[list[Command], ConnState]
) -> None:
    commands, final_state = stream
    raw, ends = _encoded(commands)
    nxt = data.draw(S.commands_in(final_state))
    tail = encode_command(nxt)
    cut = data.draw(st.integers(0, len(tail) - 1))
    parser, events = _feed(data.draw(S.splits(raw + tail[:cut])))
    assert events == [command for _, command in ends]
    assert parser.next_event() is NEED_DATA
    assert parser.buffered == cut
    parser.receive_data(tail[cut:])
    expected = [nxt] if S.produces_event(final_state, nxt) else []
    assert drain(parser) == expected
    assert parser.buffered == 0


# --------------------------------------------------------------------------- fuzzing


def _outcomes(
    chunks: list[bytes], state: ConnState, heartbeats_disabled: bool, tls_required: bool
) -> list[object]:
    """Events, then the first error (as a tuple); checks that fatal errors stick."""
    parser = parser_in(state)
    parser.heartbeats_disabled = heartbeats_disabled
    parser.tls_required = tls_required
    out: list[object] = []
    for chunk in chunks:
        parser.receive_data(chunk)
        while True:
            failure: ClientError | ConnectionAbort | None = None
            try:
                event = parser.next_event()
            except (ClientError, ConnectionAbort) as exc:
                failure = exc
            if failure is not None:
                if isinstance(failure, ClientError):
                    # every error the parser itself raises is fatal, as in nsqd
                    assert failure.fatal
                    assert failure.text == f"{failure.code} {failure.description}"
                    out.append(("error", failure.text))
                else:
                    out.append(("abort",))
                _assert_sticky(parser, type(failure), str(failure))
                return out
            if event is NEED_DATA:
                break
            assert isinstance(event, Command)
            out.append(event)
    return out


def _assert_sticky(parser: CommandParser, kind: type[Exception], text: str) -> None:
    for more in (b"", b"NOP\n", b"PUB t\n" + size(1) + b"x"):
        parser.receive_data(more)
        with pytest.raises(kind) as info:
            parser.next_event()
        assert str(info.value) == text


_states = st.sampled_from(ConnState)


@_FUZZ
@given(
    data=st.data(),
    raw=st.binary(max_size=600),
    state=_states,
    hb=st.booleans(),
    tls=st.booleans(),
)
def test_arbitrary_bytes(
    data: st.DataObject, raw: bytes, state: ConnState, hb: bool, tls: bool
) -> None:
    whole = _outcomes([raw], state, hb, tls)
    assert _outcomes(data.draw(S.splits(raw)), state, hb, tls) == whole


@_FUZZ
@given(data=st.data(), stream=S.command_streams(), state=_states, hb=st.booleans())
def test_mutated_streams(
    data: st.DataObject, stream: tuple[list[Command], ConnState], state: ConnState, hb: bool
) -> None:
    raw = b"".join(encode_command(c) for c in stream[0])
    bad = data.draw(S.mutated(raw))
    whole = _outcomes([bad], state, hb, False)
    assert _outcomes(data.draw(S.splits(bad)), state, hb, False) == whole
    if len(bad) <= 400:
        assert _outcomes([bad[i : i + 1] for i in range(len(bad))], state, hb, False) == whole


# --------------------------------------------------------------------------- nsqd's error texts


@pytest.mark.parametrize(
    ("data", "state", "text"),
    [
        pytest.param(b"FOO bar\n", ConnState.INIT, "E_INVALID invalid command FOO", id="unknown"),
        pytest.param(b"\n", ConnState.INIT, "E_INVALID invalid command ", id="empty-line"),
        pytest.param(b"\r\n", ConnState.INIT, "E_INVALID invalid command ", id="crlf-line"),
        pytest.param(b"nop\n", ConnState.INIT, "E_INVALID invalid command nop", id="lowercase"),
        pytest.param(b" NOP\n", ConnState.INIT, "E_INVALID invalid command ", id="lead-space"),
        pytest.param(b"\xffX\n", ConnState.INIT, "E_INVALID invalid command \udcffX", id="raw"),
        pytest.param(
            b"PUB\n",
            ConnState.INIT,
            "E_INVALID PUB insufficient number of parameters",
            id="pub-params",
        ),
        pytest.param(
            b"MPUB\n",
            ConnState.INIT,
            "E_INVALID MPUB insufficient number of parameters",
            id="mpub-params",
        ),
        pytest.param(
            b"DPUB t\n",
            ConnState.INIT,
            "E_INVALID DPUB insufficient number of parameters",
            id="dpub-params",
        ),
        pytest.param(
            b"SUB t\n",
            ConnState.INIT,
            "E_INVALID SUB insufficient number of parameters",
            id="sub-params",
        ),
        pytest.param(
            b"PUB b@d\n",
            ConnState.INIT,
            'E_BAD_TOPIC PUB topic name "b@d" is not valid',
            id="pub-topic",
        ),
        pytest.param(
            b"PUB \n",
            ConnState.INIT,
            'E_BAD_TOPIC PUB topic name "" is not valid',
            id="pub-empty-topic",
        ),
        pytest.param(
            b"PUB " + b"a" * 65 + b"\n",
            ConnState.INIT,
            f'E_BAD_TOPIC PUB topic name "{"a" * 65}" is not valid',
            id="pub-65",
        ),
        pytest.param(
            b"PUB a\tb\xff\n",
            ConnState.INIT,
            'E_BAD_TOPIC PUB topic name "a\\tb\\xff" is not valid',
            id="pub-quoted",
        ),
        pytest.param(
            b"MPUB b@d\n",
            ConnState.INIT,
            'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "b@d" is not valid',
            id="mpub-topic",
        ),
        pytest.param(
            b"DPUB b@d 1\n",
            ConnState.INIT,
            'E_BAD_TOPIC DPUB topic name "b@d" is not valid',
            id="dpub-topic",
        ),
        pytest.param(
            b"SUB  t c\n",
            ConnState.INIT,
            'E_BAD_TOPIC SUB topic name "" is not valid',
            id="sub-double-space",
        ),
        pytest.param(
            b"SUB t c!\n",
            ConnState.INIT,
            'E_BAD_CHANNEL SUB channel name "c!" is not valid',
            id="sub-channel",
        ),
        pytest.param(
            b"PUB t\n" + size(0),
            ConnState.INIT,
            "E_BAD_MESSAGE PUB invalid message body size 0",
            id="pub-0",
        ),
        pytest.param(
            b"PUB t\n" + size(-1),
            ConnState.INIT,
            "E_BAD_MESSAGE PUB invalid message body size -1",
            id="pub-neg",
        ),
        pytest.param(
            b"PUB t\n" + size(1_048_577),
            ConnState.INIT,
            "E_BAD_MESSAGE PUB message too big 1048577 > 1048576",
            id="pub-big",
        ),
        pytest.param(
            b"DPUB t 5\n" + size(0),
            ConnState.INIT,
            "E_BAD_MESSAGE DPUB invalid message body size 0",
            id="dpub-0",
        ),
        pytest.param(
            b"DPUB t abc\n",
            ConnState.INIT,
            "E_INVALID DPUB could not parse timeout abc",
            id="dpub-parse",
        ),
        pytest.param(
            b"DPUB t -1\n",
            ConnState.INIT,
            "E_INVALID DPUB could not parse timeout -1",
            id="dpub-neg",
        ),
        pytest.param(
            b"DPUB t 3600001\n",
            ConnState.INIT,
            "E_INVALID DPUB timeout 3600001 out of range 0-3600000",
            id="dpub-range",
        ),
        pytest.param(
            b"MPUB t\n" + size(0),
            ConnState.INIT,
            "E_BAD_BODY MPUB invalid body size 0",
            id="mpub-0",
        ),
        pytest.param(
            b"MPUB t\n" + size(5_242_881),
            ConnState.INIT,
            "E_BAD_BODY MPUB body too big 5242881 > 5242880",
            id="mpub-big",
        ),
        pytest.param(
            b"MPUB t\n" + size(4) + size(0),
            ConnState.INIT,
            "E_BAD_BODY MPUB invalid message count 0",
            id="mpub-count-0",
        ),
        pytest.param(
            b"MPUB t\n" + size(4) + size(1_048_576),
            ConnState.INIT,
            "E_BAD_BODY MPUB invalid message count 1048576",
            id="mpub-count-max",
        ),
        pytest.param(
            b"MPUB t\n" + size(8) + size(1) + size(0),
            ConnState.INIT,
            "E_BAD_MESSAGE MPUB invalid message(0) body size 0",
            id="mpub-elem-0",
        ),
        pytest.param(
            b"MPUB t\n" + size(13) + size(2) + size(1) + b"a" + size(-7),
            ConnState.INIT,
            "E_BAD_MESSAGE MPUB invalid message(1) body size -7",
            id="mpub-elem-neg",
        ),
        pytest.param(
            b"MPUB t\n" + size(8) + size(1) + size(1_048_577),
            ConnState.INIT,
            "E_BAD_MESSAGE MPUB message too big 1048577 > 1048576",
            id="mpub-elem-big",
        ),
        pytest.param(
            b"MPUB t\n" + size(9) + size(2) + size(1) + b"a",
            ConnState.INIT,
            "E_BAD_MESSAGE MPUB failed to read message(1) body size",
            id="mpub-short",
        ),
        pytest.param(
            b"MPUB t\n" + size(9) + size(1) + size(5) + b"a",
            ConnState.INIT,
            "E_BAD_MESSAGE MPUB failed to read message body",
            id="mpub-short-body",
        ),
        pytest.param(b"RDY 1\n", ConnState.INIT, "E_INVALID cannot RDY in current state", id="rdy"),
        pytest.param(
            b"RDY abc\n",
            ConnState.SUBSCRIBED,
            "E_INVALID RDY could not parse count abc",
            id="rdy-parse",
        ),
        pytest.param(
            b"RDY -1\n",
            ConnState.SUBSCRIBED,
            "E_INVALID RDY could not parse count -1",
            id="rdy-neg",
        ),
        pytest.param(
            b"RDY 2501\n",
            ConnState.SUBSCRIBED,
            "E_INVALID RDY count 2501 out of range 0-2500",
            id="rdy-range",
        ),
        pytest.param(
            b"FIN " + ID + b"\n",
            ConnState.INIT,
            "E_INVALID cannot FIN in current state",
            id="fin-state",
        ),
        pytest.param(
            b"REQ " + ID + b" 1\n",
            ConnState.INIT,
            "E_INVALID cannot REQ in current state",
            id="req-state",
        ),
        pytest.param(
            b"TOUCH " + ID + b"\n",
            ConnState.INIT,
            "E_INVALID cannot TOUCH in current state",
            id="touch-state",
        ),
        pytest.param(
            b"FIN\n",
            ConnState.SUBSCRIBED,
            "E_INVALID FIN insufficient number of params",
            id="fin-params",
        ),
        pytest.param(
            b"REQ\n",
            ConnState.CLOSING,
            "E_INVALID REQ insufficient number of params",
            id="req-params",
        ),
        pytest.param(
            b"REQ " + ID + b"\n",
            ConnState.SUBSCRIBED,
            "E_INVALID REQ insufficient number of params",
            id="req-no-timeout",
        ),
        pytest.param(
            b"REQ " + ID + b"\r\n",
            ConnState.SUBSCRIBED,
            "E_INVALID REQ insufficient number of params",
            id="req-no-timeout-crlf",
        ),
        pytest.param(
            b"TOUCH\n",
            ConnState.SUBSCRIBED,
            "E_INVALID TOUCH insufficient number of params",
            id="touch-params",
        ),
        pytest.param(
            b"FIN " + ID + b"x\n",
            ConnState.SUBSCRIBED,
            "E_INVALID invalid message ID",
            id="fin-17-bytes",
        ),
        pytest.param(
            b"TOUCH " + ID + b"x\n",
            ConnState.SUBSCRIBED,
            "E_INVALID invalid message ID",
            id="touch-17-bytes",
        ),
        pytest.param(
            b"REQ " + ID + b" abc\n",
            ConnState.SUBSCRIBED,
            "E_INVALID REQ could not parse timeout abc",
            id="req-parse",
        ),
        pytest.param(
            b"REQ " + ID + b" -5\n",
            ConnState.SUBSCRIBED,
            "E_INVALID REQ could not parse timeout -5",
            id="req-neg",
        ),
        pytest.param(b"CLS\n", ConnState.INIT, "E_INVALID cannot CLS in current state", id="cls"),
        pytest.param(
            b"CLS\n", ConnState.CLOSING, "E_INVALID cannot CLS in current state", id="cls-twice"
        ),
        pytest.param(
            b"SUB t c\n",
            ConnState.SUBSCRIBED,
            "E_INVALID cannot SUB in current state",
            id="sub-twice",
        ),
        pytest.param(
            b"IDENTIFY\n",
            ConnState.SUBSCRIBED,
            "E_INVALID cannot IDENTIFY in current state",
            id="identify-state",
        ),
        pytest.param(
            b"IDENTIFY\n" + size(0),
            ConnState.INIT,
            "E_BAD_BODY IDENTIFY invalid body size 0",
            id="identify-0",
        ),
        pytest.param(
            b"IDENTIFY\n" + size(-1),
            ConnState.INIT,
            "E_BAD_BODY IDENTIFY invalid body size -1",
            id="identify-neg",
        ),
        pytest.param(
            b"IDENTIFY\n" + size(5_242_881),
            ConnState.INIT,
            "E_BAD_BODY IDENTIFY body too big 5242881 > 5242880",
            id="identify-big",
        ),
        pytest.param(
            b"AUTH x\n",
            ConnState.INIT,
            "E_INVALID AUTH invalid number of parameters",
            id="auth-params",
        ),
        pytest.param(
            b"AUTH\n",
            ConnState.SUBSCRIBED,
            "E_INVALID cannot AUTH in current state",
            id="auth-state",
        ),
        pytest.param(
            b"AUTH\n" + size(0), ConnState.INIT, "E_BAD_BODY AUTH invalid body size 0", id="auth-0"
        ),
        # youzan extensions. nsqd 1.3 ignores a 4th SUB / 3rd PUB parameter; pnsq reads it as
        # the partition, as youzan nsqd does
        pytest.param(
            b"SUB t c extra\n",
            ConnState.INIT,
            'E_BAD_PARTITION topic partition is not valid: strconv.Atoi: parsing "extra": '
            "invalid syntax",
            id="sub-partition",
        ),
        pytest.param(
            b"PUB t x\n",
            ConnState.INIT,
            'E_BAD_PARTITION topic partition is not valid: strconv.Atoi: parsing "x": '
            "invalid syntax",
            id="partition",
        ),
        # youzan's texts (nsqdserver/protocol_v2.go internalPubExtAndTrace, readMPUBEXT)
        pytest.param(
            b"PUB_TRACE t\n" + size(8) + bytes(8),
            ConnState.INIT,
            "E_BAD_BODY invalid body size 8 with trace id enabled",
            id="pub-trace-8",
        ),
        pytest.param(
            b"PUB_EXT t\n" + size(2) + b"\x00\x00",
            ConnState.INIT,
            "E_BAD_BODY invalid body size 2 with ext json header enabled",
            id="pub-ext-2",
        ),
        pytest.param(
            b"PUB_EXT t\n" + size(3) + b"\x00\x01x",
            ConnState.INIT,
            "E_BAD_BODY invalid body size 3 in ext json header content length",
            id="pub-ext-no-body",
        ),
        pytest.param(
            b"MPUB_TRACE t\n" + size(4 + 4 + 9 + 4 + 8) + encode_mpub_body([bytes(9), bytes(8)]),
            ConnState.INIT,
            "E_BAD_MESSAGE MPUB invalid message(1) body size 8 for tracing",
            id="mpub-trace-8",
        ),
        pytest.param(
            b"MPUB_EXT t\n" + size(4 + 4 + 2) + encode_mpub_body([b"\x00\x00"]),
            ConnState.INIT,
            "E_BAD_BODY invalid body size 2 in ext json header content length",
            id="mpub-ext-no-body",
        ),
        pytest.param(
            b"SUB_ADVANCED t c 0 time:1\n",
            ConnState.INIT,
            "E_INVALID invalid consume offset:time:1",
            id="sub-advanced-type",
        ),
        pytest.param(
            b"SUB_ADVANCED t c 0 msgcount:x\n",
            ConnState.INIT,
            'E_INVALID strconv.ParseInt: parsing "x": invalid syntax',
            id="sub-advanced-value",
        ),
        pytest.param(
            b"SUB_ADVANCED t c 0 special:1:2\n",
            ConnState.SUBSCRIBED,  # youzan reads the consume start before the state
            "E_INVALID invalid consume offset:special:1:2",
            id="sub-advanced-before-state",
        ),
    ],
)
def test_error_texts(data: bytes, state: ConnState, text: str) -> None:
    exc = error_of(data, state)
    assert exc.text == text
    assert exc.fatal


def test_rdy_limit_is_configurable() -> None:
    exc = error_of(b"RDY 51\n", ConnState.SUBSCRIBED, ParserLimits(max_rdy_count=50))
    assert exc.text == "E_INVALID RDY count 51 out of range 0-50"
    parser = parser_in(ConnState.SUBSCRIBED, ParserLimits(max_rdy_count=50))
    parser.receive_data(b"RDY 50\n")
    assert drain(parser) == [Rdy(50)]


def test_max_msg_and_body_sizes_are_configurable() -> None:
    limits = ParserLimits(max_msg_size=100, max_body_size=1000)
    init = ConnState.INIT
    assert error_of(b"PUB t\n" + size(101), init, limits).text == (
        "E_BAD_MESSAGE PUB message too big 101 > 100"
    )
    assert error_of(b"MPUB t\n" + size(1001), init, limits).text == (
        "E_BAD_BODY MPUB body too big 1001 > 1000"
    )
    # (1000 - 4) // 5 = 199 messages at most
    assert error_of(b"MPUB t\n" + size(4) + size(200), init, limits).text == (
        "E_BAD_BODY MPUB invalid message count 200"
    )


def test_heartbeats_disabled_refuses_sub() -> None:
    parser = parser_in()
    parser.heartbeats_disabled = True
    parser.receive_data(b"SUB t c\n")
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert info.value.text == "E_INVALID cannot SUB with heartbeats disabled"


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"PUB t\n", "E_INVALID cannot PUB in current state (TLS required)"),
        (b"FIN ", "E_INVALID cannot FIN in current state (TLS required)"),
        (b"TOUCH ", "E_INVALID cannot TOUCH in current state (TLS required)"),
        (b"BOGUS\n", "E_INVALID cannot BOGUS in current state (TLS required)"),
    ],
)
def test_tls_required(data: bytes, text: str) -> None:
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.tls_required = True
    parser.receive_data(data)
    with pytest.raises(ClientError) as info:
        parser.next_event()
    assert info.value.text == text


def test_identify_is_allowed_when_tls_required() -> None:
    parser = parser_in()
    parser.tls_required = True
    parser.receive_data(b"IDENTIFY\n" + size(2) + b"{}")
    assert len(drain(parser)) == 1


def test_pipelined_commands_and_errors_keep_order() -> None:
    parser = parser_in()
    parser.receive_data(b"PUB t\n" + size(1) + b"a" + b"NOP\nBAD\nNOP\n")
    assert parser.next_event() == Pub("t", b"a")
    assert parser.next_event() == Nop()
    with pytest.raises(ClientError):
        parser.next_event()
    with pytest.raises(ClientError):  # fatal: sticky, the NOP after it is never parsed
        parser.next_event()


# --------------------------------------------------------------------------- fixed offsets


@pytest.mark.parametrize("name", [b"FIN ", b"TOUCH "])
def test_fixed_offset_waits_for_sixteen_id_bytes(name: bytes) -> None:
    """A short id followed by '\\n' is not an error yet: '\\n' may be an id byte (youzan)."""
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(name + b"abc\n")
    assert parser.next_event() is NEED_DATA
    rest = b"0123456789AB\n"
    parser.receive_data(rest)
    cmd = Fin(b"abc\n0123456789AB") if name == b"FIN " else Touch(b"abc\n0123456789AB")
    assert drain(parser) == [cmd]


def test_req_with_binary_id_and_spaces() -> None:
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(b"REQ " + b" " * 16 + b" 1000\n" + b"REQ " + b"\n" * 16 + b" 0\n")
    assert drain(parser) == [Req(b" " * 16, 1000), Req(b"\n" * 16, 0)]


def test_encode_refuses_advanced_start_without_partition() -> None:
    with pytest.raises(ValueError):
        encode_command(Sub("t", "c", None, SubMode.ADVANCED, "special:-1"))


@pytest.mark.parametrize(
    "command",
    [
        Mpub("t", [b"a", b" ", b"\n"], 3),
        MpubTrace("t", [(1, b"a"), (2**64 - 1, b"\n")]),
        PubTrace("t", 42, b"body"),
        PubExt("t", b'{"k":"v"}', b"x"),
    ],
    ids=["mpub", "mpub-trace", "pub-trace", "pub-ext"],
)
def test_golden_round_trips(command: Command) -> None:
    parser = parser_in()
    parser.receive_data(encode_command(command))
    assert drain(parser) == [command]


# --------------------------------------------------------------------------- line limit


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
def test_line_limit_matches_nsqd_bufio(chunked: bool) -> None:
    """nsqd reads lines through a 16 KiB bufio.Reader: a longer line closes silently."""
    limit = ParserLimits().max_line
    fits = b"X" * (limit - 1) + b"\n"  # 16384 bytes with the '\n': still one ReadSlice
    too_long = b"X" * limit + b"\n"

    def run(data: bytes) -> BaseException:
        parser = parser_in()
        pieces = [data[i : i + 1000] for i in range(0, len(data), 1000)] if chunked else [data]
        for piece in pieces:
            parser.receive_data(piece)
            try:
                assert parser.next_event() is NEED_DATA
            except (ClientError, ConnectionAbort) as exc:
                return exc
        raise AssertionError("no outcome")

    fit = run(fits)
    assert isinstance(fit, ClientError)
    assert fit.text == "E_INVALID invalid command " + "X" * (limit - 1)
    assert isinstance(run(too_long), ConnectionAbort)
    req = b"REQ " + ID + b" " + b"1" * limit + b"\n"
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(req)
    with pytest.raises(ConnectionAbort):
        parser.next_event()


# --------------------------------------------------------------------------- names and Go strings


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("." * 64, True),
        ("a" * 65, False),
        ("a" * 54 + "#ephemeral", True),
        ("a" * 55 + "#ephemeral", False),  # the suffix counts towards 64
        ("#ephemeral", False),
        ("a#ephemeral#ephemeral", False),
        ("a#eph", False),
        ("", False),
        ("a b", False),
        ("abc\n", False),  # Go's $ never matches before a trailing newline
        ("é", False),
        ("UPPER_lower-0.9", True),
    ],
)
def test_names(name: str, valid: bool) -> None:
    assert is_valid_name(name) is valid


def test_ephemeral() -> None:
    assert is_ephemeral("t#ephemeral")
    assert not is_ephemeral("t")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"", 0),
        (b"0", 0),
        (b"0042", 42),
        (b"12345678901234", 12345678901234),
        (b"-1", None),
        (b"+1", None),
        (b" 1", None),
        (b"1.0", None),
        ("\u0661".encode(), None),
    ],
)
def test_parse_base10(raw: bytes, value: int | None) -> None:
    assert parse_base10(raw) == value


def test_parse_base10_wraps_like_go_uint64() -> None:
    assert parse_base10(b"18446744073709551615") == 2**64 - 1
    assert parse_base10(b"18446744073709551616") == 0
    assert parse_base10(b"18446744073709551666") == 50


@pytest.mark.parametrize(
    ("data", "state", "outcome"),
    [
        # checked on the real nsqd 1.3.0 (--max-rdy-count=50 for the RDY rows)
        pytest.param(
            b"RDY 18446744073709551615\n",
            ConnState.SUBSCRIBED,
            "E_INVALID RDY count -1 out of range 0-50",
            id="rdy-uint64-max-is-minus-1",
        ),
        pytest.param(
            b"RDY 9223372036854775808\n",
            ConnState.SUBSCRIBED,
            "E_INVALID RDY count -9223372036854775808 out of range 0-50",
            id="rdy-int64-min",
        ),
        pytest.param(b"RDY 18446744073709551616\n", ConnState.SUBSCRIBED, Rdy(0), id="rdy-wraps-0"),
        pytest.param(
            b"RDY 18446744073709551666\n", ConnState.SUBSCRIBED, Rdy(50), id="rdy-wraps-50"
        ),
        pytest.param(
            b"DPUB t 18446744073709551615\n",
            ConnState.INIT,
            "E_INVALID DPUB timeout 18446744073709551615 out of range 0-3600000",
            id="dpub-uint64-max",
        ),
        pytest.param(
            b"DPUB t 9223372036855\n",  # * 1e6 ns overflows int64: negative
            ConnState.INIT,
            "E_INVALID DPUB timeout 9223372036855 out of range 0-3600000",
            id="dpub-duration-overflow",
        ),
        pytest.param(
            b"DPUB t 18446744073709\n",
            ConnState.INIT,
            "E_INVALID DPUB timeout 18446744073709 out of range 0-3600000",
            id="dpub-duration-wraps-negative",
        ),
        pytest.param(
            b"DPUB t 18446744073710\n" + size(1) + b"x",  # wraps to 448384 ns: accepted
            ConnState.INIT,
            Dpub("t", 0, b"x"),
            id="dpub-duration-wraps-into-range",
        ),
        pytest.param(
            b"DPUB t 18446744073709551616\n" + size(1) + b"x",
            ConnState.INIT,
            Dpub("t", 0, b"x"),
            id="dpub-wraps-0",
        ),
        pytest.param(
            b"REQ " + ID + b" 18446744073709\n",
            ConnState.SUBSCRIBED,
            Req(ID, -1),  # a negative duration: the broker clamps it to 0, as nsqd does
            id="req-duration-wraps-negative",
        ),
    ],
)
def test_go_integer_overflow(data: bytes, state: ConnState, outcome: str | Command) -> None:
    limits = ParserLimits(max_rdy_count=50)
    if isinstance(outcome, str):
        assert error_of(data, state, limits).text == outcome
    else:
        parser = parser_in(state, limits)
        parser.receive_data(data)
        assert drain(parser) == [outcome]


# Each expectation is Go 1.26's fmt.Sprintf("%q", string(raw)).
_GO_QUOTES = [
    (b"bad!topic", '"bad!topic"'),
    (b"", '""'),
    (b"a\tb\xff", '"a\\tb\\xff"'),
    (b"caf\xc3\xa9", '"café"'),
    (b"\xe2\x80\x8b", '"\\u200b"'),  # zero width space (Cf)
    (b"\xc2\xa0", '"\\u00a0"'),  # no-break space (Zs)
    (b"\xe3\x80\x80", '"\\u3000"'),
    (b"\xf0\x9f\x98\x80", '"😀"'),
    (b"\xf3\xa0\x80\x81", '"\\U000e0001"'),
    (b"\x7f", '"\\x7f"'),
    (b"\x00\x1b", '"\\x00\\x1b"'),
    (b"\xc2\x85", '"\\u0085"'),
    (b'"\\', '"\\"\\\\"'),
    (b"'", '"\'"'),
    (b"\x07\x08\x0c\x0b\r\n\t", '"\\a\\b\\f\\v\\r\\n\\t"'),
    (b"\xed\xa0\x80", '"\\xed\\xa0\\x80"'),  # an encoded surrogate is invalid UTF-8
    (b"\xe2\x82A", '"\\xe2\\x82A"'),  # truncated sequence
    (b"\xc0\x80", '"\\xc0\\x80"'),  # overlong
    (b"\xf4\x90\x80\x80", '"\\xf4\\x90\\x80\\x80"'),  # above U+10FFFF
    (b"\xef\xbf\xbd", '"\ufffd"'),  # a real U+FFFD is printable
    (b"\xef\xbb\xbf", '"\\ufeff"'),
    (b"\xee\x80\x80", '"\\ue000"'),  # private use
    (b"\xe2\x80\xa8", '"\\u2028"'),
    (b"\xcd\xb8", '"\\u0378"'),  # unassigned
    (b"\xe0\xa4\x95\xe0\xa5\x8d", '"क्"'),
]


@pytest.mark.parametrize(("raw", "quoted"), _GO_QUOTES, ids=[repr(r) for r, _ in _GO_QUOTES])
def test_go_quote(raw: bytes, quoted: str) -> None:
    assert go_quote(raw) == quoted


@pytest.mark.xfail(
    unicodedata.unidata_version < "15",
    reason="U+1F6DC is new in Unicode 15 (Go 1.21+); Python 3.11's tables are Unicode 14",
    strict=True,
)
def test_go_quote_unicode_15() -> None:
    assert go_quote("\U0001f6dc".encode()) == '"\U0001f6dc"'


def test_go_bytes_is_raw() -> None:
    assert go_bytes(b"a\xff\n").encode("utf-8", "surrogateescape") == b"a\xff\n"


def test_a_run_of_fins_is_taken_at_once_and_anything_else_is_left_to_next_event() -> None:
    ids = [bytes([i]) * 8 + b" \n\r FIN\n" for i in range(3)]  # spaces and newlines in ids
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(
        b"".join(b"FIN " + i + b"\n" for i in ids) + b"FIN " + ids[0] + b"\r\nNOP\n"
    )
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == ids
    assert run.internal_ids() == [int.from_bytes(i[:8], "big") for i in ids]
    assert parser.fin_run() is None  # "\r\n": the general reader's
    assert drain(parser) == [Fin(ids[0]), Nop()]
    parser.receive_data(b"FIN " + ids[1][:10])  # incomplete: nothing yet
    assert parser.fin_run() is None
    parser.receive_data(ids[1][10:] + b"\n")
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == [ids[1]]
    assert len(run) == 1


def test_a_fin_run_stops_at_the_first_other_command_and_keeps_a_partial_fin() -> None:
    ids = [i.to_bytes(8, "big") + b"FIN \nFIN" for i in range(1, 5)]
    parser = parser_in(ConnState.SUBSCRIBED)
    parser.receive_data(
        b"FIN " + ids[0] + b"\nFIN " + ids[1] + b"\nRDY 5\nFIN " + ids[2] + b"\nFIN " + ids[3][:7]
    )
    run = parser.fin_run()
    assert run is not None
    assert run.internal_ids() == [1, 2]
    assert parser.fin_run() is None
    assert parser.next_event() == Rdy(5)
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == [ids[2]]
    assert parser.fin_run() is None  # the fourth is not complete yet
    parser.receive_data(ids[3][7:] + b"\n")
    run = parser.fin_run()
    assert run is not None
    assert run.message_ids() == [ids[3]]


@given(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=40), st.data())
def test_a_fin_run_reads_what_one_fin_at_a_time_reads(
    ids: list[bytes], data: st.DataObject
) -> None:
    """Any split of a stream of FINs (ids full of spaces, newlines and "FIN ") gives the same
    ids, in order, as the general reader."""
    stream = b"".join(b"FIN " + i + b"\n" for i in ids)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    parser = parser_in(ConnState.SUBSCRIBED)
    seen: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        parser.receive_data(stream[start:end])
        while (run := parser.fin_run()) is not None:
            seen.extend(run.message_ids())
    assert seen == ids


def test_a_fin_run_needs_the_subscribed_state() -> None:
    parser = parser_in(ConnState.INIT)
    parser.receive_data(b"FIN " + b"a" * 16 + b"\n")
    assert parser.fin_run() is None
    with pytest.raises(ClientError) as raised:
        parser.next_event()
    assert raised.value.text == "E_INVALID cannot FIN in current state"
