"""FIN, REQ and TOUCH for the V2 parser, read at fixed offsets.

A 16-byte binary message id may contain ``' '`` or ``'\\n'``, so (as youzan NSQ does) these are
not split on spaces: ``"FIN " + id + "\\n"``, ``"REQ " + id + " " + ms + "\\n"``,
``"TOUCH " + id + "\\n"``. :class:`AckReader` is mixed into
:class:`~protocol.parser.CommandParser`, which sends input starting ``"FIN "``, ``"REQ "`` or
``"TOUCH "`` here before looking for a line end; a bare ``FIN``/``REQ``/``TOUCH`` line goes
through the line splitter to the short-form readers, which give nsqd's parameter-count errors.
"""

from __future__ import annotations

from typing import Final

from ._parser_base import NEED_DATA, ConnState, ParserBase, Result
from .commands import FIN_COMMAND, Fin, FinRun, Req, Touch
from .errors import ClientError, ConnectionAbort, ErrorCode
from .gostr import go_bytes, go_int64, parse_base10

_FIN_LEN: Final = 20  # "FIN " + 16-byte id, then "\n"
_FIN_SIZE: Final = FIN_COMMAND.size  # with the "\n"
_TOUCH_LEN: Final = 22  # "TOUCH " + 16-byte id, then "\n"


class AckReader(ParserBase):
    """Readers of the commands that answer a delivered message."""

    def fin_run(self) -> FinRun | None:
        """The well-formed ``FIN <16 bytes>\n`` commands buffered at the read position
        (consumed), or None when the next command is anything else: a consumer's FINs in one
        call instead of one :meth:`next_event` each. Anything unusual (``\r\n``, a bad id, a
        wrong state) is left to :meth:`next_event` and its errors."""
        buf = self._buf
        pos = self._pos
        if (
            self._error is not None
            or self.tls_required
            or self.state is not ConnState.SUBSCRIBED
            or not buf.startswith(b"FIN ", pos)
        ):
            return None
        count = (len(buf) - pos) // _FIN_SIZE
        data = bytes(buf[pos : pos + count * _FIN_SIZE])
        if not _all_fins(data, count):
            count = _fin_prefix(data)
            data = data[: count * _FIN_SIZE]
        if not count:
            return None
        self._pos = pos + count * _FIN_SIZE
        return FinRun(data)

    def _fixed_fin_req(self, pos: int) -> Result:
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

    def _fixed_touch(self, pos: int) -> Result:
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

    def _short_fin_req(self, params: list[bytes], start: int) -> Result:
        """``FIN``/``REQ`` without the space and id: only nsqd's parameter-count errors remain."""
        name = go_bytes(params[0])
        self._require_state(name, ConnState.SUBSCRIBED, ConnState.CLOSING)
        raise ClientError(ErrorCode.INVALID, f"{name} insufficient number of params")

    def _short_touch(self, params: list[bytes], start: int) -> Result:
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


def _all_fins(data: bytes, count: int) -> bool:
    """Whether each of the ``count`` 21-byte pieces of ``data`` reads ``FIN <16 bytes>\n``:
    five strided compares instead of a loop over the pieces."""
    step = _FIN_SIZE
    return (
        data[20::step] == b"\n" * count
        and data[0::step] == b"F" * count
        and data[1::step] == b"I" * count
        and data[2::step] == b"N" * count
        and data[3::step] == b" " * count
    )


def _fin_prefix(data: bytes) -> int:
    """How many 21-byte pieces at the start of ``data`` are well-formed FINs."""
    count = 0
    end = len(data)
    pos = 0
    while pos < end and data[pos + _FIN_LEN] == 0x0A and data.startswith(b"FIN ", pos):
        count += 1
        pos += _FIN_SIZE
    return count
