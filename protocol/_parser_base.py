"""What every reader of the V2 command parser shares: state, limits, the buffer and name checks.

:class:`~protocol.parser.CommandParser` is assembled from readers (:mod:`protocol._publish`,
:mod:`protocol._acks` and its own); each reads one family of commands out of the buffer declared
here, with the primitives here: consuming sized bodies with nsqd's size checks, the state and TLS
checks, and topic-name and partition validation in nsqd's words. The public names are re-exported
by :mod:`protocol.parser`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import Enum
from typing import Final

from .commands import Command
from .errors import ClientError, ConnectionAbort, ErrorCode
from .gostr import go_bytes, go_quote, parse_base10
from .names import is_valid_name

# body / element size: i32 BE, as nsqd reads it (negative = invalid)
_SIZE: Final = struct.Struct(">i")
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


def _noun(code: ErrorCode) -> str:
    """What nsqd calls a sized body in its read errors: PUB/DPUB's ``E_BAD_MESSAGE`` "message
    body", IDENTIFY/AUTH/MPUB's ``E_BAD_BODY`` "body"."""
    return "message body" if code is ErrorCode.BAD_MESSAGE else "body"


Result = Command | NeedData | None  # None: a command that produces nothing (RDY while closing)


class ParserBase:
    """The parser's state (set by ``CommandParser.__init__``) and the primitives its readers use."""

    limits: ParserLimits
    state: ConnState
    heartbeats_disabled: bool
    tls_required: bool
    _buf: bytearray
    _pos: int  # start of the unparsed bytes in _buf
    _error: ClientError | ConnectionAbort | None
    #: the peer closed its side (:meth:`CommandParser.end_of_input`): a body that is cut
    #: short is an error with nsqd's "failed to read" text instead of NEED_DATA
    _eof: bool
    #: ``PUB <topic> <partition> `` of the last numbered PUB read in one step, and its topic
    #: and partition: the same producer's next PUB is read by that prefix (``_publish``)
    _numbered_prefix: bytes | None
    _numbered_target: tuple[str, int]

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
            self._check_eof(code, f"{cmd} failed to read {_noun(code)} size")
            return None
        if size <= 0 or size > limit:
            checks = [(size > limit, too_big), (size <= 0, invalid)]
            if not big_first:
                checks.reverse()
            text = next(t for failed, t in checks if failed)
            raise ClientError(code, f"{cmd} {text.format(size, limit)}")
        body = self._take(start + 4, size)
        if body is None:
            self._check_eof(code, f"{cmd} failed to read {_noun(code)}")
        return body

    def _check_eof(self, code: ErrorCode, text: str) -> None:
        """After the peer's EOF, a body still missing can never come: nsqd's read error."""
        if self._eof:
            raise ClientError(code, text)

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
    def _sequence(cmd: str, params: list[bytes], index: int, partition: int | None) -> int | None:
        """pnsq: the number after the partition of a numbered publish (idempotent publishing),
        None when there is none."""
        if len(params) <= index:
            return None
        value = parse_base10(params[index])
        if value is None or not 0 <= value < 1 << 63:
            raise ClientError(
                ErrorCode.INVALID, f"{cmd} sequence is not valid: {go_bytes(params[index])}"
            )
        if partition is None or partition < 0:
            raise ClientError(ErrorCode.INVALID, f"{cmd} a numbered publish names its partition")
        return value

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
