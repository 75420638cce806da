"""The blocking consumer: :class:`pnsq.client.consumer.Consumer` run by Trio in a background
thread, handed to the caller's thread through a queue.

    with Consumer("127.0.0.1:4150", "orders", "billing", http_address="127.0.0.1:4151") as c:
        for message in c:
            handle(message.body)
            message.finish()

The caller's thread never runs Trio: it takes messages from a :class:`queue.Queue` that a task
of the background loop fills, and each answer (``finish`` / ``requeue`` / ``touch``) is a call
into that loop with :func:`trio.from_thread.run` that returns once the command is queued on the
message's connection. Everything the Trio consumer does (one connection per partition, ordered
and replay subscriptions, reconnects after a lost connection with the leader looked up again)
holds here too. Flow control is nsqd's RDY window: at most ``max_in_flight`` messages are
unanswered, so the queue stays that short.

This module imports Trio; :mod:`pnsq.client.blocking` imports it only when ``Consumer`` is
first used.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import suppress
from types import TracebackType
from typing import Any, Final, Self, final

import trio

from .consumer import Consumer as AsyncConsumer, open_consumer
from .errors import ConnectionClosedError
from .message import Message as AsyncMessage

#: How long :meth:`Consumer.close` waits for the background loop to flush FINs and stop.
_CLOSE_TIMEOUT: Final = 10.0
_END: Final = object()


@final
class Message:
    """One delivered message; answer it from any thread with :meth:`finish`, :meth:`requeue`
    or :meth:`touch` (each blocks until the command is queued on its connection).

    Attributes as :class:`pnsq.client.message.Message`: ``id``, ``attempts``, ``timestamp_ns``,
    ``body``, ``offset`` (ordered/advanced subscriptions), ``partition``, ``trace_id``.
    """

    __slots__ = ("_consumer", "_message")

    def __init__(self, message: AsyncMessage, consumer: Consumer) -> None:
        self._message = message
        self._consumer = consumer

    def __repr__(self) -> str:
        return f"Message(id={self.id.hex()}, attempts={self.attempts}, body={self.body[:32]!r})"

    @property
    def id(self) -> bytes:
        return self._message.id

    @property
    def attempts(self) -> int:
        return self._message.attempts

    @property
    def timestamp_ns(self) -> int:
        return self._message.timestamp_ns

    @property
    def body(self) -> bytes:
        return self._message.body

    @property
    def offset(self) -> int | None:
        return self._message.offset

    @property
    def partition(self) -> int:
        return self._message.partition

    @property
    def trace_id(self) -> int:
        return self._message.trace_id

    @property
    def has_responded(self) -> bool:
        return self._message.has_responded

    def finish(self) -> None:
        """FIN: the message is done.

        Raises:
            ConnectionClosedError: its connection is gone (nsqd will redeliver it).
        """
        self._consumer._call(self._message.finish)

    def requeue(self, delay_ms: int = 0) -> None:
        """REQ: deliver again after ``delay_ms`` (0 = at once), with ``attempts + 1``."""
        self._consumer._call(lambda: self._message.requeue(delay_ms))

    def touch(self) -> None:
        """TOUCH: reset the in-flight timeout to a fresh ``msg_timeout``."""
        self._consumer._call(self._message.touch)


@final
class Consumer:
    """Subscribe to ``topic``/``channel`` at nsqd ``address`` (TCP ``host:port``) and receive
    its messages in this thread. Arguments as :func:`pnsq.client.consumer.open_consumer`
    (``http_address``, ``lookupd_http_address``, ``partition``/``partitions``, ``ordered``,
    ``start``, ``max_in_flight``, ``reconnect``, connection options...).

    Iterate it (``for message in consumer``) or call :meth:`receive`; iteration ends when the
    consumer is closed, and raises the error that ended the subscription (e.g.
    :class:`~pnsq.client.errors.ConnectionClosedError` with ``reconnect=False``). Use it as a
    context manager, or call :meth:`close`. Messages left unanswered at close are redelivered.

    Raises:
        NsqError, OSError: the first subscription failed (raised by the constructor).
    """

    def __init__(self, address: str, topic: str, channel: str, **options: Any) -> None:
        self.topic = topic
        self.channel = channel
        self._messages: queue.Queue[object] = queue.Queue()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._closed = False
        self._consumer: AsyncConsumer | None = None
        self._thread = threading.Thread(
            target=trio.run,
            args=(self._main, address, topic, channel, options),
            name=f"pnsq-consumer-{topic}-{channel}",
            daemon=True,
        )
        self._thread.start()
        self._started.wait()
        if self._stop is None:  # the subscription failed
            self._thread.join()
            assert self._error is not None
            raise self._error

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Message]:
        while True:
            message = self.receive()
            if message is None:
                return
            yield message

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting at most ``timeout`` seconds (None: until one comes).

        Returns None after ``timeout``, or once the consumer is closed.

        Raises:
            the error that ended the subscription.
        """
        while True:
            try:
                item = self._messages.get(timeout=timeout)
            except queue.Empty:
                return None
            if item is _END:
                self._messages.put(_END)  # for the next caller
                if self._error is not None:
                    raise self._error
                return None
            assert isinstance(item, AsyncMessage)
            if not item.conn.closed:  # else nsqd redelivers it on another connection
                return Message(item, self)

    def set_max_in_flight(self, count: int) -> None:
        """Spread ``count`` over the connections (``RDY``); 0 pauses delivery."""
        consumer = self._consumer
        if consumer is None:
            raise ConnectionClosedError("the consumer is not running")
        self._call(lambda: consumer.set_max_in_flight(count))

    def close(self) -> None:
        """Stop receiving, flush queued FINs (at most 2 s) and close the connections.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        stop, token = self._stop, self._token
        if stop is not None and token is not None:
            with suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(stop.set, trio_token=token)
        self._thread.join(_CLOSE_TIMEOUT)

    # ------------------------------------------------------------------ the Trio side

    async def _main(self, address: str, topic: str, channel: str, options: dict[str, Any]) -> None:
        try:
            async with open_consumer(address, topic, channel, **options) as consumer:
                self._consumer = consumer
                self._token = trio.lowlevel.current_trio_token()
                self._stop = trio.Event()
                self._started.set()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, consumer, nursery.cancel_scope)
                    await self._stop.wait()
                    nursery.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._error = exc
        finally:
            self._messages.put(_END)
            self._started.set()

    async def _pump(self, consumer: AsyncConsumer, scope: trio.CancelScope) -> None:
        try:
            async for message in consumer:
                self._messages.put(message)
        except Exception as exc:  # noqa: BLE001 - handed to the caller's thread
            self._error = exc
        scope.cancel()  # the subscription ended: stop waiting for close()

    def _call(self, action: Callable[[], Awaitable[None]]) -> None:
        token = self._token
        if token is None:
            raise ConnectionClosedError("the consumer is not running")
        try:
            trio.from_thread.run(action, trio_token=token)
        except trio.RunFinishedError:
            raise ConnectionClosedError("the consumer is closed") from None
