"""pnsq's Python client, on Trio: connections, a producer and a consumer for protocol V2.

    async with open_producer("127.0.0.1:4150") as producer:
        await producer.publish("topic", b"body")

    async with open_consumer("127.0.0.1:4150", "topic", "channel") as consumer:
        async for message in consumer:
            await message.finish()

The client speaks to nsqd only through :mod:`protocol` (encoders and the frame decoder).
"""

from .connection import (
    Connection as Connection,
    ConnectOptions as ConnectOptions,
    open_connection as open_connection,
)
from .consumer import Consumer as Consumer, open_consumer as open_consumer
from .errors import (
    ConnectionClosedError as ConnectionClosedError,
    NsqError as NsqError,
    UnexpectedResponseError as UnexpectedResponseError,
)
from .message import Message as Message
from .producer import Producer as Producer, open_producer as open_producer

__all__ = [
    "ConnectOptions",
    "Connection",
    "ConnectionClosedError",
    "Consumer",
    "Message",
    "NsqError",
    "Producer",
    "UnexpectedResponseError",
    "open_connection",
    "open_consumer",
    "open_producer",
]
