"""The one table from broker and storage errors to protocol V2 error replies."""

from __future__ import annotations

from protocol import ClientError, ErrorCode
from protocol.gostr import go_bytes

from .core.errors import (
    BadPartitionError,
    BrokerError,
    ExitingError,
    NotInFlightError,
    NotOwnerError,
    NotWritableError,
    TopicNotFoundError,
)
from .storage.errors import StorageError

#: What the session turns into error frames; anything else is a bug and propagates.
HANDLED_ERRORS = (BrokerError, StorageError, OSError)


def client_error_for(
    exc: BaseException, command: str, code: ErrorCode, message_id: bytes | None = None
) -> ClientError:
    """The reply nsqd gives when ``command`` fails with ``exc``.

    FIN/REQ/TOUCH name the raw id (``"FIN <id> failed ID not in flight"``); publishes and SUB
    say ``"<CMD> failed <reason>"``.
    """
    match exc:
        case NotInFlightError() | NotOwnerError():
            return ClientError(code, f"{command} {go_bytes(message_id or b'')} failed {exc}")
        case BadPartitionError():
            return ClientError(ErrorCode.BAD_PARTITION, f"topic partition is not valid: {exc}")
        case TopicNotFoundError():
            return ClientError(ErrorCode.TOPIC_NOT_EXIST, "")
        case NotWritableError():
            return ClientError(ErrorCode.FAILED_ON_NOT_WRITABLE, "", fatal=False)
        case ExitingError():
            return ClientError(code, f"{command} failed exiting", fatal=True)
        case _:
            return ClientError(code, f"{command} failed {exc}", fatal=True)
