"""pnsq's Python client: a partition-aware producer and consumer on Trio, and a small blocking
client (:mod:`pnsq.client.blocking`) for tools and Spark executors.

    async with open_producer("127.0.0.1:4150", http_address="127.0.0.1:4151") as producer:
        await producer.publish("topic", b"body", key="user-42")

    async with open_consumer("127.0.0.1:4150", "topic", "channel") as consumer:
        async for message in consumer:
            await message.finish()

The client speaks to nsqd only through :mod:`protocol` (encoders, the frame decoder, the
range-read codec). Names are imported on first use, so ``import pnsq.client.blocking`` does not
import Trio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .blocking import BlockingClient as BlockingClient
    from .connection import (
        Connection as Connection,
        ConnectOptions as ConnectOptions,
        open_connection as open_connection,
    )
    from .consumer import Consumer as Consumer, open_consumer as open_consumer
    from .errors import (
        ConnectionClosedError as ConnectionClosedError,
        NsqError as NsqError,
        NsqHTTPError as NsqHTTPError,
        PartitionsUnknownError as PartitionsUnknownError,
        ReplyTimeoutError as ReplyTimeoutError,
        UnexpectedResponseError as UnexpectedResponseError,
    )
    from .message import Message as Message
    from .producer import Producer as Producer, open_producer as open_producer
    from .routing import (
        PartitionInfo as PartitionInfo,
        TopicPartitions as TopicPartitions,
        partition_for_key as partition_for_key,
    )

_EXPORTS = {
    "BlockingClient": "blocking",
    "ConnectOptions": "connection",
    "Connection": "connection",
    "ConnectionClosedError": "errors",
    "Consumer": "consumer",
    "Message": "message",
    "NsqError": "errors",
    "NsqHTTPError": "errors",
    "PartitionInfo": "routing",
    "PartitionsUnknownError": "errors",
    "Producer": "producer",
    "ReplyTimeoutError": "errors",
    "TopicPartitions": "routing",
    "UnexpectedResponseError": "errors",
    "open_connection": "connection",
    "open_consumer": "consumer",
    "open_producer": "producer",
    "partition_for_key": "routing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
