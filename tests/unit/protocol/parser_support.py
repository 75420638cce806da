"""What the CommandParser tests (``test_protocol_parser_*.py``) share: ids, builders, settings."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, settings

from protocol import NEED_DATA, ClientError, Command, CommandParser, ConnState, ParserLimits

ID = b"0123456789abcdef"
BIN_ID = b" \n\r\x00\xff FIN \n\n\r\n \xfe"  # 16 bytes a line parser would mis-split
assert len(BIN_ID) == 16

#: Hypothesis settings of the property tests.
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
