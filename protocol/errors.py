"""Protocol errors: every NSQ error code, its fatality, and the exceptions the parser raises.

nsqd answers a bad command with an error frame whose text is ``"<CODE> <description>"``; most
errors are fatal (the frame is sent, then the connection closes), a few are not. The split lives
here, in one table, so that the server shell never decides it case by case.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class ErrorCode(StrEnum):
    """Error codes of nsqd 1.3 (stock) and youzan nsqd (partitioned extensions)."""

    INVALID = "E_INVALID"
    BAD_PROTOCOL = "E_BAD_PROTOCOL"
    BAD_BODY = "E_BAD_BODY"
    BAD_TOPIC = "E_BAD_TOPIC"
    BAD_CHANNEL = "E_BAD_CHANNEL"
    BAD_MESSAGE = "E_BAD_MESSAGE"
    PUB_FAILED = "E_PUB_FAILED"
    MPUB_FAILED = "E_MPUB_FAILED"
    DPUB_FAILED = "E_DPUB_FAILED"
    SUB_FAILED = "E_SUB_FAILED"
    FIN_FAILED = "E_FIN_FAILED"
    REQ_FAILED = "E_REQ_FAILED"
    TOUCH_FAILED = "E_TOUCH_FAILED"
    IDENTIFY_FAILED = "E_IDENTIFY_FAILED"
    AUTH_FAILED = "E_AUTH_FAILED"
    AUTH_FIRST = "E_AUTH_FIRST"
    AUTH_DISABLED = "E_AUTH_DISABLED"
    AUTH_ERROR = "E_AUTH_ERROR"
    UNAUTHORIZED = "E_UNAUTHORIZED"
    # youzan extensions
    BAD_PARTITION = "E_BAD_PARTITION"
    TOPIC_NOT_EXIST = "E_TOPIC_NOT_EXIST"
    SUB_ORDER_IS_MUST = "E_SUB_ORDER_IS_MUST"
    SUB_EXTEND_NEED = "E_SUB_EXTEND_NEED"
    SUB_EXTEND_FORBIDDEN = "E_SUB_EXTEND_FORBIDDON"  # sic: youzan's spelling on the wire
    SUB_CHANNEL_NOT_REGISTERED = "E_SUB_CHANNEL_NOT_REGISTERED"
    FAILED_ON_NOT_LEADER = "E_FAILED_ON_NOT_LEADER"
    FAILED_ON_NOT_WRITABLE = "E_FAILED_ON_NOT_WRITABLE"
    PUB_TOO_MUCH_WAITING = "E_PUB_TOO_MUCH_WAITING"
    EXT_NOT_SUPPORT = "E_EXT_NOT_SUPPORT"
    INVALID_JSON_HEADER = "E_INVALID_JSON_HEADER"
    INVALID_TRACE_ID = "INVALID_TRACE_ID"  # sic: youzan sends it without the E_ prefix
    BAD_EXT = "E_BAD_EXT"
    CREATE_TOPIC_FAILED = "E_CREATE_TOPIC_FAILED"
    # pnsq extensions: a numbered publish (idempotent publishing) that does not follow the
    # producer's last numbers; nothing is stored
    PUB_SEQUENCE_GAP = "E_PUB_SEQUENCE_GAP"
    PUB_SEQUENCE_UNKNOWN = "E_PUB_SEQUENCE_UNKNOWN"


class YouzanText:
    """youzan nsqd's fixed error descriptions, verbatim (``nsqdserver/protocol_v2.go``).

    Every youzan-specific text pnsq sends is here, so the wire words live in one place.
    """

    SUB_ORDER_IS_MUST = "this topic is configured only allow ordered sub"
    SUB_EXTEND_NEED = "this topic is extended and should identify as extend support."
    SUB_EXTEND_FORBIDDEN = "this topic is not extended and should not identify as extend support."
    CHANNEL_NOT_REGISTERED = "channel is not registered under topic."
    ORDERED_SAMPLE_RATE = "order consume is not allowed while sample rate is not 0"
    MULTI_PARTITION = "topic partition is not valid for multi partition: -1"
    BAD_PARTITION = "topic partition is not valid: {}"
    INVALID_JSON_HEADER = "fail to parse json header"
    TRACE_ID_NOT_STRING = "passin trace id should be string"
    TRACE_ID_INVALID = "invalid trace id"
    EXT_NOT_SUPPORTED = "ext content not supported in topic {}"
    TRACE_BODY_SIZE = "invalid body size {} with trace id enabled"
    EXT_BODY_SIZE = "invalid body size {} with ext json header enabled"
    EXT_HEADER_SIZE = "invalid body size {} in ext json header content length"
    MPUB_TRACE_SIZE = "MPUB invalid message({}) body size {} for tracing"
    INVALID_CONSUME_OFFSET = "invalid consume offset:{}"
    UNSUPPORTED_OFFSET_TYPE = "not supported offset type"
    CREATE_TOPIC_PARAMS = "CREATE_TOPIC insufficient number of parameters"
    CREATE_TOPIC_NAME = "topic name {} is not valid"
    CREATE_TOPIC_NEGATIVE = "partition should not less than 0"
    CREATE_TOPIC_EXT = "topic ext is not valid: strconv.ParseBool: parsing {}: invalid syntax"
    CREATE_TOPIC_FAILED = "CREATE_TOPIC {} failed"


#: Codes after which the connection stays open. Everything else is fatal. youzan's
#: E_FAILED_ON_NOT_LEADER / E_FAILED_ON_NOT_WRITABLE are non-fatal on publish and fatal on
#: SUB/FIN; callers pick with ``ClientError(..., fatal=...)`` for those two.
NON_FATAL_CODES: Final = frozenset(
    {
        ErrorCode.FIN_FAILED,
        ErrorCode.REQ_FAILED,
        ErrorCode.TOUCH_FAILED,
        ErrorCode.PUB_FAILED,
        ErrorCode.MPUB_FAILED,
        ErrorCode.EXT_NOT_SUPPORT,
        ErrorCode.INVALID_JSON_HEADER,
        ErrorCode.INVALID_TRACE_ID,
        ErrorCode.CREATE_TOPIC_FAILED,
        ErrorCode.PUB_SEQUENCE_GAP,
        ErrorCode.PUB_SEQUENCE_UNKNOWN,
    }
)


class ProtocolError(Exception):
    """Base class: the peer broke the protocol."""


class ConnectionAbort(ProtocolError):
    """Close the connection without sending an error frame (nsqd: "failed to read command")."""


class ClientError(ProtocolError):
    """An NSQ error reply: ``code`` plus ``description``, sent as one error frame.

    Args:
        code: the error code.
        description: nsqd's exact description text (may be empty; the frame then ends in a space,
            as youzan's do).
        fatal: whether the connection closes after the frame; defaults to the code's class.
        log_text: what a log line shows instead of :attr:`text`, where the frame carries raw
            bytes (a binary message id) that do not belong in a log.
    """

    def __init__(
        self,
        code: ErrorCode,
        description: str = "",
        *,
        fatal: bool | None = None,
        log_text: str | None = None,
    ):
        self.code = code
        self.description = description
        self.fatal = code not in NON_FATAL_CODES if fatal is None else fatal
        self.log_text = self.text if log_text is None else log_text
        super().__init__(self.text)

    @property
    def text(self) -> str:
        """The frame payload: ``"<CODE> <description>"``."""
        return f"{self.code} {self.description}"

    def __repr__(self) -> str:
        return f"ClientError({self.text!r}, fatal={self.fatal})"
