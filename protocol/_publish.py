"""The publish commands of the V2 parser: PUB, DPUB, PUB_TRACE, PUB_EXT and the MPUB family.

:class:`PublishReader` is mixed into :class:`~protocol.parser.CommandParser`; each method reads
one command (line already split, body still in the buffer) with nsqd's checks, in nsqd's order
and words. Trace ids are a u64 BE before the body; PUB_EXT's JSON header is ``[u16 len][json]``
before the body (size errors in youzan's words: ``protocol.errors.YouzanText``). PUB is the hot
path: keep it free of extra calls.
"""

from __future__ import annotations

import struct
from typing import Final

from ._parser_base import _SIZE, _VALID_NAMES, NEED_DATA, ParserBase, Result
from .commands import Dpub, Mpub, MpubExt, MpubTrace, Pub, PubExt, PubTrace
from .errors import ClientError, ErrorCode, YouzanText
from .gostr import go_bytes, go_int64, parse_base10
from .mpub import MpubFormatError, split_mpub_body

_TRACE_ID: Final = struct.Struct(">Q")  # PUB_TRACE trace id: u64 BE before the body
_EXT_LEN: Final = struct.Struct(">H")  # PUB_EXT json header length: u16 BE before the header
_DIGITS: Final = 18  # digits a fast-path number may have: below 2**63 whatever they are
#: numbered PUBs' ``<topic> <partition>`` read so far (bounded, shared by connections)
_NUMBERED_TARGETS: dict[bytes, tuple[str, int]] = {}
_NUMBERED_TARGETS_MAX: Final = 10_000
_unpack_size_from: Final = _SIZE.unpack_from
#: bodies up to this size are sliced out of the buffer (a slice and a copy: cheaper, for a
#: small body, than a memoryview's copy); a larger one is copied once, through a memoryview
_SLICED_MAX: Final = 16 * 1024


class PublishReader(ParserBase):
    """Readers of the commands that publish messages."""

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

    def _plain_pub(self, pos: int) -> Pub | None:
        """The common PUB, read in one step: ``PUB <topic>\\n`` for a topic already seen valid,
        or pnsq's numbered ``PUB <topic> <partition> <sequence>\\n`` with both in plain digits;
        its body buffered whole and within the limit. None for anything else, read nothing:
        the general path (:meth:`_pub`) reads it, with every check and error. A producer's
        numbered PUBs name one topic and partition: after the first, the next is matched by
        that prefix and only its number is read. Written out in one frame: each call or
        temporary here is paid once per message."""
        buf = self._buf
        topic: str | None
        partition: int | None
        sequence: int | None
        prefix = self._numbered_prefix
        if prefix is not None and buf.startswith(prefix, pos):  # the producer's next PUB
            at = pos + len(prefix)
            nl = buf.find(b"\n", at, at + _DIGITS + 1)
            if nl < 0:
                return None
            raw_sequence = bytes(buf[at:nl])
            if not raw_sequence.isdigit():
                return None
            topic, partition = self._numbered_target
            sequence = int(raw_sequence)
        else:
            nl = buf.find(b"\n", pos + 4, pos + self.limits.max_line)
            if nl < 0:
                return None
            line = bytes(buf[pos + 4 : nl])
            topic = _VALID_NAMES.get(line)
            partition = sequence = None
            if topic is None:  # also for "t 0" or "t\r"
                head, _, raw_sequence = line.rpartition(b" ")
                target = _NUMBERED_TARGETS.get(head) or _numbered_target(head)
                if (
                    target is None
                    or not 0 < len(raw_sequence) <= _DIGITS
                    or not raw_sequence.isdigit()
                ):
                    return None
                topic, partition = target
                sequence = int(raw_sequence)
                self._numbered_prefix = b"PUB " + head + b" "
                self._numbered_target = target
        start = nl + 1 + _SIZE.size
        if len(buf) < start:
            return None
        (size,) = _unpack_size_from(buf, nl + 1)
        end = start + size
        if size <= 0 or size > self.limits.max_msg_size or len(buf) < end:
            return None
        if size <= _SLICED_MAX:
            body = bytes(buf[start:end])
        else:  # copied once, not twice
            with memoryview(buf) as view:
                body = view[start:end].tobytes()
        self._pos = end
        return Pub(topic, body, partition, sequence)

    def _pub(self, params: list[bytes], start: int) -> Result:
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, "PUB insufficient number of parameters")
        topic = self._topic("PUB", params[1])
        partition = self._partition(params, 2)
        sequence = self._sequence("PUB", params, 3, partition)
        body = self._message_body(start, "PUB")
        return NEED_DATA if body is None else Pub(topic, body, partition, sequence)

    def _dpub(self, params: list[bytes], start: int) -> Result:
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
        partition = self._partition(params, 3)  # pnsq; stock nsqd reads no more
        sequence = self._sequence("DPUB", params, 4, partition)
        body = self._message_body(start, "DPUB")
        if body is None:
            return NEED_DATA
        return Dpub(topic, defer_ns // 1_000_000, body, partition, sequence)

    def _pub_trace(self, params: list[bytes], start: int) -> Result:
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, "PUB_TRACE insufficient number of parameters")
        topic = self._topic("PUB_TRACE", params[1])
        partition = self._partition(params, 2)
        sequence = self._sequence("PUB_TRACE", params, 3, partition)
        body = self._message_body(start, "PUB_TRACE")
        if body is None:
            return NEED_DATA
        if len(body) <= _TRACE_ID.size:
            raise ClientError(ErrorCode.BAD_BODY, YouzanText.TRACE_BODY_SIZE.format(len(body)))
        trace_id = _TRACE_ID.unpack_from(body)[0]
        return PubTrace(topic, trace_id, body[_TRACE_ID.size :], partition, sequence)

    def _pub_ext(self, params: list[bytes], start: int) -> Result:
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, "PUB_EXT insufficient number of parameters")
        topic = self._topic("PUB_EXT", params[1])
        partition = self._partition(params, 2)
        sequence = self._sequence("PUB_EXT", params, 3, partition)
        body = self._message_body(start, "PUB_EXT")
        if body is None:
            return NEED_DATA
        if len(body) <= _EXT_LEN.size:
            raise ClientError(ErrorCode.BAD_BODY, YouzanText.EXT_BODY_SIZE.format(len(body)))
        header, payload = _split_ext(body)
        return PubExt(topic, header, payload, partition, sequence)

    def _mpub(self, params: list[bytes], start: int) -> Result:
        cmd = go_bytes(params[0])
        if len(params) < 2:
            raise ClientError(ErrorCode.INVALID, f"{cmd} insufficient number of parameters")
        # nsqd quirk: MPUB's text repeats the code ("E_BAD_TOPIC E_BAD_TOPIC MPUB ...").
        topic = self._topic(cmd, params[1], code_prefix=f"{ErrorCode.BAD_TOPIC} ")
        partition = self._partition(params, 2)
        sequence = self._sequence(cmd, params, 3, partition)
        size = self._size_at(start)
        if size is None:
            self._check_eof(ErrorCode.BAD_BODY, f"{cmd} failed to read body size")
            return NEED_DATA
        if size <= 0:
            raise ClientError(ErrorCode.BAD_BODY, f"{cmd} invalid body size {size}")
        if size > self.limits.max_body_size:
            raise ClientError(
                ErrorCode.BAD_BODY, f"{cmd} body too big {size} > {self.limits.max_body_size}"
            )
        if len(self._buf) < start + 4 + size:
            if self._eof:  # nsqd reads the elements straight from the socket: its error
                self._mpub_elements(cmd, start + 4, len(self._buf) - start - 4)
            return NEED_DATA
        bodies = self._mpub_elements(cmd, start + 4, size)
        self._pos = start + 4 + size
        if cmd == "MPUB":
            return Mpub(topic, bodies, partition, sequence)
        if cmd == "MPUB_TRACE":
            traced = []
            for i, body in enumerate(bodies):
                if len(body) <= _TRACE_ID.size:
                    raise ClientError(
                        ErrorCode.BAD_MESSAGE, YouzanText.MPUB_TRACE_SIZE.format(i, len(body))
                    )
                traced.append((int(_TRACE_ID.unpack_from(body)[0]), body[_TRACE_ID.size :]))
            return MpubTrace(topic, traced, partition, sequence)
        return MpubExt(topic, [_split_ext(body) for body in bodies], partition, sequence)

    def _mpub_elements(self, cmd: str, start: int, size: int) -> list[bytes]:
        """Split an MPUB body ``[n]([len][bytes])*`` with nsqd's checks and texts."""
        with memoryview(self._buf) as view:
            body = view[start : start + size].tobytes()
        try:
            return split_mpub_body(body, self.limits.max_msg_size, self.limits.max_body_size, cmd)
        except MpubFormatError as exc:
            raise ClientError(exc.code, str(exc)) from exc


def _split_ext(body: bytes) -> tuple[bytes, bytes]:
    """``[u16 json len][json][body]`` → (header, body); the body must not be empty (youzan's
    check and text). An empty header is returned as is: PUB_EXT refuses it when it parses the
    JSON (``E_INVALID_JSON_HEADER``), MPUB_EXT stores such an element plain."""
    header_len = int(_EXT_LEN.unpack_from(body)[0]) if len(body) >= _EXT_LEN.size else 0
    end = _EXT_LEN.size + header_len
    if len(body) <= end:
        raise ClientError(ErrorCode.BAD_BODY, YouzanText.EXT_HEADER_SIZE.format(len(body)))
    return body[_EXT_LEN.size : end], body[end:]


def _numbered_target(head: bytes) -> tuple[str, int] | None:
    """``(topic, partition)`` of a numbered PUB's ``<topic> <partition>`` for a topic seen valid
    and a partition in at most 18 plain digits (what the general path reads the same way),
    remembered for the next PUB of that producer; else None."""
    raw_topic, _, raw_partition = head.partition(b" ")
    topic = _VALID_NAMES.get(raw_topic)
    if topic is None or not 0 < len(raw_partition) <= _DIGITS or not raw_partition.isdigit():
        return None
    target = (topic, int(raw_partition))
    if len(_NUMBERED_TARGETS) < _NUMBERED_TARGETS_MAX:
        _NUMBERED_TARGETS[head] = target
    return target
