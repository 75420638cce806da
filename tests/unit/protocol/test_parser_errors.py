"""CommandParser's error texts: nsqd 1.3.0's (``nsqd/protocol_v2.go``) and, for the partitioned
extensions, youzan nsqd's. The ones that reach the wire are also checked against the real Go
nsqd in ``tests/integration/test_error_table.py``."""

from __future__ import annotations

import pytest

from protocol import ConnState
from protocol.encode import encode_mpub_body
from tests.unit.protocol.parser_support import ID, error_of, size


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
        pytest.param(
            b"PUB t 0 x\n" + size(1) + b"a",
            ConnState.INIT,
            "E_INVALID PUB sequence is not valid: x",
            id="pnsq-sequence-not-a-number",
        ),
        pytest.param(
            b"MPUB t 0 -3\n",
            ConnState.INIT,
            "E_INVALID MPUB sequence is not valid: -3",
            id="pnsq-sequence-negative",
        ),
        pytest.param(
            b"PUB_TRACE t -1 4\n",
            ConnState.INIT,
            "E_INVALID PUB_TRACE a numbered publish names its partition",
            id="pnsq-sequence-without-partition",
        ),
    ],
)
def test_error_texts(data: bytes, state: ConnState, text: str) -> None:
    exc = error_of(data, state)
    assert exc.text == text
    assert exc.fatal
