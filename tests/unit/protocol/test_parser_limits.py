"""CommandParser's limits and connection flags: configurable sizes and RDY count, heartbeats
disabled, TLS required, nsqd's 16 KiB line limit, and integers that overflow as Go's do."""

from __future__ import annotations

import pytest

from protocol import (
    NEED_DATA,
    ClientError,
    Command,
    ConnectionAbort,
    ConnState,
    Dpub,
    ParserLimits,
    Rdy,
    Req,
)
from tests.unit.protocol.parser_support import ID, drain, error_of, parser_in, size

# --------------------------------------------------------------------------- limits and flags


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


# --------------------------------------------------------------------------- Go integer overflow


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
