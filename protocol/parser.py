"""The sans-IO server side of protocol V2: bytes in, :data:`Command` values out.

:class:`CommandParser` owns the connection's protocol state (init → subscribed → closing) and
checks every command the way nsqd 1.3 does, in nsqd's order, raising :class:`ClientError` with
nsqd's exact text. It never blocks: :meth:`CommandParser.next_event` returns :data:`NEED_DATA`
until a whole command (line plus body) is buffered. The magic ``"  V2"`` is read by the shell.

FIN, REQ and TOUCH are read at fixed offsets (youzan NSQ), because a 16-byte binary message id may
contain ``' '`` or ``'\\n'``: ``"FIN " + id + "\\n"``, ``"REQ " + id + " " + ms + "\\n"``,
``"TOUCH " + id + "\\n"``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Final

from .commands import (
    Auth,
    Cls,
    Command,
    Dpub,
    Fin,
    Identify,
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
from .errors import ClientError, ConnectionAbort, ErrorCode
from .gostr import go_bytes, go_int64, go_quote, parse_base10
from .mpub import MpubFormatError, split_mpub_body
from .names import is_valid_name

_SIZE: Final = struct.Struct(
    ">i"
)  # body / element size: i32 BE, as nsqd reads it (negative = invalid)
_TRACE_ID: Final = struct.Struct(">Q")  # PUB_TRACE trace id: u64 BE before the body
_EXT_LEN: Final = struct.Struct(">H")  # PUB_EXT json header length: u16 BE before the header

_FIN_LEN: Final = 20  # "FIN " + 16-byte id, then "\n"
_TOUCH_LEN: Final = 22  # "TOUCH " + 16-byte id, then "\n"
_ATOI: Final = re.compile(rb"[+-]?[0-9]+\Z")

# Names already validated: the hot PUB path skips the regex (bounded, shared by connections).
_VALID_NAMES: dict[bytes, str] = {}
_VALID_NAMES_MAX: Final = 10_000


class ConnState(Enum):
    """Client states; the numbers are what nsqd's /stats reports."""

    INIT = 0
    SUBSCRIBED = 3
    CLOSING = 4


class NeedData(Enum):
    """Sentinel type for :data:`NEED_DATA`."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class ParserLimits:
    """The nsqd options the parser enforces."""

    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_rdy_count: int = 2500
    max_req_timeout_ms: int = 3_600_000
    max_line: int = 16 * 1024  # nsqd reads lines through a 16 KiB bufio.Reader


_Result = Command | NeedData | None  # None: a command that produces nothing (RDY while closing)


class CommandParser:
    """Incremental parser and protocol state machine for one V2 connection."""

    def __init__(self, limits: ParserLimits | None = None) -> None:
        self.limits = limits or ParserLimits()
        self.state = ConnState.INIT
        #: set by the server after an IDENTIFY with heartbeat_interval -1 (SUB is then refused)
        self.heartbeats_disabled = False
        #: set by the server while --tls-required holds and the connection is not TLS
        self.tls_required = False
        self._buf = bytearray()
        self._pos = 0
        self._error: ClientError | ConnectionAbort | None = None
        self._handlers: dict[bytes, Callable[[list[bytes], int], _Result]] = {
            b"IDENTIFY": self._identify,
            b"AUTH": self._auth,
            b"SUB": self._sub,
            b"SUB_ORDER": self._sub,
            b"SUB_ORDERED": self._sub,
            b"SUB_ADVANCED": self._sub,
            b"PUB": self._pub,
            b"MPUB": self._mpub,
            b"DPUB": self._dpub,
            b"PUB_TRACE": self._pub_trace,
            b"MPUB_TRACE": self._mpub,
            b"PUB_EXT": self._pub_ext,
            b"MPUB_EXT": self._mpub,
            b"RDY": self._rdy,
            b"FIN": self._short_fin_req,
            b"REQ": self._short_fin_req,
            b"TOUCH": self._short_touch,
            b"CLS": self._cls,
            b"NOP": self._nop,
        }

    # ---------------------------------------------------------------- buffer

    def receive_data(self, data: bytes | bytearray) -> None:
        """Buffer bytes read from the peer (compacting what was consumed, once per call)."""
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def take_buffered(self) -> bytes:
        """Remove and return unparsed bytes (used when a TLS/compression upgrade starts)."""
        rest = bytes(self._buf[self._pos :])
        self._buf.clear()
        self._pos = 0
        return rest

    @property
    def buffered(self) -> int:
        """Number of unparsed bytes."""
        return len(self._buf) - self._pos

    # ---------------------------------------------------------------- events

    def next_event(self) -> Command | NeedData:
        """The next complete command, or NEED_DATA.

        Raises:
            ClientError: the command is invalid; send its text, close if ``fatal``.
            ConnectionAbort: close without a reply (line longer than nsqd's read buffer).
        """
        if self._error is not None:
            raise self._error
        try:
            while True:
                result = self._parse_one()
                if result is not None:
                    return result
        except ClientError as exc:
            if exc.fatal:
                self._error = exc
            raise
        except ConnectionAbort as exc:
            self._error = exc
            raise

    def _parse_one(self) -> _Result:
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            return NEED_DATA
        if buf.startswith(b"FIN ", pos) or buf.startswith(b"REQ ", pos):
            return self._fixed_fin_req(pos)
        if buf.startswith(b"TOUCH ", pos):
            return self._fixed_touch(pos)
        nl = buf.find(b"\n", pos, pos + self.limits.max_line)  # nsqd: one 16 KiB ReadSlice
        if nl < 0:
            if len(buf) - pos >= self.limits.max_line:
                raise ConnectionAbort("failed to read command - line too long")
            return NEED_DATA
        end = nl - 1 if nl > pos and buf[nl - 1] == 0x0D else nl
        params = bytes(buf[pos:end]).split(b" ")
        name = params[0]
        if name != b"IDENTIFY":
            self._check_tls(name)
        handler = self._handlers.get(name)
        if handler is None:
            raise ClientError(ErrorCode.INVALID, f"invalid command {go_bytes(name)}")
        return handler(params, nl + 1)

    # ---------------------------------------------------------------- helpers

    def _check_tls(self, name: bytes) -> None:
        if self.tls_required:
            raise ClientError(
                ErrorCode.INVALID, f"cannot {go_bytes(name)} in current state (TLS required)"
            )

    def _require_state(self, name: str, *states: ConnState) -> None:
        if self.state not in states:
            raise ClientError(ErrorCode.INVALID, f"cannot {name} in current state")

    def _size_at(self, at: int) -> int | None:
        """The i32 size at ``at``, or None if not yet buffered."""
        if len(self._buf) - at < 4:
            return None
        return int(_SIZE.unpack_from(self._buf, at)[0])

    def _take(self, start: int, size: int) -> bytes | None:
        """Consume the command: return buf[start:start+size] and move past it, or None."""
        end = start + size
        if len(self._buf) < end:
            return None
        with memoryview(self._buf) as view:
            data = view[start:end].tobytes()
        self._pos = end
        return data

    @staticmethod
    def _topic(cmd: str, raw: bytes, code_prefix: str = "") -> str:
        name = _VALID_NAMES.get(raw)
        if name is not None:
            return name
        name = raw.decode("utf-8", "surrogateescape")
        if is_valid_name(name):
            if len(_VALID_NAMES) < _VALID_NAMES_MAX:
                _VALID_NAMES[raw] = name
            return name
        raise ClientError(
            ErrorCode.BAD_TOPIC, f"{code_prefix}{cmd} topic name {go_quote(raw)} is not valid"
        )

    @staticmethod
    def _partition(params: list[bytes], index: int) -> int | None:
        if len(params) <= index:
            return None
        raw = params[index]
        if _ATOI.match(raw) is None:
            raise ClientError(
                ErrorCode.BAD_PARTITION,
                "topic partition is not valid: "
                f"strconv.Atoi: parsing {go_quote(raw)}: invalid syntax",
            )
        return int(raw)

    def _message_id(self, raw: bytes) -> bytes:
        if len(raw) != 16:
            raise ClientError(ErrorCode.INVALID, "invalid message ID")
        return raw

    # ---------------------------------------------------------------- commands with a body

    def _body_with_size_checks(
        self,
        start: int,
        cmd: str,
        *,
        code: ErrorCode,
        limit: int,
        too_big: str,
        invalid: str,
        big_first: bool,
    ) -> bytes | None:
        size = self._size_at(start)
        if size is None:
            return None
        if size <= 0 or size > limit:
            checks = [(size > limit, too_big), (size <= 0, invalid)]
            if not big_first:
                checks.reverse()
            text = next(t for failed, t in checks if failed)
            raise ClientError(code, f"{cmd} {text.format(size, limit)}")
        return self._take(start + 4, size)

    def _identify(self, params: list[bytes], start: int) -> _Result:
        self._require_state("IDENTIFY", ConnState.INIT)
        body = self._sized_body(start, "IDENTIFY")
        return NEED_DATA if body is None else Identify(body)

    def _auth(self, params: list[bytes], start: int) -> _Result:
        self._require_state("AUTH", ConnState.INIT)
        if len(params) != 1:
            raise ClientError(ErrorCode.INVALID, "AUTH invalid number of parameters")
        body = self._sized_body(start, "AUTH")
        return NEED_DATA if body is None else Auth(body)

    def _sized_body(self, start: int, cmd: str) -> bytes | None:
        return self._body_with_size_checks(
            start,
            cmd,
            code=ErrorCode.BAD_BODY,
            limit=self.limits.max_body_size,
            too_big="body too big {} > {}",
            invalid="invalid body size {}",
            big_first=True,
        )

    def _message_body(self, start: int, cmd: str) -> bytes | None:
        return self._body_with_size_checks(
            start,
            cmd,
            code=ErrorCode.BAD_MESSAGE,
            limit=self.limits.max_msg_size,
            too_big="message too big {} > {}",
            invalid="invalid message body size {}",
            big_first=False,
        )

    def _pub(self, params: list[bytes], start: int) -> _Result:
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, "PUB insufficient number of parameters")
        topic = self._topic("PUB", params[1])
        partition = self._partition(params, 2)
        body = self._message_body(start, "PUB")
        return NEED_DATA if body is None else Pub(topic, body, partition)

    def _dpub(self, params: list[bytes], start: int) -> _Result:
        if len(params) < 3:
            raise ClientError(ErrorCode.INVALID, "DPUB insufficient number of parameters")
        topic = self._topic("DPUB", params[1])
        defer_ms = parse_base10(params[2])
        if defer_ms is None:
            raise ClientError(
                ErrorCode.INVALID, f"DPUB could not parse timeout {go_bytes(params[2])}"
            )
        defer_ns = go_int64(defer_ms * 1_000_000)  # nsqd: time.Duration(ms) * time.Millisecond
        if not 0 <= defer_ns <= self.limits.max_req_timeout_ms * 1_000_000:
            raise ClientError(
                ErrorCode.INVALID,
                f"DPUB timeout {defer_ms} out of range 0-{self.limits.max_req_timeout_ms}",
            )
        body = self._message_body(start, "DPUB")
        return NEED_DATA if body is None else Dpub(topic, defer_ns // 1_000_000, body)

    def _pub_trace(self, params: list[bytes], start: int) -> _Result:
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, "PUB_TRACE insufficient number of parameters")
        topic = self._topic("PUB_TRACE", params[1])
        partition = self._partition(params, 2)
        body = self._message_body(start, "PUB_TRACE")
        if body is None:
            return NEED_DATA
        if len(body) <= _TRACE_ID.size:
            raise ClientError(
                ErrorCode.BAD_MESSAGE, f"PUB_TRACE invalid message body size {len(body)}"
            )
        return PubTrace(topic, _TRACE_ID.unpack_from(body)[0], body[_TRACE_ID.size :], partition)

    def _pub_ext(self, params: list[bytes], start: int) -> _Result:
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, "PUB_EXT insufficient number of parameters")
        topic = self._topic("PUB_EXT", params[1])
        partition = self._partition(params, 2)
        body = self._message_body(start, "PUB_EXT")
        if body is None:
            return NEED_DATA
        header, payload = _split_ext(body, "PUB_EXT")
        return PubExt(topic, header, payload, partition)

    def _mpub(self, params: list[bytes], start: int) -> _Result:
        cmd = go_bytes(params[0])
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, f"{cmd} insufficient number of parameters")
        # nsqd quirk: MPUB's text repeats the code ("E_BAD_TOPIC E_BAD_TOPIC MPUB ...").
        topic = self._topic(cmd, params[1], code_prefix=f"{ErrorCode.BAD_TOPIC} ")
        partition = self._partition(params, 2)
        size = self._size_at(start)
        if size is None:
            return NEED_DATA
        if size <= 0:
            raise ClientError(ErrorCode.BAD_BODY, f"{cmd} invalid body size {size}")
        if size > self.limits.max_body_size:
            raise ClientError(
                ErrorCode.BAD_BODY, f"{cmd} body too big {size} > {self.limits.max_body_size}"
            )
        if len(self._buf) < start + 4 + size:
            return NEED_DATA
        bodies = self._mpub_elements(cmd, start + 4, size)
        self._pos = start + 4 + size
        if cmd == "MPUB":
            return Mpub(topic, bodies, partition)
        if cmd == "MPUB_TRACE":
            traced = []
            for body in bodies:
                if len(body) <= _TRACE_ID.size:
                    raise ClientError(
                        ErrorCode.BAD_MESSAGE, f"{cmd} invalid message body size {len(body)}"
                    )
                traced.append((int(_TRACE_ID.unpack_from(body)[0]), body[_TRACE_ID.size :]))
            return MpubTrace(topic, traced, partition)
        return MpubExt(
            topic, [_split_ext(body, cmd, allow_empty_header=True) for body in bodies], partition
        )

    def _mpub_elements(self, cmd: str, start: int, size: int) -> list[bytes]:
        """Split an MPUB body ``[n]([len][bytes])*`` with nsqd's checks and texts."""
        with memoryview(self._buf) as view:
            body = view[start : start + size].tobytes()
        try:
            return split_mpub_body(body, self.limits.max_msg_size, self.limits.max_body_size, cmd)
        except MpubFormatError as exc:
            raise ClientError(exc.code, str(exc)) from exc

    # ---------------------------------------------------------------- subscription and flow

    def _sub(self, params: list[bytes], start: int) -> _Result:
        self._require_state("SUB", ConnState.INIT)
        if self.heartbeats_disabled:
            raise ClientError(ErrorCode.INVALID, "cannot SUB with heartbeats disabled")
        if len(params) < 3:
            raise ClientError(ErrorCode.INVALID, "SUB insufficient number of parameters")
        topic = self._topic("SUB", params[1])
        channel_raw = params[2]
        channel = channel_raw.decode("utf-8", "surrogateescape")
        if not is_valid_name(channel):
            raise ClientError(
                ErrorCode.BAD_CHANNEL, f"SUB channel name {go_quote(channel_raw)} is not valid"
            )
        partition = self._partition(params, 3)
        name = params[0]
        mode = (
            SubMode.PLAIN
            if name == b"SUB"
            else SubMode.ADVANCED
            if name == b"SUB_ADVANCED"
            else SubMode.ORDERED
        )
        consume_start = None
        if mode is SubMode.ADVANCED and len(params) > 4:
            consume_start = params[4].decode("utf-8", "surrogateescape")
        self._pos = start
        self.state = ConnState.SUBSCRIBED
        return Sub(topic, channel, partition, mode, consume_start)

    def _rdy(self, params: list[bytes], start: int) -> _Result:
        self._pos = start
        if self.state is ConnState.CLOSING:
            return None  # nsqd ignores RDY while closing, without a reply
        self._require_state("RDY", ConnState.SUBSCRIBED)
        count = 1
        if len(params) > 1:
            parsed = parse_base10(params[1])
            if parsed is None:
                raise ClientError(
                    ErrorCode.INVALID, f"RDY could not parse count {go_bytes(params[1])}"
                )
            count = go_int64(parsed)  # nsqd: int64(ByteToBase10(...))
        if count < 0 or count > self.limits.max_rdy_count:
            raise ClientError(
                ErrorCode.INVALID, f"RDY count {count} out of range 0-{self.limits.max_rdy_count}"
            )
        return Rdy(count)

    def _cls(self, params: list[bytes], start: int) -> _Result:
        self._require_state("CLS", ConnState.SUBSCRIBED)
        self._pos = start
        self.state = ConnState.CLOSING
        return Cls()

    def _nop(self, params: list[bytes], start: int) -> _Result:
        self._pos = start
        return Nop()

    # ---------------------------------------------------------------- FIN / REQ / TOUCH

    def _fixed_fin_req(self, pos: int) -> _Result:
        buf = self._buf
        name = "FIN" if buf[pos] == 0x46 else "REQ"
        self._check_tls(name.encode())
        self._require_state(name, ConnState.SUBSCRIBED, ConnState.CLOSING)
        if len(buf) - pos <= _FIN_LEN:
            if len(buf) - pos > self.limits.max_line:
                raise ConnectionAbort("failed to read command - line too long")
            return NEED_DATA
        message_id = bytes(buf[pos + 4 : pos + _FIN_LEN])
        sep = buf[pos + _FIN_LEN]
        if name == "FIN":
            nxt = _line_end(buf, pos + _FIN_LEN)
            if nxt is None:
                return NEED_DATA
            if nxt < 0:
                raise ClientError(ErrorCode.INVALID, "invalid message ID")
            self._pos = nxt
            return Fin(message_id)
        if sep != 0x20:
            line_end = _line_end(buf, pos + _FIN_LEN)
            if line_end is None:
                return NEED_DATA  # "\r" may be the start of "\r\n"
            if line_end != -1:
                raise ClientError(ErrorCode.INVALID, "REQ insufficient number of params")
            raise ClientError(ErrorCode.INVALID, "invalid message ID")
        nl = buf.find(b"\n", pos + _FIN_LEN + 1, pos + self.limits.max_line)
        if nl < 0:
            if len(buf) - pos >= self.limits.max_line:
                raise ConnectionAbort("failed to read command - line too long")
            return NEED_DATA
        end = nl - 1 if buf[nl - 1] == 0x0D else nl
        raw_timeout = bytes(buf[pos + _FIN_LEN + 1 : end]).split(b" ")[0]
        timeout = parse_base10(raw_timeout)
        if timeout is None:
            raise ClientError(
                ErrorCode.INVALID, f"REQ could not parse timeout {go_bytes(raw_timeout)}"
            )
        self._pos = nl + 1
        # nsqd: time.Duration(ms) * time.Millisecond, wrapping; negative is clamped to 0 later
        return Req(message_id, go_int64(timeout * 1_000_000) // 1_000_000)

    def _fixed_touch(self, pos: int) -> _Result:
        buf = self._buf
        self._check_tls(b"TOUCH")
        self._require_state("TOUCH", ConnState.SUBSCRIBED, ConnState.CLOSING)
        if len(buf) - pos <= _TOUCH_LEN:
            return NEED_DATA
        nxt = _line_end(buf, pos + _TOUCH_LEN)
        if nxt is None:
            return NEED_DATA
        if nxt < 0:
            raise ClientError(ErrorCode.INVALID, "invalid message ID")
        message_id = bytes(buf[pos + 6 : pos + _TOUCH_LEN])
        self._pos = nxt
        return Touch(message_id)

    def _short_fin_req(self, params: list[bytes], start: int) -> _Result:
        """``FIN``/``REQ`` without the space and id: only nsqd's parameter-count errors remain."""
        name = go_bytes(params[0])
        self._require_state(name, ConnState.SUBSCRIBED, ConnState.CLOSING)
        raise ClientError(ErrorCode.INVALID, f"{name} insufficient number of params")

    def _short_touch(self, params: list[bytes], start: int) -> _Result:
        self._require_state("TOUCH", ConnState.SUBSCRIBED, ConnState.CLOSING)
        raise ClientError(ErrorCode.INVALID, "TOUCH insufficient number of params")


def _line_end(buf: bytearray, at: int) -> int | None:
    """Index after the line end at ``at``; None if not yet buffered; -1 if no line end there."""
    if len(buf) <= at:
        return None
    if buf[at] == 0x0A:
        return at + 1
    if buf[at] == 0x0D:
        if len(buf) <= at + 1:
            return None
        return at + 2 if buf[at + 1] == 0x0A else -1
    return -1


def _split_ext(body: bytes, cmd: str, *, allow_empty_header: bool = False) -> tuple[bytes, bytes]:
    """``[u16 json len][json][body]`` → (header, body)."""
    if len(body) < _EXT_LEN.size:
        raise ClientError(ErrorCode.BAD_MESSAGE, f"{cmd} invalid message body size {len(body)}")
    header_len = int(_EXT_LEN.unpack_from(body)[0])
    end = _EXT_LEN.size + header_len
    if len(body) <= end or (header_len == 0 and not allow_empty_header):
        raise ClientError(ErrorCode.BAD_MESSAGE, f"{cmd} invalid message body size {len(body)}")
    return body[_EXT_LEN.size : end], body[end:]
