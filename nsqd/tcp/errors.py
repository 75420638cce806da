"""The one table from broker and storage errors to protocol V2 error replies."""

from __future__ import annotations

from protocol import ClientError, ErrorCode
from protocol.errors import YouzanText
from protocol.gostr import go_bytes

from ..broker import StorageError
from ..cluster.forwarding import ForwardError, NoLeaderError, PlacedElsewhereError
from ..core.errors import (
    BadPartitionError,
    BrokerError,
    ChannelNotRegisteredError,
    ConsumeStartUnsupportedError,
    ExitingError,
    ExtendSupportForbiddenError,
    ExtendSupportNeededError,
    NotInFlightError,
    NotLeaderError,
    NotOwnerError,
    NotWritableError,
    OrderedOnlyError,
    OrderedSampleRateError,
    TopicNotFoundError,
)
from ..core.producers import Refusal, SequenceError

#: What the session turns into error frames; anything else is a bug and propagates.
HANDLED_ERRORS = (BrokerError, StorageError, OSError, ForwardError)

#: Refusals with a fixed youzan reply (all fatal).
_FIXED: dict[type, tuple[ErrorCode, str]] = {
    BadPartitionError: (ErrorCode.BAD_PARTITION, YouzanText.MULTI_PARTITION),
    OrderedOnlyError: (ErrorCode.SUB_ORDER_IS_MUST, YouzanText.SUB_ORDER_IS_MUST),
    ExtendSupportNeededError: (ErrorCode.SUB_EXTEND_NEED, YouzanText.SUB_EXTEND_NEED),
    ExtendSupportForbiddenError: (
        ErrorCode.SUB_EXTEND_FORBIDDEN,
        YouzanText.SUB_EXTEND_FORBIDDEN,
    ),
    OrderedSampleRateError: (ErrorCode.INVALID, YouzanText.ORDERED_SAMPLE_RATE),
    ConsumeStartUnsupportedError: (ErrorCode.INVALID, YouzanText.UNSUPPORTED_OFFSET_TYPE),
    TopicNotFoundError: (ErrorCode.TOPIC_NOT_EXIST, ""),  # and PartitionNotFoundError
    PlacedElsewhereError: (ErrorCode.TOPIC_NOT_EXIST, ""),
    ChannelNotRegisteredError: (
        ErrorCode.SUB_CHANNEL_NOT_REGISTERED,
        YouzanText.CHANNEL_NOT_REGISTERED,
    ),
}


#: a numbered publish refused (pnsq's idempotent publishing), by why; all non-fatal
_SEQUENCE: dict[Refusal, ErrorCode] = {
    Refusal.GAP: ErrorCode.PUB_SEQUENCE_GAP,
    Refusal.UNKNOWN: ErrorCode.PUB_SEQUENCE_UNKNOWN,
}

#: youzan's cluster refusals are fatal on these (the connection was bound to that partition's
#: leader) and non-fatal on publishes (the producer retries elsewhere)
_FEED = frozenset({"SUB", "FIN", "REQ", "TOUCH"})


def client_error_for(
    exc: BaseException, command: str, code: ErrorCode, message_id: bytes | None = None
) -> ClientError:
    """The reply nsqd gives when ``command`` fails with ``exc``.

    FIN/REQ/TOUCH name the raw id (``"FIN <id> failed ID not in flight"``); publishes and SUB
    say ``"<CMD> failed <reason>"``; youzan's refusals (ordered and ext topics, partitions) have
    their fixed texts.
    """
    for cls in type(exc).__mro__:
        fixed = _FIXED.get(cls)
        if fixed is not None:
            return ClientError(fixed[0], fixed[1], fatal=True)
    match exc:
        case NotInFlightError() | NotOwnerError():
            raw = message_id or b""
            return ClientError(
                code,
                f"{command} {go_bytes(raw)} failed {exc}",  # nsqd sends the id as it came
                log_text=f"{code} {command} {raw.hex()} failed {exc}",
            )
        case NotWritableError():
            return ClientError(ErrorCode.FAILED_ON_NOT_WRITABLE, "", fatal=command in _FEED)
        case NotLeaderError() | NoLeaderError():
            return ClientError(ErrorCode.FAILED_ON_NOT_LEADER, "", fatal=command in _FEED)
        case SequenceError():
            return ClientError(_SEQUENCE[exc.refusal], f"{command} {exc}")
        case ExitingError():
            return ClientError(code, f"{command} failed exiting", fatal=True)
        case _:
            return ClientError(code, f"{command} failed {exc}", fatal=True)
