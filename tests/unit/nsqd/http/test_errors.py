"""The HTTP error table: each mapped class gives its reply, the most specific class wins, and
an error no entry covers propagates out of the app instead of being answered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nsqd.broker import BrokerConfig, StorageError, open_broker
from nsqd.broker.pull import AckNotDurableError
from nsqd.cluster.forwarding import ForwardError, NoLookupdError
from nsqd.config.runtime import InvalidOptionError, InvalidValueError
from nsqd.core.errors import (
    BadPartitionError,
    BrokerError,
    ChannelNotFoundError,
    ConsumeStartUnsupportedError,
    ExitingError,
    NotEnoughReplicasError,
    NotLeaderError,
    NotWritableError,
    OffsetNotKeptError,
    PartitionNotConsumedError,
    PartitionNotFoundError,
    TopicConflictError,
    TopicNotFoundError,
)
from nsqd.core.leases import LeaseEndedError, UnknownTokenError
from nsqd.http.api import NsqdHTTP
from nsqd.http.base import Reply, Request, Route
from nsqd.http.context import HTTPContext, HTTPSettings
from nsqd.http.errors import (
    ADMIN_ERRORS,
    CONSUME_ERRORS,
    NO_ERRORS,
    PUBLISH_ERRORS,
    RANGE_ERRORS,
    YOUZAN_ERRORS,
    YOUZAN_PUBLISH_ERRORS,
    ErrorTable,
)
from protocol.consume import ConsumeStartError

TABLES = {
    "admin": ADMIN_ERRORS,
    "publish": PUBLISH_ERRORS,
    "youzan": YOUZAN_ERRORS,
    "youzan-publish": YOUZAN_PUBLISH_ERRORS,
    "range": RANGE_ERRORS,
    "consume": CONSUME_ERRORS,
}

CASES = [
    # nsqd 1.3.0's administrative endpoints
    ("admin", TopicNotFoundError("t"), 404, "TOPIC_NOT_FOUND"),
    ("admin", PartitionNotFoundError("t"), 404, "TOPIC_NOT_FOUND"),  # via its base class
    ("admin", ChannelNotFoundError("c"), 404, "CHANNEL_NOT_FOUND"),
    ("admin", ExitingError(), 503, "EXITING"),
    ("admin", TopicConflictError("t"), 400, "TOPIC_ALREADY_EXIST"),
    ("admin", ConsumeStartUnsupportedError("special:5"), 500, "not supported offset type"),
    ("admin", ConsumeStartError("bad start"), 400, "bad start"),
    ("admin", InvalidOptionError("x"), 400, "INVALID_OPTION"),
    ("admin", InvalidValueError("x"), 400, "INVALID_VALUE"),
    ("admin", NoLookupdError("down"), 503, "LOOKUPD_UNREACHABLE"),  # /topic/create in a cluster
    ("admin", ForwardError("refused"), 500, "TOPIC_CREATE_FAILED"),
    ("admin", NotLeaderError("t"), 500, "INTERNAL_ERROR"),
    ("admin", StorageError("disk"), 500, "INTERNAL_ERROR"),
    ("admin", OSError(5, "EIO"), 500, "INTERNAL_ERROR"),
    # nsqd's /pub and /mpub: doPUB answers any put error with 503 EXITING
    ("publish", ExitingError(), 503, "EXITING"),
    ("publish", StorageError("disk"), 503, "EXITING"),
    ("publish", OSError(28, "ENOSPC"), 503, "EXITING"),
    ("publish", PartitionNotFoundError("t"), 404, "E_TOPIC_NOT_EXIST"),
    ("publish", BadPartitionError("t"), 400, "E_BAD_PARTITION"),
    ("publish", NotWritableError("t"), 400, "E_FAILED_ON_NOT_WRITABLE"),
    ("publish", NotEnoughReplicasError("t"), 400, "E_FAILED_ON_NOT_WRITABLE"),
    ("publish", NotLeaderError("t"), 400, "E_FAILED_ON_NOT_LEADER"),
    ("publish", ForwardError("leader gone"), 503, "E_PUB_FAILED leader gone"),
    ("publish", NoLookupdError("no lookupd"), 503, "E_PUB_FAILED no lookupd"),
    # youzan's endpoints
    ("youzan", TopicNotFoundError("t"), 404, "E_TOPIC_NOT_EXIST"),
    ("youzan", ChannelNotFoundError("c"), 404, "CHANNEL_NOT_FOUND"),
    ("youzan", NotLeaderError("t"), 400, "E_FAILED_ON_NOT_LEADER"),
    ("youzan", PartitionNotConsumedError("not here"), 500, "not here"),
    ("youzan", OffsetNotKeptError("gone"), 404, "gone"),
    ("youzan-publish", TopicNotFoundError("t"), 404, "E_TOPIC_NOT_EXIST"),
    ("youzan-publish", ExitingError(), 503, "exiting"),
    ("youzan-publish", BrokerError(), 503, "EXITING"),  # no text: nsqd's word
    ("youzan-publish", StorageError("disk full"), 503, "disk full"),
    ("youzan-publish", BadPartitionError("t"), 400, "E_BAD_PARTITION"),
    ("youzan-publish", NotWritableError("t"), 400, "E_FAILED_ON_NOT_WRITABLE"),
    ("youzan-publish", NotLeaderError("t"), 400, "E_FAILED_ON_NOT_LEADER"),
    # pnsq's range reads and consume
    ("range", PartitionNotFoundError("t"), 404, "PARTITION_NOT_FOUND"),
    ("range", TopicNotFoundError("t"), 404, "TOPIC_NOT_FOUND"),
    ("range", OffsetNotKeptError("gone"), 400, "OFFSET_OUT_OF_RANGE"),
    ("range", StorageError("disk"), 500, "INTERNAL_ERROR"),
    ("consume", ExitingError(), 503, "EXITING"),
    ("consume", UnknownTokenError("x"), 409, "TOKEN_INVALID"),
    ("consume", LeaseEndedError("x"), 409, "TOKEN_EXPIRED"),
    ("consume", NoLookupdError("none"), 503, "LOOKUPD_UNREACHABLE"),
    ("consume", ForwardError("refused"), 500, "TOPIC_CREATE_FAILED"),
    ("consume", StorageError("disk"), 500, "INTERNAL_ERROR"),
    ("consume", AckNotDurableError("fsync failed"), 500, "ACK_NOT_DURABLE"),
]


@pytest.mark.parametrize(
    ("table", "exc", "status", "message"),
    CASES,
    ids=[f"{t}-{type(e).__name__}" for t, e, _, _ in CASES],
)
def test_each_mapped_class_gives_its_reply(
    table: str, exc: Exception, status: int, message: str
) -> None:
    error = TABLES[table].error_for(exc, "test")
    assert (error.status, error.message) == (status, message)


def test_every_entry_is_covered_by_a_case() -> None:
    covered = {(t, cls) for t, e, _, _ in CASES for cls in type(e).__mro__}
    missing = [
        (name, cls.__name__)
        for name, table in TABLES.items()
        for cls in table.replies
        if (name, cls) not in covered and cls not in (BrokerError, OSError)
    ]
    assert missing == []


def test_reasons_go_into_the_body() -> None:
    error = CONSUME_ERRORS.error_for(AckNotDurableError("fsync failed"), "test")
    assert (error.status, error.message) == (500, "ACK_NOT_DURABLE")
    assert error.details == {"reason": "fsync failed"}
    error = CONSUME_ERRORS.error_for(ForwardError("refused"), "test")
    assert error.details == {"reason": "refused"}


@pytest.mark.parametrize(
    ("table", "exc"),
    [
        (NO_ERRORS, StorageError("disk")),
        (RANGE_ERRORS, NotLeaderError("t")),  # a BrokerError the range table does not map
        (CONSUME_ERRORS, OSError(5, "EIO")),
        (YOUZAN_ERRORS, StorageError("disk")),
        (ADMIN_ERRORS, KeyError("bug")),
        (PUBLISH_ERRORS, ValueError("bug")),
    ],
)
def test_an_unmapped_error_is_not_swallowed(table: ErrorTable, exc: Exception) -> None:
    assert table.reply_for(exc) is None
    assert not isinstance(exc, table.handled)
    with pytest.raises(type(exc)) as raised:
        table.error_for(exc, "test")
    assert raised.value is exc


# --------------------------------------------------------------------------- the dispatcher


async def _call(app: NsqdHTTP, path: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "GET", "query_string": b"", "headers": []}
    await app(scope, receive, send)
    return sent


async def test_the_dispatcher_answers_mapped_and_propagates_unmapped(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        app = NsqdHTTP(HTTPContext(broker, HTTPSettings()))

        async def missing_topic(request: Request) -> Reply:
            raise TopicNotFoundError(request.path)

        async def bug(request: Request) -> Reply:
            raise LookupError("a bug")

        app.routes["/mapped"] = Route({"GET": missing_topic}, ADMIN_ERRORS)
        app.routes["/unmapped"] = Route({"GET": bug}, ADMIN_ERRORS)
        sent = await _call(app, "/mapped")
        assert sent[0]["status"] == 404
        assert json.loads(sent[1]["body"]) == {"message": "TOPIC_NOT_FOUND"}
        with pytest.raises(LookupError, match="a bug"):
            await _call(app, "/unmapped")
        assert app._busy == 0  # the request is no longer counted
