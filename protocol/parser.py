"""The sans-IO server side of protocol V2: bytes in, :data:`Command` values out.

:class:`CommandParser` owns the connection's protocol state (init → subscribed → closing) and
checks every command the way nsqd 1.3 does, in nsqd's order, raising :class:`ClientError` with
nsqd's exact text. It never blocks: :meth:`CommandParser.next_event` returns :data:`NEED_DATA`
until a whole command (line plus body) is buffered. The magic ``"  V2"`` is read by the shell.

This module splits the input into commands and reads the session commands (IDENTIFY, AUTH, SUB,
RDY, CLS, NOP); the publish commands are read by :mod:`protocol._publish`, FIN/REQ/TOUCH (at
fixed offsets, as a message id is binary) by :mod:`protocol._acks`, with the state and buffer
primitives of :mod:`protocol._parser_base`.
"""

from __future__ import annotations

from collections.abc import Callable

from ._acks import AckReader
from ._parser_base import (
    NEED_DATA as NEED_DATA,
    ConnState as ConnState,
    NeedData as NeedData,
    ParserLimits as ParserLimits,
    Result,
)
from ._publish import PublishReader
from .commands import Auth, Cls, Command, Identify, InternalCreateTopic, Nop, Rdy, Sub, SubMode
from .consume import ConsumeStartError, parse_consume_start
from .errors import ClientError, ConnectionAbort, ErrorCode, YouzanText
from .gostr import go_bytes, go_int64, go_quote, parse_base10
from .names import is_valid_name

#: Go's ``strconv.ParseBool``: the spellings it accepts
_GO_BOOLS = {
    **dict.fromkeys((b"1", b"t", b"T", b"TRUE", b"true", b"True"), True),
    **dict.fromkeys((b"0", b"f", b"F", b"FALSE", b"false", b"False"), False),
}


class CommandParser(PublishReader, AckReader):
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
        self._error = None
        self._eof = False
        self._numbered_prefix = None
        self._numbered_target = ("", 0)
        self._handlers: dict[bytes, Callable[[list[bytes], int], Result]] = {
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
            b"INTERNAL_CREATE_TOPIC": self._internal_create_topic,
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

    def close(self) -> None:
        """The connection ended: drop the unparsed bytes, the sticky error and the command
        table at once. A parser is in a reference cycle of its own (its command table holds its
        bound methods), and so is a sticky error (its traceback holds the frames that raised
        it, with the command's body): left to the cycle collector, a body cut short (up to
        ``--max-body-size`` a connection) stayed in memory until its next full pass. No
        command is read after this."""
        self._buf = bytearray()
        self._pos = 0
        self._error = None
        self._handlers = {}

    @property
    def buffered(self) -> int:
        """Number of unparsed bytes."""
        return len(self._buf) - self._pos

    def pending_line(self) -> list[bytes]:
        """After :data:`NEED_DATA`: the words of the command whose line is buffered whole but
        whose body is not (``[b"MPUB", b"topic"]``), or ``[]``. For a check that nsqd makes
        before it reads a body (AUTH of an MPUB), at each ``NEED_DATA`` of a connection with
        AUTH: a search for the end of that line, and a copy of the line only."""
        end = self._buf.find(b"\n", self._pos)
        if end < 0:
            return []
        return bytes(self._buf[self._pos : end]).rstrip(b"\r").split(b" ")

    # ---------------------------------------------------------------- events

    def end_of_input(self) -> None:
        """The peer closed its side after the commands :meth:`next_event` returned.

        Raises:
            ClientError: a command's body was cut short: nsqd's read error, which nsqd still
                sends before it closes (``E_BAD_MESSAGE PUB failed to read message body``,
                ``E_BAD_BODY IDENTIFY failed to read body size``, ...). A command line cut
                short raises nothing: nsqd closes without a reply.
        """
        if self._error is not None or not self.buffered:
            return
        self._eof = True
        self.next_event()  # NEED_DATA: an unfinished line (or an MPUB body that splits)

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

    def _parse_one(self) -> Result:
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            return NEED_DATA
        if buf.startswith(b"PUB ", pos) and not self.tls_required:
            pub = self._plain_pub(pos)
            if pub is not None:
                return pub
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

    # ---------------------------------------------------------------- session commands

    def _identify(self, params: list[bytes], start: int) -> Result:
        self._require_state("IDENTIFY", ConnState.INIT)
        body = self._sized_body(start, "IDENTIFY")
        return NEED_DATA if body is None else Identify(body)

    def _auth(self, params: list[bytes], start: int) -> Result:
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

    # ---------------------------------------------------------------- subscription and flow

    def _sub(self, params: list[bytes], start: int) -> Result:
        name = params[0]
        consume_start = None
        if name == b"SUB_ADVANCED" and len(params) > 4 and params[4]:
            # youzan checks the consume start first, before the state
            try:
                parse_consume_start(params[4])
            except ConsumeStartError as exc:
                raise ClientError(ErrorCode.INVALID, str(exc)) from exc
            consume_start = params[4].decode("utf-8", "surrogateescape")
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
        mode = (
            SubMode.PLAIN
            if name == b"SUB"
            else SubMode.ADVANCED
            if name == b"SUB_ADVANCED"
            else SubMode.ORDERED
        )
        self._pos = start
        self.state = ConnState.SUBSCRIBED
        return Sub(topic, channel, partition, mode, consume_start)

    def _rdy(self, params: list[bytes], start: int) -> Result:
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

    def _cls(self, params: list[bytes], start: int) -> Result:
        self._require_state("CLS", ConnState.SUBSCRIBED)
        self._pos = start
        self.state = ConnState.CLOSING
        return Cls()

    def _nop(self, params: list[bytes], start: int) -> Result:
        self._pos = start
        return Nop()

    def _internal_create_topic(self, params: list[bytes], start: int) -> Result:
        """youzan's checks, in its order; no state check (any state)."""
        if len(params) < 3:
            raise ClientError(ErrorCode.INVALID, YouzanText.CREATE_TOPIC_PARAMS)
        raw = params[1]
        topic = raw.decode("utf-8", "surrogateescape")
        if not is_valid_name(topic):
            raise ClientError(
                ErrorCode.BAD_TOPIC, YouzanText.CREATE_TOPIC_NAME.format(go_quote(raw))
            )
        partition = self._partition(params, 2)
        assert partition is not None
        if partition < 0:
            raise ClientError(ErrorCode.BAD_PARTITION, YouzanText.CREATE_TOPIC_NEGATIVE)
        ext = None
        if len(params) > 3:
            ext = _GO_BOOLS.get(params[3])
            if ext is None:
                raise ClientError(
                    ErrorCode.BAD_EXT, YouzanText.CREATE_TOPIC_EXT.format(go_quote(params[3]))
                )
        self._pos = start
        return InternalCreateTopic(topic, partition, ext)
