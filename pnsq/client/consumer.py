"""Consuming a channel: one connection per partition (youzan go-nsq's model), or one plain
``SUB`` to a stock nsqd.

* ``SUB t c [p]`` by default; ``ordered=True``: ``SUB_ORDERED t c p`` (one message in flight
  per partition, delivered in log order); ``start=`` or ``advanced=True``:
  ``SUB_ADVANCED t c p [start]`` (a replay from a position). Ordered and advanced subscriptions
  get each message's partition offset (:attr:`Message.offset`).
* nsqd's RDY is a window (at most that many unanswered messages on a connection): each
  connection gets ``max_in_flight / connections`` (at least 1), sent once; answering messages
  (FIN/REQ, or their timeout) makes room for more.
* Iterate (``async for``) and answer each message, or hand a function to :meth:`Consumer.run`,
  which FINs on success, REQs on failure and backs off (RDY 0, pause, RDY 1) like go-nsq.
* A lost connection is re-established with backoff (``reconnect=True``); messages that came on
  it and were not answered are skipped, nsqd redelivers them. With the partitions' leaders
  known (``lookupd_http_address`` or ``http_address``) they are looked up again every
  :data:`LEADER_WATCH` seconds, and a subscription whose partition is led elsewhere now moves
  there: a leader that hangs or is cut off closes no connection. A connection silent for two
  heartbeat intervals is given up too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Final, Unpack, final

import trio

from protocol.commands import SubMode
from protocol.consume import ConsumeStart

from ._http import HTTPNode
from .connection import Connection, ConnectOptions, _raise_single
from .errors import ConnectionClosedError, NsqError, NsqHTTPError, PartitionsUnknownError
from .message import Message as Message
from .pool import Routes
from .subscription import SubscribeSpec, Subscription

_log = logging.getLogger("pnsq.client")

#: REQ delay per attempt after a handler failure (go-nsq: 90 s; shorter for tests and tools).
DEFAULT_REQUEUE_DELAY_MS: Final = 1000
_MAX_REQUEUE_DELAY_MS: Final = 60_000
#: Seconds between two lookups of the leaders of a consumer's partitions (one per consumer)
LEADER_WATCH: Final = 1.0

Handler = Callable[[Message], Awaitable[None]]


@final
class Consumer:
    """Receive messages of one channel. Create it with :func:`open_consumer`.

    With ``auto_finish=True`` each message the loop body left unanswered is FINed when the next
    one is requested (and the last one when the block exits without an exception).

    Iteration ends when the consumer is closed; with ``reconnect=False``, a connection closed by
    nsqd or the network raises :class:`~pnsq.client.errors.ConnectionClosedError`, and a
    reconnection
    that nsqd refuses raises nsqd's error.
    """

    def __init__(self, topic: str, channel: str, *, auto_finish: bool, ordered: bool) -> None:
        self.topic = topic
        self.channel = channel
        self.auto_finish = auto_finish
        self.ordered = ordered
        self.max_in_flight = 0
        self.subscriptions: list[Subscription] = []
        self.connection_count = 1  # how many subscriptions share max_in_flight
        self._send, self._receive = trio.open_memory_channel[Message](math.inf)
        self._error: BaseException | None = None
        self._last: Message | None = None
        self._backoff_level = 0

    @property
    def connection(self) -> Connection:
        """The first subscription's current connection (the only one of a single ``SUB``)."""
        conn = self.subscriptions[0].connection if self.subscriptions else None
        if conn is None:
            raise ConnectionClosedError("not subscribed")
        return conn

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        await self._finish_last()
        while True:
            try:
                message = await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                if self._error is not None:
                    raise self._error from None
                raise StopAsyncIteration from None
            if not message.conn.closed:  # else nsqd redelivers it on another connection
                self._last = message
                return message

    async def receive(self) -> Message:
        """The next message (like one step of ``async for``)."""
        return await self.__anext__()

    async def set_max_in_flight(self, count: int) -> None:
        """Spread ``count`` over the connections (``RDY``); 0 pauses delivery."""
        self.max_in_flight = count
        if not self._backoff_level:
            await self._set_rdy(self._rdy_per_connection())

    async def run(
        self,
        handler: Handler,
        *,
        max_attempts: int = 0,
        requeue_delay_ms: int = DEFAULT_REQUEUE_DELAY_MS,
        backoff: float = 0.1,
        max_backoff: float = 10.0,
    ) -> None:
        """Call ``handler`` for each message until the consumer closes.

        A message the handler did not answer is FINed when it returns, and REQed when it
        raises (after ``requeue_delay_ms * attempts``; at once on an ordered subscription, which
        must not skip it). Each failure pauses delivery (RDY 0) for ``backoff * 2**(level-1)``
        seconds, then resumes with RDY 1; each success lowers the level, and full RDY is back at
        level 0. With ``max_attempts`` > 0 a message delivered more often is FINed unhandled.
        """
        async for message in self:
            if max_attempts and message.attempts > max_attempts:
                _log.warning(
                    "giving up on message %s after %d attempts", message.id.hex(), max_attempts
                )
                await _answer(message.finish())
                continue
            try:
                await handler(message)
            except Exception:  # noqa: BLE001 - a failing handler is requeued, not fatal
                _log.exception("handler failed on message %s", message.id.hex())
                if not message.has_responded:
                    delay = 0
                    if not self.ordered:
                        delay = min(requeue_delay_ms * message.attempts, _MAX_REQUEUE_DELAY_MS)
                    await _answer(message.requeue(delay))
                await self._fail_backoff(backoff, max_backoff)
            else:
                if not message.has_responded:
                    await _answer(message.finish())
                if self._backoff_level:
                    self._backoff_level -= 1
                    if not self._backoff_level:
                        await self._set_rdy(self._rdy_per_connection())

    # ------------------------------------------------------------------ internals

    async def _fail_backoff(self, backoff: float, max_backoff: float) -> None:
        self._backoff_level += 1
        await self._set_rdy(0)
        await trio.sleep(min(backoff * 2 ** (self._backoff_level - 1), max_backoff))
        await self._set_rdy(1)

    def _rdy_per_connection(self) -> int:
        if self.max_in_flight <= 0:
            return 0
        return max(1, self.max_in_flight // max(1, self.connection_count))

    def _rdy(self) -> int:
        """What a (re)subscribed connection starts with."""
        return 1 if self._backoff_level else self._rdy_per_connection()

    async def _set_rdy(self, count: int) -> None:
        for sub in self.subscriptions:
            await sub.set_rdy(count)

    def _deliver(self, message: Message) -> None:
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(message)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._send.close()

    def _close(self) -> None:
        self._send.close()

    async def _finish_last(self) -> None:
        last, self._last = self._last, None
        if self.auto_finish and last is not None and not last.has_responded:
            await _answer(last.finish())


async def _answer(action: Awaitable[None]) -> None:
    """FIN/REQ, ignoring a connection that is gone (nsqd redelivers the message)."""
    with suppress(ConnectionClosedError):
        await action


def _mode(ordered: bool, advanced: bool, start: str | None) -> SubMode:
    if ordered:
        return SubMode.ORDERED
    if advanced or start is not None:
        return SubMode.ADVANCED
    return SubMode.PLAIN


@asynccontextmanager
async def open_consumer(
    address: str,
    topic: str,
    channel: str,
    *,
    max_in_flight: int = 100,
    partition: int | None = None,
    partitions: Sequence[int] | None = None,
    http_address: str | None = None,
    lookupd_http_address: str | None = None,
    ordered: bool = False,
    advanced: bool = False,
    start: ConsumeStart | str | None = None,
    auto_finish: bool = False,
    reconnect: bool = True,
    **options: Unpack[ConnectOptions],
) -> AsyncIterator[Consumer]:
    """Subscribe to ``topic``/``channel`` on nsqd at ``address`` (TCP ``host:port``).

    Partitions: ``partitions`` (one connection each), else ``partition``, else with
    ``http_address`` every partition of the topic (from ``GET /partitions``), or with
    ``lookupd_http_address`` every partition across a cluster, each at its leader (pnsq
    lookupd), else one unpartitioned ``SUB`` (nsqd's choice: every partition it leads).

    ``start`` (``ConsumeStart`` or ``"msgcount:0"``, ``"virtual_queue:<offset>"``,
    ``"timestamp:<s>"``, ``"special:-1"``) replays from that position: sent with
    ``SUB_ADVANCED``, or for an ordered subscription set first through
    ``POST /channel/setoffset`` (needs ``http_address``).

    Raises:
        NsqError: nsqd refused IDENTIFY or SUB (with nsqd's text).
        NsqHTTPError: nsqd refused the offset (ordered ``start``).
        OSError: a connection failed.
    """
    start_text = None if start is None else str(start)
    mode = _mode(ordered, advanced, start_text)
    routes = Routes(http_address, address, lookupd_http_address=lookupd_http_address)
    numbers: list[int | None]
    if partitions is not None:
        numbers = list(partitions)
    elif partition is not None:
        numbers = [partition]
    elif routes.known and (route := await routes.get(topic)) is not None:
        numbers = [info.partition for info in route.partitions]
    else:
        numbers = [None]
    if ordered and start_text is not None:
        await _set_offsets(http_address, topic, channel, numbers, start_text)

    async def locate(number: int | None, refresh: bool = True) -> str:
        route = await routes.get(topic, refresh=refresh)
        info = route.get(number) if route is not None and number is not None else None
        return info.tcp_address if info is not None else address

    consumer = Consumer(topic, channel, auto_finish=auto_finish, ordered=ordered)
    consumer.max_in_flight = max_in_flight
    consumer.connection_count = len(numbers)
    spec = SubscribeSpec(topic, channel, mode, start_text, reconnect, options)
    try:
        async with trio.open_nursery() as nursery:
            try:
                for number in numbers:
                    first = await locate(number, False) if routes.known else address
                    sub = Subscription(
                        spec,
                        number,
                        first,
                        rdy=consumer._rdy,
                        deliver=consumer._deliver,
                        fail=consumer._fail,
                        locate=locate if routes.known else None,
                    )
                    consumer.subscriptions.append(sub)
                    await nursery.start(sub.run)
                if routes.known:
                    nursery.start_soon(_watch_leaders, routes, topic, consumer.subscriptions)
                yield consumer
                await consumer._finish_last()
            finally:
                consumer._close()
                with trio.CancelScope(shield=True):
                    for sub in consumer.subscriptions:
                        await sub.aclose()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        _raise_single(group)
        raise


async def _watch_leaders(routes: Routes, topic: str, subscriptions: list[Subscription]) -> None:
    """Look the topic's leaders up every :data:`LEADER_WATCH` seconds and move each
    subscription whose partition is led elsewhere now (:meth:`Subscription.leader_moved`): a
    leader that hangs or is cut off gives its consumers no sign, while lookupd has promoted
    another within seconds."""
    while True:
        await trio.sleep(LEADER_WATCH)
        try:
            route = await routes.get(topic, refresh=True)
        except (OSError, LookupError, ValueError, NsqError, NsqHTTPError) as exc:
            _log.debug("lookup of %s failed: %s", topic, exc)  # (the next one may not)
            continue
        if route is None:
            continue
        for sub in subscriptions:
            info = route.get(sub.partition) if sub.partition is not None else None
            if info is not None:
                sub.leader_moved(info.tcp_address)


async def _set_offsets(
    http_address: str | None, topic: str, channel: str, numbers: list[int | None], start: str
) -> None:
    if http_address is None:
        raise PartitionsUnknownError("an ordered replay start needs nsqd's HTTP address")
    node = HTTPNode(http_address)
    try:
        for number in numbers:
            set_offset = partial(node.set_channel_offset, topic, number or 0, channel, start)
            await trio.to_thread.run_sync(set_offset)
    finally:
        node.close()
