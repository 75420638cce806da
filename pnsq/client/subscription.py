"""One subscription of a consumer: a connection to one partition's leader (or one unpartitioned
``SUB``), reconnected with backoff when lost, as youzan go-nsq keeps one connection per partition.

For ``SUB_ORDERED`` and ``SUB_ADVANCED`` nsqd puts a 12-byte detail block
``[u64 log offset][u32 raw size]`` between the id and the body
(:data:`protocol.message.MESSAGE_DETAIL`); it is stripped here and exposed as
:attr:`Message.offset` / :attr:`Message.raw_size`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final, final

import trio

from protocol.commands import Rdy, Sub, SubMode
from protocol.message import MESSAGE_DETAIL

from .connection import Connection, ConnectOptions, open_connection
from .errors import ConnectionClosedError, NsqError, UnexpectedResponseError
from .message import Message
from .routing import RETRYABLE_CODES

_log = logging.getLogger("pnsq.client")

RECONNECT_BACKOFF: Final = 0.25
MAX_RECONNECT_BACKOFF: Final = 10.0
_FAILURES = (OSError, ConnectionClosedError, NsqError, UnexpectedResponseError)


@dataclass(frozen=True, slots=True)
class SubscribeSpec:
    """What every subscription of one consumer shares."""

    topic: str
    channel: str
    mode: SubMode
    start: str | None  # SUB_ADVANCED consume start, sent on the first connection only
    reconnect: bool
    options: ConnectOptions = field(default_factory=lambda: ConnectOptions())


@final
class Subscription:
    """One partition's connection. :meth:`run` (a task) connects, subscribes and forwards
    messages to ``deliver`` until cancelled; see :class:`pnsq.client.consumer.Consumer`.

    Args:
        rdy: the RDY count to send after (re)subscribing.
        deliver: called with each message (detail block stripped).
        fail: called with the error that ends the subscription for good.
        locate: an async function giving the leader's TCP address again before a reconnect.
    """

    def __init__(
        self,
        spec: SubscribeSpec,
        partition: int | None,
        address: str,
        *,
        rdy: Callable[[], int],
        deliver: Callable[[Message], None],
        fail: Callable[[BaseException], None],
        locate: Callable[[int | None], Awaitable[str]] | None = None,
    ) -> None:
        self.spec = spec
        self.partition = partition
        self.address = address
        self.connection: Connection | None = None
        self.reconnects = 0
        self._closing = False
        self._rdy = rdy
        self._deliver = deliver
        self._fail = fail
        self._locate = locate

    async def set_rdy(self, count: int) -> None:
        """Send ``RDY count`` on the current connection, if it is open."""
        conn = self.connection
        if conn is not None and not conn.closed:
            with suppress(ConnectionClosedError):
                await conn.send(Rdy(count))

    async def aclose(self) -> None:
        """Flush what is queued (FINs) and close the connection; :meth:`run` then returns."""
        self._closing = True
        if self.connection is not None:
            await self.connection.aclose()

    def leader_moved(self, address: str) -> None:
        """The partition is led at ``address`` now (lookupd's word): a connection to another
        node is given up at once, and :meth:`run` reconnects to the leader. A leader that
        hangs or is cut off closes nothing and sends nothing (its successor is serving the
        partition meanwhile); what it had in flight is delivered again by the new leader."""
        conn = self.connection
        if conn is None or conn.closed or address == self.address:
            return
        reason = f"{self.spec.topic}/{self.partition} is led at {address} now"
        _log.warning("%s, not at %s: reconnecting", reason, self.address)
        conn.abandon(reason)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Subscribe; report started once the first ``SUB`` succeeded (its failure is raised to
        the starter); afterwards reconnect whenever the connection is lost."""
        first = True
        failures = 0
        while True:
            try:
                async with open_connection(self.address, **self.spec.options) as conn:
                    await self._subscribe(conn, first)
                    if first:
                        task_status.started()
                        first = False
                    failures = 0
                    async for message in conn.messages:
                        self._deliver(self._strip(message))
                    if self._closing:
                        return
                    reason = conn.close_reason
            except _FAILURES as exc:
                if first:
                    raise
                if isinstance(exc, UnexpectedResponseError) or (
                    isinstance(exc, NsqError) and exc.code not in RETRYABLE_CODES
                ):
                    self._fail(exc)
                    return
                reason = exc
            if not self.spec.reconnect:
                error = ConnectionClosedError(f"connection to {self.address} closed")
                error.__cause__ = reason
                self._fail(error)
                return
            failures += 1
            delay = min(RECONNECT_BACKOFF * 2 ** (failures - 1), MAX_RECONNECT_BACKOFF)
            _log.warning(
                "%s partition %s: connection lost (%s); reconnecting in %.2fs",
                self.spec.topic,
                self.partition,
                reason,
                delay,
            )
            await trio.sleep(delay)
            self.reconnects += 1
            if self._locate is not None:
                try:
                    self.address = await self._locate(self.partition)
                except (OSError, LookupError, NsqError) as exc:
                    _log.warning("lookup of %s failed: %s", self.spec.topic, exc)

    async def _subscribe(self, conn: Connection, first: bool) -> None:
        spec = self.spec
        start = spec.start if first and spec.mode is SubMode.ADVANCED else None
        reply = await conn.command(Sub(spec.topic, spec.channel, self.partition, spec.mode, start))
        if reply != b"OK":
            raise UnexpectedResponseError(f"{spec.mode.value}: expected OK, got {reply[:64]!r}")
        self.connection = conn
        await conn.send(Rdy(self._rdy()))

    def _strip(self, message: Message) -> Message:
        if self.spec.mode is SubMode.PLAIN:
            return message
        body = message.body
        if len(body) < MESSAGE_DETAIL.size:
            raise UnexpectedResponseError(f"message without its detail block: {body!r}")
        message.offset, message.raw_size = MESSAGE_DETAIL.unpack_from(body)
        message.body = body[MESSAGE_DETAIL.size :]
        return message
