"""Consuming one channel on one connection: SUB, then RDY ``max_in_flight``, then iterate.

nsqd's RDY is a window (at most ``max_in_flight`` unanswered messages on the connection), not a
budget, so it is sent once; answering messages (FIN/REQ, or their timeout) makes room for more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Unpack, final

import trio

from protocol.commands import Rdy, Sub

from .connection import Connection, ConnectOptions, open_connection
from .errors import ConnectionClosedError, UnexpectedResponseError
from .message import Message as Message


@final
class Consumer:
    """Iterate to receive messages: ``async for msg in consumer: ...; await msg.finish()``.

    With ``auto_finish=True`` each message the loop body left unanswered is FINed when the next
    one is requested (and the last one when the block exits without an exception).

    Iteration ends when the consumer's connection was closed by the client; if nsqd or the
    network closed it, :class:`~client.errors.ConnectionClosedError` is raised.
    """

    def __init__(self, conn: Connection, topic: str, channel: str, *, auto_finish: bool) -> None:
        self.connection = conn
        self.topic = topic
        self.channel = channel
        self.auto_finish = auto_finish
        self.max_in_flight = 0
        self._last: Message | None = None

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        await self._finish_last()
        try:
            message = await self.connection.messages.receive()
        except trio.EndOfChannel:
            if self.connection.closed_locally:
                raise StopAsyncIteration from None
            raise ConnectionClosedError(
                f"connection to {self.connection.address} closed"
            ) from self.connection.close_reason
        self._last = message
        return message

    async def receive(self) -> Message:
        """The next message (like one step of ``async for``)."""
        return await self.__anext__()

    async def set_max_in_flight(self, count: int) -> None:
        """Send ``RDY count``; 0 pauses delivery."""
        self.max_in_flight = count
        await self.connection.send(Rdy(count))

    async def _finish_last(self) -> None:
        last, self._last = self._last, None
        if self.auto_finish and last is not None and not last.has_responded:
            await last.finish()


@asynccontextmanager
async def open_consumer(
    address: str,
    topic: str,
    channel: str,
    *,
    max_in_flight: int = 100,
    partition: int | None = None,
    auto_finish: bool = False,
    **options: Unpack[ConnectOptions],
) -> AsyncIterator[Consumer]:
    """Connect to ``address``, ``SUB topic channel [partition]``, ``RDY max_in_flight``.

    Raises:
        NsqError: nsqd refused IDENTIFY or SUB (with nsqd's text).
    """
    async with open_connection(address, **options) as conn:
        reply = await conn.command(Sub(topic, channel, partition))
        if reply != b"OK":
            raise UnexpectedResponseError(f"SUB: expected OK, got {reply[:64]!r}")
        consumer = Consumer(conn, topic, channel, auto_finish=auto_finish)
        await consumer.set_max_in_flight(max_in_flight)
        yield consumer
        if not conn.closed:
            await consumer._finish_last()
