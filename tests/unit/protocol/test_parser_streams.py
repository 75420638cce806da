"""CommandParser over streams: any split of a stream gives the same commands (or the same first
error, which sticks), a partial command waits, pipelined commands keep their order."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol import (
    NEED_DATA,
    ClientError,
    Command,
    CommandParser,
    ConnectionAbort,
    ConnState,
    Nop,
    ParserLimits,
    Pub,
)
from protocol.encode import encode_command
from tests import strategies as S
from tests.unit.protocol.parser_support import PROPS, drain, parser_in, size

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


def _feed_in_step(chunks: list[bytes], ends: list[tuple[int, Command]]) -> CommandParser:
    """Feed ``chunks`` one by one: after each, exactly the commands whose last byte was fed
    have come out (NEED_DATA only while one is incomplete); at the end, all of them."""
    parser = CommandParser()
    seen: list[Command] = []
    fed = 0
    for chunk in chunks:
        parser.receive_data(chunk)
        fed += len(chunk)
        seen += drain(parser)
        assert seen == [command for end, command in ends if end <= fed]
    assert seen == [command for _, command in ends]
    return parser


@PROPS
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

    parser = _feed_in_step(data.draw(S.splits(raw)), ends)
    assert parser.state is final_state


@settings(max_examples=60, deadline=None)
@given(stream=S.command_streams(max_size=6))
def test_stream_byte_by_byte(stream: tuple[list[Command], ConnState]) -> None:
    commands, _ = stream
    raw, ends = _encoded(commands)
    _feed_in_step([raw[i : i + 1] for i in range(len(raw))], ends)


@PROPS
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
    chunks: list[bytes],
    state: ConnState,
    heartbeats_disabled: bool,
    tls_required: bool,
    parser: CommandParser | None = None,
) -> list[object]:
    """Events, then the first error (as a tuple); checks that fatal errors stick."""
    parser = parser or parser_in(state)
    parser.state = state
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


class _GeneralPathOnly(CommandParser):
    """The parser without its one-step read of a plain PUB: what that step must match."""

    def _plain_pub(self, pos: int) -> Pub | None:
        return None


_PUB_LINES = st.sampled_from(
    [b"t", b"t2", b"t", b"t2", b"t 0", b"t 1 x", b"t\r", b"", b"bad!", b"t" * 65, b"t\x00", b" t"]
)


@_FUZZ
@given(
    data=st.data(),
    line=_PUB_LINES,
    declared=st.sampled_from([-1, 0, 1, 2, 15, 16, 17, 20]),
    after=st.sampled_from([b"", b"NOP\n", b"PUB t\n" + size(1) + b"x", b"FIN 0123456789abcdef\n"]),
    tls=st.booleans(),
)
def test_plain_pub_reads_as_the_general_path(
    data: st.DataObject, line: bytes, declared: int, after: bytes, tls: bool
) -> None:
    """Whatever follows ``PUB `` (a known topic or not, a partition, CR, a size out of range
    (the message limit is 16, the body limit 32), a body cut short), parsing with the one-step
    read gives the same events and errors as without it, however the stream is split."""
    limits = ParserLimits(max_msg_size=16, max_body_size=32)
    body = data.draw(st.binary(max_size=max(declared, 0) + 2))
    raw = b"PUB " + line + b"\n" + size(declared) + body + after
    chunks = data.draw(S.splits(raw))
    expected = _outcomes(chunks, ConnState.INIT, False, tls, _GeneralPathOnly(limits))
    assert _outcomes(chunks, ConnState.INIT, False, tls, CommandParser(limits)) == expected


# --------------------------------------------------------------------------- pipelining


def test_pipelined_commands_and_errors_keep_order() -> None:
    parser = parser_in()
    parser.receive_data(b"PUB t\n" + size(1) + b"a" + b"NOP\nBAD\nNOP\n")
    assert parser.next_event() == Pub("t", b"a")
    assert parser.next_event() == Nop()
    with pytest.raises(ClientError):
        parser.next_event()
    with pytest.raises(ClientError):  # fatal: sticky, the NOP after it is never parsed
        parser.next_event()
