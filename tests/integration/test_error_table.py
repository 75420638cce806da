"""Protocol V2 errors over real TCP: one table, run against the Go nsqd 1.3.0 and against pnsq.

Each case is the raw bytes a client sends after the magic (optionally after setup commands whose
replies are checked), the exact error frame expected, and whether the server then closes the
connection (fatal) or keeps it open (proved with NOP + PUB → OK). Running the same table against
the real nsqd proves every expectation is what nsqd really does.

Both daemons run once per module with small limits (``--max-msg-size=100``,
``--max-body-size=1000``, ``--max-rdy-count=50``), so the conftest's per-test ``nsqd`` /
``real_nsqd`` fixtures (default flags) are not used here. Where pnsq differs from nsqd by
design (youzan fixed-offset FIN/REQ/TOUCH parsing, partition parameters) the case is left out of
the table and covered by the tests at the end of this file.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.daemons import Daemon, go_nsqd, pnsq_nsqd

pytestmark = pytest.mark.integration

FLAGS = ("--max-msg-size=100", "--max-body-size=1000", "--max-rdy-count=50")
TIMEOUT = 5.0
MAGIC = b"  V2"
RESPONSE, ERROR = 0, 1

TOPIC = b"errtable"
SUB = b"SUB errtable ch\n"
ID = b"0123456789abcdef"
BIN_ID = b"\x00\x01\x7f\x80\xfe\xff\tid\x0b\x0c-byte"  # no ' ', '\n' or '\r': nsqd can read it
assert len(BIN_ID) == 16


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def ident(body: dict[str, object] | bytes) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return b"IDENTIFY\n" + size(len(raw)) + raw


def mpub(count: int, *elements: bytes) -> bytes:
    body = size(count) + b"".join(elements)
    return b"MPUB errtable\n" + size(len(body)) + body


# --------------------------------------------------------------------------- the daemons


def _start(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Daemon:
    make = go_nsqd if kind == "nsqd-1.3.0" else pnsq_nsqd
    data: Path = tmp_path_factory.mktemp(kind) / "data"
    return make(data, *FLAGS).start()


@pytest.fixture(scope="module")
def go_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = _start("nsqd-1.3.0", tmp_path_factory)
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def pnsq_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = _start("pnsq", tmp_path_factory)
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module", params=["nsqd-1.3.0", "pnsq"])
def daemon(request: pytest.FixtureRequest) -> Daemon:
    name = "go_daemon" if request.param == "nsqd-1.3.0" else "pnsq_daemon"
    result: Daemon = request.getfixturevalue(name)
    return result


# --------------------------------------------------------------------------- a blocking client


class Conn:
    """A plain blocking socket speaking just enough protocol V2."""

    def __init__(self, daemon: Daemon, magic: bytes = MAGIC) -> None:
        self.sock = socket.create_connection(("127.0.0.1", daemon.tcp_port), timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(magic)

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError(f"connection closed after {out!r}")
            out += chunk
        return out

    def read_frame(self) -> tuple[int, bytes]:
        """(frame type, data) of the next frame; EOFError if the server closed."""
        frame_size, frame_type = struct.unpack(">Ii", self._exact(8))
        return frame_type, self._exact(frame_size - 4)

    def assert_closed(self) -> None:
        """The server closes without sending anything more."""
        try:
            rest = self.sock.recv(65536)
        except ConnectionResetError:
            rest = b""
        assert rest == b"", f"expected close, got {rest!r}"

    def assert_open(self) -> None:
        """Still serving: NOP gets no reply, and a PUB right after it gets OK."""
        self.send(b"NOP\nPUB errtable_alive\n" + size(5) + b"alive")
        assert self.read_frame() == (RESPONSE, b"OK")

    def assert_silent(self, seconds: float) -> None:
        """No frame and no close for ``seconds``."""
        self.sock.settimeout(seconds)
        try:
            with pytest.raises(TimeoutError):
                self.sock.recv(1)
        finally:
            self.sock.settimeout(TIMEOUT)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Case:
    send: tuple[bytes, ...]  # chunks, sent one by one
    error: bytes  # the exact error frame data
    fatal: bool = True
    setup: tuple[tuple[bytes, bytes], ...] = ()  # (command, its response frame data)
    replies: tuple[bytes, ...] = ()  # response frames expected before the error
    magic: bytes = MAGIC


def case(
    name: str,
    *send: bytes,
    error: bytes,
    fatal: bool = True,
    setup: tuple[tuple[bytes, bytes], ...] = (),
    replies: tuple[bytes, ...] = (),
    magic: bytes = MAGIC,
) -> object:
    return pytest.param(Case(send, error, fatal, setup, replies, magic), id=name)


SUBSCRIBED = ((SUB, b"OK"),)
CLOSING = ((SUB, b"OK"), (b"CLS\n", b"CLOSE_WAIT"))
#: subscribed to a topic nobody publishes to: a RDY above 0 delivers nothing (errtable's channel
#: holds the messages other cases published, and Go nsqd may send one between two RDYs)
SUBSCRIBED_QUIET = ((b"SUB errtable_quiet ch\n", b"OK"),)
NO_HEARTBEATS = ((ident({"heartbeat_interval": -1}), b"OK"),)
DECODE = b"E_BAD_BODY IDENTIFY failed to decode JSON body"

CASES = [
    # ---- framing and unknown commands
    case("bad-magic", magic=b"  V1", error=b"E_BAD_PROTOCOL"),
    case("http-on-tcp-port", magic=b"GET ", error=b"E_BAD_PROTOCOL"),
    case("unknown", b"FOO bar\n", error=b"E_INVALID invalid command FOO"),
    case("unknown-crlf", b"FOO\r\n", error=b"E_INVALID invalid command FOO"),
    case("lowercase", b"pub errtable\n", error=b"E_INVALID invalid command pub"),
    case("empty-line", b"\n", error=b"E_INVALID invalid command "),
    case("leading-space", b" NOP\n", error=b"E_INVALID invalid command "),
    case("raw-bytes", b"\xff\x00X\n", error=b"E_INVALID invalid command \xff\x00X"),
    case(
        "pipelined",
        b"PUB errtable\n" + size(1) + b"x" + b"NOP\nBOGUS\n",
        replies=(b"OK",),
        error=b"E_INVALID invalid command BOGUS",
    ),
    case(
        "pub-then-bad-command",  # the PUB is published and acknowledged before the error
        b"PUB errtable\n" + size(1) + b"x" + b"BOGUS\n",
        replies=(b"OK",),
        error=b"E_INVALID invalid command BOGUS",
    ),
    case(
        "pubs-then-bad-state",
        b"PUB errtable\n" + size(1) + b"x" + b"PUB errtable\n" + size(2) + b"yz" + b"RDY 1\n",
        replies=(b"OK", b"OK"),
        error=b"E_INVALID cannot RDY in current state",
    ),
    case(
        "split-chunks",
        b"PU",
        b"B errtable\n",
        size(1)[:2],
        size(1)[2:] + b"x",
        b"BO",
        b"GUS\n",
        replies=(b"OK",),
        error=b"E_INVALID invalid command BOGUS",
    ),
    # ---- insufficient parameters
    case("pub-params", b"PUB\n", error=b"E_INVALID PUB insufficient number of parameters"),
    case("mpub-params", b"MPUB\n", error=b"E_INVALID MPUB insufficient number of parameters"),
    case(
        "dpub-params", b"DPUB errtable\n", error=b"E_INVALID DPUB insufficient number of parameters"
    ),
    case("sub-params", b"SUB errtable\n", error=b"E_INVALID SUB insufficient number of parameters"),
    # ---- names
    case("pub-topic", b"PUB b@d\n", error=b'E_BAD_TOPIC PUB topic name "b@d" is not valid'),
    case("pub-empty-topic", b"PUB \n", error=b'E_BAD_TOPIC PUB topic name "" is not valid'),
    case(
        "pub-topic-65",
        b"PUB " + b"t" * 65 + b"\n",
        error=b'E_BAD_TOPIC PUB topic name "' + b"t" * 65 + b'" is not valid',
    ),
    case(
        "pub-topic-go-quoted",
        b"PUB a\tb\xff\x7f\n",
        error=b'E_BAD_TOPIC PUB topic name "a\\tb\\xff\\x7f" is not valid',
    ),
    case(
        "pub-topic-utf8",
        "PUB café\n".encode(),
        error='E_BAD_TOPIC PUB topic name "café" is not valid'.encode(),
    ),
    case(
        "mpub-topic",
        b"MPUB b@d\n",
        error=b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "b@d" is not valid',
    ),
    case("dpub-topic", b"DPUB b@d 10\n", error=b'E_BAD_TOPIC DPUB topic name "b@d" is not valid'),
    case("sub-topic", b"SUB b@d ch\n", error=b'E_BAD_TOPIC SUB topic name "b@d" is not valid'),
    case(
        "sub-double-space",
        b"SUB  errtable ch\n",
        error=b'E_BAD_TOPIC SUB topic name "" is not valid',
    ),
    case(
        "sub-channel",
        b"SUB errtable ch!\n",
        error=b'E_BAD_CHANNEL SUB channel name "ch!" is not valid',
    ),
    case(
        "sub-channel-eph",
        b"SUB errtable ch#eph\n",
        error=b'E_BAD_CHANNEL SUB channel name "ch#eph" is not valid',
    ),
    # ---- PUB / DPUB bodies
    case(
        "pub-size-0",
        b"PUB errtable\n" + size(0),
        error=b"E_BAD_MESSAGE PUB invalid message body size 0",
    ),
    case(
        "pub-size-negative",
        b"PUB errtable\n" + size(-1),
        error=b"E_BAD_MESSAGE PUB invalid message body size -1",
    ),
    case(
        "pub-too-big",
        b"PUB errtable\n" + size(101),
        error=b"E_BAD_MESSAGE PUB message too big 101 > 100",
    ),
    case(
        "dpub-size-0",
        b"DPUB errtable 10\n" + size(0),
        error=b"E_BAD_MESSAGE DPUB invalid message body size 0",
    ),
    case(
        "dpub-too-big",
        b"DPUB errtable 10\n" + size(101),
        error=b"E_BAD_MESSAGE DPUB message too big 101 > 100",
    ),
    case(
        "dpub-timeout-parse",
        b"DPUB errtable abc\n",
        error=b"E_INVALID DPUB could not parse timeout abc",
    ),
    case(
        "dpub-timeout-negative",
        b"DPUB errtable -1\n",
        error=b"E_INVALID DPUB could not parse timeout -1",
    ),
    case(
        "dpub-timeout-range",
        b"DPUB errtable 3600001\n",
        error=b"E_INVALID DPUB timeout 3600001 out of range 0-3600000",
    ),
    # ---- MPUB bodies
    case("mpub-size-0", b"MPUB errtable\n" + size(0), error=b"E_BAD_BODY MPUB invalid body size 0"),
    case(
        "mpub-size-negative",
        b"MPUB errtable\n" + size(-2),
        error=b"E_BAD_BODY MPUB invalid body size -2",
    ),
    case(
        "mpub-too-big",
        b"MPUB errtable\n" + size(1001),
        error=b"E_BAD_BODY MPUB body too big 1001 > 1000",
    ),
    case("mpub-count-0", mpub(0), error=b"E_BAD_BODY MPUB invalid message count 0"),
    case("mpub-count-negative", mpub(-1), error=b"E_BAD_BODY MPUB invalid message count -1"),
    # (1000 - 4) // 5 = 199 messages at most
    case("mpub-count-200", mpub(200), error=b"E_BAD_BODY MPUB invalid message count 200"),
    case(
        "mpub-element-too-big",
        mpub(1, size(101)),
        error=b"E_BAD_MESSAGE MPUB message too big 101 > 100",
    ),
    case(
        "mpub-element-0",
        mpub(1, size(0)),
        error=b"E_BAD_MESSAGE MPUB invalid message(0) body size 0",
    ),
    case(
        "mpub-second-element-0",
        mpub(2, size(1), b"a", size(0)),
        error=b"E_BAD_MESSAGE MPUB invalid message(1) body size 0",
    ),
    case(
        "mpub-element-negative",
        mpub(1, size(-3)),
        error=b"E_BAD_MESSAGE MPUB invalid message(0) body size -3",
    ),
    # ---- RDY
    case("rdy-before-sub", b"RDY 1\n", error=b"E_INVALID cannot RDY in current state"),
    case(
        "rdy-parse",
        b"RDY abc\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID RDY could not parse count abc",
    ),
    case(
        "rdy-negative",
        b"RDY -1\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID RDY could not parse count -1",
    ),
    case(
        "rdy-range",
        b"RDY 51\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID RDY count 51 out of range 0-50",
    ),
    case(
        "rdy-uint64-wraps",
        b"RDY 18446744073709551615\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID RDY count -1 out of range 0-50",
    ),
    case(
        "dpub-duration-overflow",
        b"DPUB errtable 9223372036855\n",
        error=b"E_INVALID DPUB timeout 9223372036855 out of range 0-3600000",
    ),
    # ---- FIN / REQ / TOUCH
    case("fin-before-sub", b"FIN " + ID + b"\n", error=b"E_INVALID cannot FIN in current state"),
    case("req-before-sub", b"REQ " + ID + b" 0\n", error=b"E_INVALID cannot REQ in current state"),
    case(
        "touch-before-sub", b"TOUCH " + ID + b"\n", error=b"E_INVALID cannot TOUCH in current state"
    ),
    case(
        "fin-unknown",
        b"FIN " + ID + b"\n",
        setup=SUBSCRIBED,
        error=b"E_FIN_FAILED FIN " + ID + b" failed ID not in flight",
        fatal=False,
    ),
    case(
        "fin-unknown-binary-id",
        b"FIN " + BIN_ID + b"\n",
        setup=SUBSCRIBED,
        error=b"E_FIN_FAILED FIN " + BIN_ID + b" failed ID not in flight",
        fatal=False,
    ),
    case(
        "fin-unknown-crlf",
        b"FIN " + ID + b"\r\n",
        setup=SUBSCRIBED,
        error=b"E_FIN_FAILED FIN " + ID + b" failed ID not in flight",
        fatal=False,
    ),
    case(
        "fin-unknown-closing",
        b"RDY 5\n",  # ignored after CLS, without a reply
        b"FIN " + ID + b"\n",
        setup=CLOSING,
        error=b"E_FIN_FAILED FIN " + ID + b" failed ID not in flight",
        fatal=False,
    ),
    case(
        "req-unknown",
        b"REQ " + BIN_ID + b" 1000\n",
        setup=SUBSCRIBED,
        error=b"E_REQ_FAILED REQ " + BIN_ID + b" failed ID not in flight",
        fatal=False,
    ),
    case(
        "touch-unknown",
        b"TOUCH " + ID + b"\n",
        setup=SUBSCRIBED,
        error=b"E_TOUCH_FAILED TOUCH " + ID + b" failed ID not in flight",
        fatal=False,
    ),
    case(
        "fin-params",
        b"FIN\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID FIN insufficient number of params",
    ),
    case(
        "req-params",
        b"REQ " + ID + b"\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID REQ insufficient number of params",
    ),
    case(
        "req-params-crlf",
        b"REQ " + ID + b"\r\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID REQ insufficient number of params",
    ),
    case(
        "touch-params",
        b"TOUCH\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID TOUCH insufficient number of params",
    ),
    case(
        "fin-17-byte-id",
        b"FIN " + ID + b"x\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID invalid message ID",
    ),
    case(
        "req-timeout-parse",
        b"REQ " + ID + b" abc\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID REQ could not parse timeout abc",
    ),
    case(
        "req-timeout-negative",
        b"REQ " + ID + b" -5\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID REQ could not parse timeout -5",
    ),
    # ---- CLS, SUB, state
    case("cls-before-sub", b"CLS\n", error=b"E_INVALID cannot CLS in current state"),
    case("cls-twice", b"CLS\n", setup=CLOSING, error=b"E_INVALID cannot CLS in current state"),
    case("sub-twice", SUB, setup=SUBSCRIBED, error=b"E_INVALID cannot SUB in current state"),
    case(
        "sub-heartbeats-disabled",
        SUB,
        setup=NO_HEARTBEATS,
        error=b"E_INVALID cannot SUB with heartbeats disabled",
    ),
    # ---- IDENTIFY
    case(
        "identify-after-sub",
        b"IDENTIFY\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID cannot IDENTIFY in current state",
    ),
    case(
        "identify-size-0", b"IDENTIFY\n" + size(0), error=b"E_BAD_BODY IDENTIFY invalid body size 0"
    ),
    case(
        "identify-too-big",
        b"IDENTIFY\n" + size(1001),
        error=b"E_BAD_BODY IDENTIFY body too big 1001 > 1000",
    ),
    case("identify-bad-json", ident(b"{nope"), error=DECODE),
    case("identify-array", ident(b"[]"), error=DECODE),
    case("identify-bom", ident(b"\xef\xbb\xbf{}"), error=DECODE),
    case("identify-nan", ident(b'{"x":NaN}'), error=DECODE),
    case("identify-wrong-type", ident({"heartbeat_interval": "1000"}), error=DECODE),
    case("identify-float", ident(b'{"msg_timeout":1000.0}'), error=DECODE),
    case("identify-int32-overflow", ident({"sample_rate": 2**31}), error=DECODE),
    case(
        "identify-heartbeat-999",
        ident({"heartbeat_interval": 999}),
        error=b"E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid",
    ),
    case(
        "identify-heartbeat-max+1",
        ident({"HEARTBEAT_INTERVAL": 60001}),
        error=b"E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid",
    ),
    case(
        "identify-output-buffer-size",
        ident({"output_buffer_size": 63}),
        error=b"E_BAD_BODY IDENTIFY output buffer size (63) is invalid",
    ),
    case(
        "identify-output-buffer-timeout",
        ident({"output_buffer_timeout": 24, "output_buffer_size": 63}),
        error=b"E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid",
    ),
    case(
        "identify-sample-rate",
        ident({"sample_rate": 100}),
        error=b"E_BAD_BODY IDENTIFY sample rate (100) is invalid",
    ),
    case(
        "identify-msg-timeout",
        ident({"msg_timeout": 900001}),
        error=b"E_BAD_BODY IDENTIFY msg timeout (900001) is invalid",
    ),
    # ---- AUTH (not configured on either daemon)
    case("auth-disabled", b"AUTH\n" + size(6) + b"secret", error=b"E_AUTH_DISABLED AUTH disabled"),
    case("auth-params", b"AUTH x\n", error=b"E_INVALID AUTH invalid number of parameters"),
    case(
        "auth-after-sub",
        b"AUTH\n",
        setup=SUBSCRIBED,
        error=b"E_INVALID cannot AUTH in current state",
    ),
    case("auth-size-0", b"AUTH\n" + size(0), error=b"E_BAD_BODY AUTH invalid body size 0"),
    case("auth-too-big", b"AUTH\n" + size(1001), error=b"E_BAD_BODY AUTH body too big 1001 > 1000"),
]


@pytest.mark.parametrize("case", CASES)
def test_error_table(daemon: Daemon, case: Case) -> None:
    with Conn(daemon, case.magic) as conn:
        for command, reply in case.setup:
            conn.send(command)
            assert conn.read_frame() == (RESPONSE, reply)
        for i, chunk in enumerate(case.send):
            if i:
                time.sleep(0.01)  # let the server see each chunk on its own
            conn.send(chunk)
        for reply in case.replies:
            assert conn.read_frame() == (RESPONSE, reply)
        assert conn.read_frame() == (ERROR, case.error)
        if case.fatal:
            conn.assert_closed()
        else:
            conn.assert_open()


# --------------------------------------------------------------------------- accepted by both


@pytest.mark.parametrize(
    ("setup", "send", "replies"),
    [
        pytest.param((), b"PUB errtable\n" + size(100) + b"x" * 100, (b"OK",), id="pub-max-size"),
        pytest.param(
            (), mpub(199, *[size(1) + b"m"] * 199), (b"OK",), id="mpub-199-messages-999-bytes"
        ),
        pytest.param(
            (), b"DPUB errtable 3600000\n" + size(1) + b"x", (b"OK",), id="dpub-max-timeout"
        ),
        pytest.param(
            (),
            b"DPUB errtable 18446744073710\n" + size(1) + b"x",  # * 1e6 wraps to 448384 ns
            (b"OK",),
            id="dpub-duration-wraps-into-range",
        ),
        pytest.param(SUBSCRIBED, b"RDY 18446744073709551616\n", (), id="rdy-wraps-to-0"),
        pytest.param(SUBSCRIBED_QUIET, b"RDY\nRDY 50\nRDY 0\n", (), id="rdy-forms"),
        pytest.param(CLOSING, b"RDY 5\n", (), id="rdy-ignored-after-cls"),
        pytest.param((), b"NOP with args\n", (), id="nop-args"),
        pytest.param((), b"SUB errtable ch\r\n", (b"OK",), id="sub-crlf"),
        pytest.param(
            (),
            ident({"heartbeat_interval": 60000, "msg_timeout": 900000, "sample_rate": 99})
            + ident({"output_buffer_size": -1, "output_buffer_timeout": 30000}),
            (b"OK", b"OK"),
            id="identify-maxima-twice",
        ),
    ],
)
def test_accepted_by_both(
    daemon: Daemon, setup: tuple[tuple[bytes, bytes], ...], send: bytes, replies: tuple[bytes, ...]
) -> None:
    with Conn(daemon) as conn:
        for command, reply in setup:
            conn.send(command)
            assert conn.read_frame() == (RESPONSE, reply)
        conn.send(send)
        for reply in replies:
            assert conn.read_frame() == (RESPONSE, reply)
        conn.assert_open()


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"null", id="null"),  # Go: null into a struct is a no-op
        pytest.param(b'{"client_id":"\xff\xfe"}', id="invalid-utf8"),  # Go: becomes U+FFFD
        pytest.param(b'{"unknown":[1,{"a":null}],"HeartBeat_Interval":null}', id="unknown-keys"),
        pytest.param(b'{"heartbeat_interval":-1,"HEARTBEAT_INTERVAL":5000}', id="last-key-wins"),
    ],
)
def test_identify_bodies_nsqd_accepts(daemon: Daemon, body: bytes) -> None:
    with Conn(daemon) as conn:
        conn.send(ident(body))
        assert conn.read_frame() == (RESPONSE, b"OK")
        conn.send(SUB)  # heartbeats are on
        assert conn.read_frame() == (RESPONSE, b"OK")


def test_identify_reply_is_nsqd_s(daemon: Daemon) -> None:
    with Conn(daemon) as conn:
        conn.send(ident(b'{"feature_negotiation":true,"deflate_level":3,"msg_timeout":5000}'))
        assert conn.read_frame() == (
            RESPONSE,
            b'{"max_rdy_count":50,"version":"1.3.0","max_msg_timeout":900000,'
            b'"msg_timeout":5000,"tls_v1":false,"deflate":false,"deflate_level":6,'
            b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
            b'"output_buffer_size":16384,"output_buffer_timeout":250}',
        )


# --------------------------------------------------------------------------- by-design differences


def test_fin_short_id_nsqd_fails_at_once(go_daemon: Daemon) -> None:
    """nsqd splits the line on spaces: a 3-byte id is invalid as soon as the line ends."""
    with Conn(go_daemon) as conn:
        conn.send(SUB)
        assert conn.read_frame() == (RESPONSE, b"OK")
        conn.send(b"FIN abc\n")
        assert conn.read_frame() == (ERROR, b"E_INVALID invalid message ID")
        conn.assert_closed()


def test_fin_short_id_pnsq_waits_for_sixteen_id_bytes(pnsq_daemon: Daemon) -> None:
    """pnsq reads FIN at fixed offsets (youzan): the '\\n' after "abc" is an id byte."""
    with Conn(pnsq_daemon) as conn:
        conn.send(SUB)
        assert conn.read_frame() == (RESPONSE, b"OK")
        conn.send(b"FIN abc\n")
        conn.assert_silent(0.3)
        conn.send(b"0123456789AB\n")  # 4 + 12 = 16 id bytes, then the line end
        assert conn.read_frame() == (
            ERROR,
            b"E_FIN_FAILED FIN abc\n0123456789AB failed ID not in flight",
        )
        conn.assert_open()


SPACEY_ID = b"id with \n and \r!"  # 16 bytes, youzan ids can look like this
assert len(SPACEY_ID) == 16


@pytest.mark.parametrize(
    ("command", "nsqd_error", "pnsq_error"),
    [
        pytest.param(
            b"FIN " + SPACEY_ID + b"\n",
            b"E_INVALID invalid message ID",
            b"E_FIN_FAILED FIN " + SPACEY_ID + b" failed ID not in flight",
            id="fin",
        ),
        pytest.param(
            b"TOUCH " + SPACEY_ID + b"\n",
            b"E_INVALID invalid message ID",
            b"E_TOUCH_FAILED TOUCH " + SPACEY_ID + b" failed ID not in flight",
            id="touch",
        ),
        pytest.param(
            b"REQ " + SPACEY_ID + b" 10\n",
            b"E_INVALID invalid message ID",
            b"E_REQ_FAILED REQ " + SPACEY_ID + b" failed ID not in flight",
            id="req",
        ),
    ],
)
def test_binary_ids_with_spaces_and_newlines(
    go_daemon: Daemon, pnsq_daemon: Daemon, command: bytes, nsqd_error: bytes, pnsq_error: bytes
) -> None:
    """nsqd's space-split parser rejects such ids (fatal); pnsq echoes them (non-fatal)."""
    with Conn(go_daemon) as conn:
        conn.send(SUB)
        assert conn.read_frame() == (RESPONSE, b"OK")
        conn.send(command)
        assert conn.read_frame() == (ERROR, nsqd_error)
        conn.assert_closed()
    with Conn(pnsq_daemon) as conn:
        conn.send(SUB)
        assert conn.read_frame() == (RESPONSE, b"OK")
        conn.send(command)
        assert conn.read_frame() == (ERROR, pnsq_error)
        conn.assert_open()


def test_extra_sub_parameter_is_a_partition_in_pnsq(go_daemon: Daemon, pnsq_daemon: Daemon) -> None:
    """nsqd ignores extra parameters; pnsq (like youzan) reads a 4th SUB parameter as partition."""
    command = b"SUB errtable ch extra\n"
    with Conn(go_daemon) as conn:
        conn.send(command)
        assert conn.read_frame() == (RESPONSE, b"OK")
    with Conn(pnsq_daemon) as conn:
        conn.send(command)
        assert conn.read_frame() == (
            ERROR,
            b'E_BAD_PARTITION topic partition is not valid: strconv.Atoi: parsing "extra": '
            b"invalid syntax",
        )
        conn.assert_closed()


# --------------------------------------------------------------------------- EOF mid-command


EOF_CASES = {  # what the client sends before it half-closes: nsqd's error frame
    "pub-size": (b"PUB errtable\n\x00\x00", b"E_BAD_MESSAGE PUB failed to read message body size"),
    "pub-body": (
        b"PUB errtable\n" + size(16) + b"half",
        b"E_BAD_MESSAGE PUB failed to read message body",
    ),
    "dpub-body": (
        b"DPUB errtable 100\n" + size(9) + b"ha",
        b"E_BAD_MESSAGE DPUB failed to read message body",
    ),
    "identify-size": (b"IDENTIFY\n\x00", b"E_BAD_BODY IDENTIFY failed to read body size"),
    "identify-body": (b"IDENTIFY\n" + size(30) + b"{}", b"E_BAD_BODY IDENTIFY failed to read body"),
    "mpub-size": (b"MPUB errtable\n\x00", b"E_BAD_BODY MPUB failed to read body size"),
    "mpub-count": (
        b"MPUB errtable\n" + size(20) + b"\x00",
        b"E_BAD_BODY MPUB failed to read message count",
    ),
    "mpub-element-size": (
        b"MPUB errtable\n" + size(20) + size(2) + b"\x00\x00",
        b"E_BAD_MESSAGE MPUB failed to read message(0) body size",
    ),
    "mpub-element-body": (
        b"MPUB errtable\n" + size(20) + size(2) + size(3) + b"abc" + size(5) + b"x",
        b"E_BAD_MESSAGE MPUB failed to read message body",
    ),
}


@pytest.mark.parametrize(("send", "error"), list(EOF_CASES.values()), ids=list(EOF_CASES))
def test_eof_in_a_command_body_gets_nsqd_s_read_error(
    daemon: Daemon, send: bytes, error: bytes
) -> None:
    """The client half-closes in the middle of a body: nsqd still answers with its read error,
    then closes; a PUB before it in the same write is acknowledged first."""
    with Conn(daemon) as conn:
        conn.send(b"PUB errtable\n" + size(2) + b"ok" + send)
        conn.sock.shutdown(socket.SHUT_WR)
        assert conn.read_frame() == (RESPONSE, b"OK")
        assert conn.read_frame() == (ERROR, error)
        conn.assert_closed()


def test_eof_in_a_command_line_closes_without_a_reply(daemon: Daemon) -> None:
    with Conn(daemon) as conn:
        conn.send(b"PUB errt")
        conn.sock.shutdown(socket.SHUT_WR)
        conn.assert_closed()


def test_binary_ids_are_logged_as_hex(pnsq_daemon: Daemon) -> None:
    """The error frame carries the id as it came (as nsqd's); the log line shows it as hex."""
    raw_id = b"\x00\xffLOGHEX\x1b[2J\x07\x00\x01\x02"
    assert len(raw_id) == 16
    with Conn(pnsq_daemon) as conn:
        conn.send(SUB + b"FIN " + raw_id + b"\n")
        assert conn.read_frame() == (RESPONSE, b"OK")
        error = b"E_FIN_FAILED FIN " + raw_id + b" failed ID not in flight"
        assert conn.read_frame() == (ERROR, error)
    deadline = time.monotonic() + 5
    while raw_id.hex() not in pnsq_daemon.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = pnsq_daemon.log_path.read_bytes()
    assert raw_id.hex().encode() in log
    assert b"LOGHEX" not in log
