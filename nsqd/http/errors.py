"""The one translation of domain errors into nsqd's HTTP error replies.

Handlers let the broker's, storage's and forwarding's errors propagate; the app's dispatcher
answers them through the :class:`ErrorTable` of the endpoint's route, found by walking the
exception's class hierarchy (as :mod:`nsqd.tcp.errors` does for protocol V2): the most specific
class in the table wins. An error no table entry covers is a bug and propagates.

There is one table per vocabulary, because nsqd 1.3.0 and youzan answer the same failure
differently per endpoint family, and clients read the text:

* :data:`ADMIN_ERRORS` — nsqd's ``/topic/*``, ``/channel/*``, ``/stats``, ``/config/:opt``:
  ``404 TOPIC_NOT_FOUND`` / ``CHANNEL_NOT_FOUND``, anything unexpected ``500 INTERNAL_ERROR``;
* :data:`PUBLISH_ERRORS` — nsqd's ``/pub`` and ``/mpub``: every put error is ``503 EXITING``
  (``doPUB``), except youzan's partition refusals (a ``partition`` parameter) and a forwarded
  publish that failed;
* :data:`YOUZAN_ERRORS`, :data:`YOUZAN_PUBLISH_ERRORS` — youzan's own endpoints
  (``E_TOPIC_NOT_EXIST``; a failed put is ``503 <error text>``);
* :data:`RANGE_ERRORS`, :data:`CONSUME_ERRORS` — pnsq's partition, offset and consume endpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, final

from pnsq._netio.http import HTTPError
from protocol.consume import ConsumeStartError
from protocol.errors import YouzanText

from ..broker import StorageError
from ..broker.pull import AckNotDurableError
from ..cluster.forwarding import ForwardError, NoLookupdError
from ..config.runtime import InvalidOptionError, InvalidValueError
from ..core.errors import (
    BadPartitionError,
    BrokerError,
    ChannelNotFoundError,
    ConsumeStartUnsupportedError,
    ExitingError,
    NotLeaderError,
    NotWritableError,
    OffsetNotKeptError,
    PartitionNotConsumedError,
    PartitionNotFoundError,
    TopicConflictError,
    TopicNotFoundError,
)
from ..core.leases import LeaseEndedError, UnknownTokenError

__all__ = [
    "ADMIN_ERRORS",
    "CONSUME_ERRORS",
    "NO_ERRORS",
    "PUBLISH_ERRORS",
    "RANGE_ERRORS",
    "YOUZAN_ERRORS",
    "YOUZAN_PUBLISH_ERRORS",
    "ErrorReply",
    "ErrorTable",
]

log = logging.getLogger("nsqd.http")


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """One reply: ``status`` and ``message``, where ``{exc}`` stands for the error's text
    (``fallback`` when that text is empty). ``reason`` adds ``{"reason": <text>}`` to the body
    (pnsq's endpoints); ``logged`` marks a failure of this node rather than a refusal, logged
    at error level."""

    status: int
    message: str
    fallback: str = ""
    reason: bool = False
    logged: bool = False

    def error(self, exc: BaseException) -> HTTPError:
        """The reply to ``exc``."""
        text = str(exc)
        message = self.message.format(exc=text) or self.fallback
        return HTTPError(self.status, message, {"reason": text} if self.reason else None)


@final
class ErrorTable:
    """Error class -> reply; :attr:`handled` is what the dispatcher catches."""

    def __init__(self, replies: Mapping[type[Exception], ErrorReply]) -> None:
        self._replies = dict(replies)
        #: the classes answered (and their subclasses)
        self.handled: tuple[type[Exception], ...] = tuple(self._replies)

    @property
    def replies(self) -> Mapping[type[Exception], ErrorReply]:
        """The entries, read-only."""
        return MappingProxyType(self._replies)

    def reply_for(self, exc: BaseException) -> ErrorReply | None:
        """The entry of the most specific class of ``exc`` in the table (None: not handled)."""
        for cls in type(exc).__mro__:
            reply = self._replies.get(cls)
            if reply is not None:
                return reply
        return None

    def error_for(self, exc: Exception, what: str) -> HTTPError:
        """The reply to ``exc``, raised by the handler of ``what`` (logged when the entry says
        so). Raises ``exc`` itself when the table does not cover it: never swallowed."""
        reply = self.reply_for(exc)
        if reply is None:
            raise exc
        if reply.logged:
            log.error("%s failed: %s", what, exc)
        return reply.error(exc)


#: /ping and /info: nothing to translate
NO_ERRORS: Final = ErrorTable({})

_INTERNAL: Final = ErrorReply(500, "INTERNAL_ERROR", logged=True)
_NOT_LEADER: Final = ErrorReply(400, "E_FAILED_ON_NOT_LEADER")
_TOPIC_NOT_EXIST: Final = ErrorReply(404, "E_TOPIC_NOT_EXIST")

#: nsqd's administrative endpoints, with youzan's ``/topic/create`` and ``/channel/setoffset``
#: refusals
ADMIN_ERRORS: Final = ErrorTable(
    {
        TopicNotFoundError: ErrorReply(404, "TOPIC_NOT_FOUND"),  # and PartitionNotFoundError
        ChannelNotFoundError: ErrorReply(404, "CHANNEL_NOT_FOUND"),
        ExitingError: ErrorReply(503, "EXITING"),
        TopicConflictError: ErrorReply(400, "TOPIC_ALREADY_EXIST"),
        ConsumeStartUnsupportedError: ErrorReply(500, YouzanText.UNSUPPORTED_OFFSET_TYPE),
        ConsumeStartError: ErrorReply(400, "{exc}"),
        InvalidOptionError: ErrorReply(400, "INVALID_OPTION"),
        InvalidValueError: ErrorReply(400, "INVALID_VALUE"),
        NoLookupdError: ErrorReply(503, "LOOKUPD_UNREACHABLE"),  # a topic to create: asked
        ForwardError: ErrorReply(500, "TOPIC_CREATE_FAILED", reason=True),  # lookupd refused
        BrokerError: _INTERNAL,
        StorageError: _INTERNAL,
        OSError: _INTERNAL,
    }
)

#: the partition refusals every publish shares (youzan's texts)
_PARTITION_REFUSALS: Final[Mapping[type[Exception], ErrorReply]] = {
    TopicNotFoundError: _TOPIC_NOT_EXIST,  # a partition the topic does not have
    BadPartitionError: ErrorReply(400, "E_BAD_PARTITION"),  # none named for an ordered topic
    NotWritableError: ErrorReply(400, "E_FAILED_ON_NOT_WRITABLE"),
    NotLeaderError: _NOT_LEADER,  # held here as a replica, or no partition led here
}

#: nsqd's ``/pub`` and ``/mpub`` (``503 EXITING`` for any put error, as ``doPUB``)
PUBLISH_ERRORS: Final = ErrorTable(
    {
        **_PARTITION_REFUSALS,
        ForwardError: ErrorReply(503, "E_PUB_FAILED {exc}", logged=True),
        BrokerError: ErrorReply(503, "EXITING", logged=True),
        StorageError: ErrorReply(503, "EXITING", logged=True),
        OSError: ErrorReply(503, "EXITING", logged=True),
    }
)

#: youzan's message and channel endpoints
YOUZAN_ERRORS: Final = ErrorTable(
    {
        TopicNotFoundError: _TOPIC_NOT_EXIST,
        ChannelNotFoundError: ErrorReply(404, "CHANNEL_NOT_FOUND"),
        NotLeaderError: _NOT_LEADER,
        PartitionNotConsumedError: ErrorReply(500, "{exc}"),
        OffsetNotKeptError: ErrorReply(404, "{exc}"),
    }
)

#: youzan's ``/pub_ext`` and ``/pubtrace`` (a failed put: ``503 <error text>``)
YOUZAN_PUBLISH_ERRORS: Final = ErrorTable(
    {
        **_PARTITION_REFUSALS,
        BrokerError: ErrorReply(503, "{exc}", fallback="EXITING", logged=True),
        StorageError: ErrorReply(503, "{exc}", fallback="EXITING", logged=True),
        OSError: ErrorReply(503, "{exc}", fallback="EXITING", logged=True),
    }
)

#: pnsq's ``/partitions``, ``/partition/read`` and ``/partition/offset``
RANGE_ERRORS: Final = ErrorTable(
    {
        PartitionNotFoundError: ErrorReply(404, "PARTITION_NOT_FOUND"),
        TopicNotFoundError: ErrorReply(404, "TOPIC_NOT_FOUND"),  # deleted in the meantime
        OffsetNotKeptError: ErrorReply(400, "OFFSET_OUT_OF_RANGE"),  # retention deleted it
        StorageError: _INTERNAL,
        OSError: _INTERNAL,
    }
)

#: pnsq's ``/consume``, ``/consume/ack`` and ``/consume/nack`` (the refusals that name the
#: leaders are answered by the handlers: the reply needs lookupd's answer)
CONSUME_ERRORS: Final = ErrorTable(
    {
        ExitingError: ErrorReply(503, "EXITING"),
        UnknownTokenError: ErrorReply(409, "TOKEN_INVALID"),
        LeaseEndedError: ErrorReply(409, "TOKEN_EXPIRED"),
        AckNotDurableError: ErrorReply(500, "ACK_NOT_DURABLE", reason=True, logged=True),
        NoLookupdError: ErrorReply(503, "LOOKUPD_UNREACHABLE"),
        ForwardError: ErrorReply(500, "TOPIC_CREATE_FAILED", reason=True),
        BrokerError: _INTERNAL,
        StorageError: _INTERNAL,
    }
)
