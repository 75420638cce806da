"""One protocol V2 connection to nsqd, on Trio.

:func:`open_connection` opens TCP, sends the magic and IDENTIFY, and runs two tasks for the life
of the ``async with`` block: a reader that decodes frames (:mod:`protocol.client_frames`),
answers heartbeats with NOP, hands replies to waiting :meth:`Connection.command` calls in FIFO
order and messages to :attr:`Connection.messages`; and a writer that sends everything queued in
one ``send_all`` (FINs of a busy consumer and concurrent publishes leave together).

Reply matching is FIFO: nsqd answers the commands that have a reply (IDENTIFY, AUTH, SUB, the
PUB family, CLS) in order, and never answers RDY/FIN/REQ/TOUCH/NOP except with the non-fatal
E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED, which are therefore not matched to a waiter.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypedDict, final

import trio
from trio.lowlevel import ParkingLot

from protocol.client_frames import ErrorFrame, FrameDecoder, MessageFrame, Response, ServerFrame
from protocol.commands import Command, Identify, Nop
from protocol.encode import encode_command
from protocol.errors import ErrorCode, ProtocolError
from protocol.frames import HEARTBEAT_DATA, MAGIC_V2
from protocol.parser import NEED_DATA

from .errors import ConnectionClosedError, NsqError, ReplyTimeoutError, printable
from .identify import identify_body, parse_features
from .message import Message
from .routing import parse_address as parse_address

_log = logging.getLogger("pnsq.client")

_READ_SIZE: Final = 64 * 1024
_NOP: Final = encode_command(Nop())
#: ``send()`` waits for the writer once this many bytes are queued (back-pressure).
_HIGH_WATER: Final = 1024 * 1024
#: The writer waits up to this many scheduling rounds / seconds for more bytes before a send,
#: and stops waiting once ``_COALESCE_IDLE_ROUNDS`` rounds in a row added nothing (two, because
#: a consumer loop passes two schedule points per message: receive, then FIN).
_COALESCE_ROUNDS: Final = 32
_COALESCE_IDLE_ROUNDS: Final = 2
_COALESCE_SECONDS: Final = 0.002
_CLOSE_DRAIN_SECONDS: Final = 2.0
#: Seconds a command may wait for its reply before the connection is given up (go-nsq's
#: default read timeout: a live nsqd sends something at least every heartbeat interval).
DEFAULT_REPLY_TIMEOUT: Final = 60.0
#: Errors answering a command that has no success reply; never matched to a waiting command.
_UNSOLICITED: Final = frozenset(
    {ErrorCode.FIN_FAILED.value, ErrorCode.REQ_FAILED.value, ErrorCode.TOUCH_FAILED.value}
)


class ConnectOptions(TypedDict, total=False):
    """The keyword options of :func:`open_connection`, for wrappers that pass them on."""

    client_id: str
    heartbeat_interval_ms: int
    msg_timeout_ms: int | None
    feature_negotiation: bool
    identify_extra: dict[str, Any] | None
    reply_timeout: float | None


@final
class _Pending:
    """A command waiting for its reply frame."""

    __slots__ = ("data", "error", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.data = b""
        self.error: BaseException | None = None

    def resolve(self, data: bytes) -> None:
        self.data = data
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()


@final
class Connection:
    """One V2 connection. Create it with :func:`open_connection`.

    Attributes:
        address: ``host:port`` it is connected to.
        features: nsqd's IDENTIFY reply (``max_rdy_count``, ``msg_timeout``, ``version``…), or
            ``{}`` when feature negotiation was off.
        messages: delivered messages, in arrival order (unbounded: RDY bounds it).
        failed_acks: count of E_FIN_FAILED / E_REQ_FAILED / E_TOUCH_FAILED received.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        address: str,
        reply_timeout: float | None = DEFAULT_REPLY_TIMEOUT,
        read_timeout: float | None = None,
    ) -> None:
        self.address = address
        self.reply_timeout = reply_timeout
        #: seconds of silence from nsqd after which the connection is given up (None: never)
        self.read_timeout = read_timeout
        self.features: dict[str, Any] = {}
        self.failed_acks = 0
        self._stream = stream
        self._decoder = FrameDecoder()
        self._pending: deque[_Pending] = deque()
        self._out = bytearray()
        self._sending = False
        self._wake = ParkingLot()
        self._idle = ParkingLot()
        self._scope = trio.CancelScope()
        self._message_send, self.messages = trio.open_memory_channel[Message](math.inf)
        self._closed = False
        self._closed_locally = False
        self._close_reason: BaseException | None = None
        self._last_error: NsqError | None = None

    # ------------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (by :meth:`aclose`, by nsqd, or broken)."""
        return self._closed

    @property
    def closed_locally(self) -> bool:
        """Whether it was closed by :meth:`aclose` rather than by nsqd or the network."""
        return self._closed_locally

    @property
    def close_reason(self) -> BaseException | None:
        """Why it closed: nsqd's last fatal error, the transport error, or the local close."""
        return self._close_reason

    async def command(self, cmd: Command) -> bytes:
        """Send ``cmd`` and wait for its reply frame's data (``OK``, JSON, a traced reply…).

        If cancelled while waiting, the command may still take effect on nsqd.

        Raises:
            NsqError: nsqd answered with an error frame (its text, verbatim).
            ReplyTimeoutError: no reply within ``reply_timeout`` seconds: the connection is
                closed (replies are matched in order, so a late one could not be placed) and
                every command waiting on it fails the same way; the command may have taken
                effect.
            ConnectionClosedError: the connection closed before the reply arrived.
        """
        return await self._request(encode_command(cmd))

    async def send(self, cmd: Command) -> None:
        """Queue a command that has no reply (RDY, FIN, REQ, TOUCH, NOP). Waits first only while
        the output buffer is over its high-water mark; cancelled, it has queued nothing.

        Raises:
            ConnectionClosedError: the connection is closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while len(self._out) > _HIGH_WATER:
            self._check_open()
            await self._idle.park()
        self.send_nowait(cmd)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def send_nowait(self, cmd: Command) -> None:
        """Queue a command that has no reply, without waiting."""
        self._queue(encode_command(cmd))

    async def drain(self) -> None:
        """Wait until everything queued so far has been handed to the socket."""
        while self._out or self._sending:
            self._check_open()
            self._wake.unpark_all()
            await self._idle.park()
        self._check_open()
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Flush what is queued (for at most 2 s), then close. Idempotent."""
        if not self._closed:
            with trio.move_on_after(_CLOSE_DRAIN_SECONDS, shield=True):
                with suppress(ConnectionClosedError):
                    await self.drain()
            self._closed_locally = not self._closed
            self._shutdown(ConnectionClosedError("connection closed by the client"))
        await self._stream.aclose()

    def abandon(self, reason: str) -> None:
        """Close at once, sending nothing more (the peer is taken for gone: what is queued
        could not reach it, and waiting for it to take it could wait forever)."""
        self._shutdown(ConnectionClosedError(reason))

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionClosedError(f"connection to {self.address} is closed") from (
                self._close_reason
            )

    def _queue(self, data: bytes) -> None:
        self._check_open()
        self._out += data
        self._wake.unpark_all()

    async def _request(self, data: bytes) -> bytes:
        # Cancelled before this point nothing is sent; cancelled while waiting for the reply, the
        # command was sent and its reply is still consumed (FIFO matching stays aligned).
        await trio.lowlevel.checkpoint_if_cancelled()
        self._queue(data)
        pending = _Pending()
        self._pending.append(pending)
        timeout = self.reply_timeout
        with trio.move_on_after(math.inf if timeout is None else timeout) as waited:
            await pending.event.wait()
        if waited.cancelled_caught and not pending.event.is_set():
            self._shutdown(
                ReplyTimeoutError(f"no reply from {self.address} within {timeout:g}s"),
                reply_timeout=True,
            )
        if pending.error is not None:
            raise pending.error
        return pending.data

    async def _identify(self, body: dict[str, Any]) -> None:
        reply = await self._request(MAGIC_V2 + encode_command(Identify(json.dumps(body).encode())))
        self.features = parse_features(reply)

    def _shutdown(self, reason: BaseException, *, reply_timeout: bool = False) -> None:
        """Mark closed, fail every waiter (with a :class:`ReplyTimeoutError` when a reply was
        overdue), end the message channel, stop the tasks."""
        if self._closed:
            return
        self._closed = True
        self._close_reason = self._last_error or reason
        kind = ReplyTimeoutError if reply_timeout else ConnectionClosedError
        while self._pending:
            error = kind(f"connection to {self.address} closed: {reason}")
            error.__cause__ = self._close_reason
            self._pending.popleft().fail(error)
        self._message_send.close()
        self._scope.cancel()
        self._wake.unpark_all()
        self._idle.unpark_all()

    async def _run(self) -> None:
        with self._scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._reader)
                nursery.start_soon(self._writer)

    async def _reader(self) -> None:
        decoder = self._decoder
        silence = math.inf if self.read_timeout is None else self.read_timeout
        try:
            while True:
                with trio.move_on_after(silence) as waited:
                    data = await self._stream.receive_some(_READ_SIZE)
                if waited.cancelled_caught:
                    # a live nsqd sends at least a heartbeat per interval: a hung or cut-off
                    # one sends nothing and closes nothing (go-nsq's ReadTimeout)
                    raise ConnectionClosedError(
                        f"nothing from nsqd at {self.address} for {silence:g}s"
                    )
                if not data:
                    raise ConnectionClosedError(f"nsqd at {self.address} closed the connection")
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    self._dispatch(frame)
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            ProtocolError,
            ConnectionClosedError,
        ) as exc:
            self._shutdown(exc)

    def _dispatch(self, frame: ServerFrame) -> None:
        match frame:
            case MessageFrame(timestamp_ns=ts, attempts=attempts, message_id=mid, body=body):
                message = Message(mid, attempts, ts, body, self)
                try:
                    self._message_send.send_nowait(message)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    _log.debug("message %r dropped: nobody receives", mid)
            case Response(data=data):
                if data == HEARTBEAT_DATA:
                    self._queue(_NOP)
                elif self._pending:
                    self._pending.popleft().resolve(data)
                else:
                    raise ProtocolError(f"unexpected response {data[:64]!r}")
            case ErrorFrame(text=text):
                error = NsqError(text)
                if error.code in _UNSOLICITED:
                    self.failed_acks += 1
                    _log.warning("%s: %s", self.address, printable(text))
                    return
                if error.fatal:
                    self._last_error = error
                if self._pending:
                    self._pending.popleft().fail(error)
                else:
                    _log.error("%s: %s", self.address, printable(text))

    async def _writer(self) -> None:
        try:
            while True:
                while not self._out:
                    self._idle.unpark_all()
                    await self._wake.park()
                await self._coalesce()
                data, self._out = self._out, bytearray()
                self._sending = True
                await self._stream.send_all(data)
                self._sending = False
                self._idle.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._shutdown(exc)

    async def _coalesce(self) -> None:
        """Let other tasks add to the buffer while they still do, within a small bound."""
        start = trio.current_time()
        idle = 0
        for _ in range(_COALESCE_ROUNDS):
            queued = len(self._out)
            await trio.lowlevel.checkpoint()
            idle = idle + 1 if len(self._out) == queued else 0
            if (
                idle >= _COALESCE_IDLE_ROUNDS
                or len(self._out) >= _HIGH_WATER
                or trio.current_time() - start >= _COALESCE_SECONDS
            ):
                return


@asynccontextmanager
async def open_connection(
    address: str,
    *,
    client_id: str = "pnsq-client",
    heartbeat_interval_ms: int = 30_000,
    msg_timeout_ms: int | None = None,
    feature_negotiation: bool = True,
    identify_extra: dict[str, Any] | None = None,
    reply_timeout: float | None = DEFAULT_REPLY_TIMEOUT,
) -> AsyncIterator[Connection]:
    """Connect to nsqd at ``address`` (``host:port``), IDENTIFY, and yield the connection.

    The reader and writer tasks live until the block exits; on exit queued commands are flushed
    (for at most 2 s) and the socket is closed. A command whose reply takes longer than
    ``reply_timeout`` seconds (None: no bound) closes the connection
    (:meth:`Connection.command`), and so do two heartbeat intervals without a byte from nsqd
    (as go-nsq's read timeout: nsqd sends a heartbeat every interval).

    Raises:
        OSError: the TCP connection failed.
        NsqError: nsqd rejected IDENTIFY.
    """
    host, port = parse_address(address)
    stream = await trio.open_tcp_stream(host, port)
    # two heartbeat intervals without a byte: nsqd is gone (hung, or cut off) or deaf to us
    silence = 2 * heartbeat_interval_ms / 1000 if heartbeat_interval_ms > 0 else None
    conn = Connection(stream, address, reply_timeout, silence)
    body = identify_body(
        client_id, heartbeat_interval_ms, msg_timeout_ms, feature_negotiation, identify_extra
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._run)
            try:
                await conn._identify(body)
                yield conn
            finally:
                await conn.aclose()
    except BaseExceptionGroup as group:
        _raise_single(group)
        raise


def _raise_single(group: BaseExceptionGroup[BaseException]) -> None:
    """Re-raise the only exception of ``group`` (the body's), unwrapped, with its own context."""
    if len(group.exceptions) != 1 or isinstance(group.exceptions[0], BaseExceptionGroup):
        return
    exc = group.exceptions[0]
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context
