"""CommandParser reads what encode_command writes: every command type, the SUB forms, line details
(CRLF, defaults, extra parameters) and message ids read at fixed offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import (
    NEED_DATA,
    ClientError,
    Command,
    ConnState,
    Fin,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
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
from tests import strategies as S
from tests.unit.protocol.parser_support import BIN_ID, ID, PROPS, drain, parser_in, size

# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    ("strategy", "state"),
    [pytest.param(strategy, state, id=name) for name, strategy, state in S.COMMANDS],
)
@PROPS
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


@PROPS
@given(
    partition=st.integers(0, 2**20),
    sequence=st.integers(0, 2**63 - 1),
    zeros=st.integers(0, 3),
    tail=st.sampled_from([b"", b"\r"]),
)
def test_a_numbered_pub_reads_the_same_in_one_step_as_on_the_general_path(
    partition: int, sequence: int, zeros: int, tail: bytes
) -> None:
    """The first PUB of a topic is read on the general path (its name not yet seen valid), the
    second in one step (``_plain_pub``): both give the same command."""
    from protocol import _parser_base

    _parser_base._VALID_NAMES.clear()
    numbers = b"0" * zeros + b"%d %s%d" % (partition, b"0" * zeros, sequence)
    line = b"PUB numbered_t " + numbers + tail + b"\n" + size(2) + b"hi"
    parser = parser_in(ConnState.INIT)
    parser.receive_data(line * 2)
    expected = Pub("numbered_t", b"hi", partition, sequence)
    assert drain(parser) == [expected, expected]


_NUMBERED_PUB = st.tuples(
    st.sampled_from(["n_a", "n_b"]),  # topic
    st.integers(0, 3),  # partition
    st.integers(0, 10**19),  # sequence: beyond the fast path's 18 digits too
    st.integers(0, 2),  # leading zeros of the sequence
    st.sampled_from([b"", b"\r"]),
    st.booleans(),  # numbered (else a plain PUB of the topic)
)


@PROPS
@given(pubs=st.lists(_NUMBERED_PUB, min_size=1, max_size=12), cut=st.integers(1, 40))
def test_a_run_of_pubs_reads_as_each_would_alone(
    pubs: list[tuple[str, int, int, int, bytes, bool]], cut: int
) -> None:
    """A producer's numbered PUBs after the first are read by their ``PUB <topic> <partition> ``
    prefix: a stream of them, other targets and plain PUBs between, in pieces of any size,
    reads as each PUB does alone on a new parser (results and errors alike)."""
    wires = []
    for topic, partition, sequence, zeros, tail, is_numbered in pubs:
        numbers = b" %d %s%d" % (partition, b"0" * zeros, sequence) if is_numbered else b""
        wires.append(b"PUB " + topic.encode() + numbers + tail + b"\n" + size(2) + b"hi")
    alone: list[object] = []
    for wire in wires:
        single = parser_in(ConnState.INIT)
        single.receive_data(wire)
        try:
            alone.append(single.next_event())
        except ClientError as exc:
            alone.append(exc.text)
            break
    parser = parser_in(ConnState.INIT)
    stream = b"".join(wires)
    read: list[object] = []
    try:
        for at in range(0, len(stream), cut):
            parser.receive_data(stream[at : at + cut])
            while (event := parser.next_event()) is not NEED_DATA:
                read.append(event)
    except ClientError as exc:
        read.append(exc.text)
    assert read == alone


def test_pending_line_names_a_command_waiting_for_its_body() -> None:
    parser = parser_in()
    parser.receive_data(b"NO")  # a line not whole yet
    assert parser.next_event() is NEED_DATA
    assert parser.pending_line() == []
    parser = parser_in()
    parser.receive_data(b"MPUB events 3\r\n" + (5_000_000).to_bytes(4, "big") + b"xyz")
    assert parser.next_event() is NEED_DATA
    assert parser.pending_line() == [b"MPUB", b"events", b"3"]
