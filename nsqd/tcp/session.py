"""One protocol V2 client connection: the Trio shell around :class:`protocol.CommandParser`.

Four tasks share a nursery: the command loop (read, parse, act), the message pump (deliver
while RDY allows), the output writer and the timers (heartbeats, deadlines). When the client
closes, the loop releases the socket at once and the other tasks return by themselves, without
being cancelled: cancelling costs several times more, and when thousands of clients leave at
once that cost decided how long their descriptors stayed open. Commands are handled strictly
in order, so responses come back in command order as go-nsq and pynsq require. IDENTIFY and its
stream upgrades are :mod:`nsqd.tcp.negotiation`; AUTH and the permission checks are
:mod:`nsqd.tcp.auth`; SUB, FIN/REQ/TOUCH and the message pump are :mod:`nsqd.tcp.consuming`.
This module is the connection's lifecycle: its tasks, the command loop and dispatch.
"""

from __future__ import annotations

import logging

import trio
from trio.lowlevel import ParkingLot

from pnsq._netio.plain_stream import PlainSocketStream
from protocol import (
    NEED_DATA,
    Auth,
    ClientError,
    Cls,
    CommandParser,
    ConnectionAbort,
    Dpub,
    ErrorCode,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    Touch,
    frames,
)
from protocol.errors import YouzanText

from ..broker import Broker
from ..broker.creation import create_partition
from ..core.tags import ExtFilter
from . import negotiation
from .auth import SessionAuth
from .consuming import Consuming
from .errors import HANDLED_ERRORS
from .output import OutputBuffer
from .publishing import Publisher
from .reactor import PublishReactor
from .reactor_side import ReactorSide
from .settings import RECEIVE_SIZE, SessionSettings
from .statistics import ClientStatistics, client_statistics

log = logging.getLogger("nsqd.session")


class Session(Consuming, ReactorSide):
    """State and tasks of one client connection (its consumer side: :class:`Consuming`; its
    side of the publish reactor: :class:`ReactorSide`)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        broker: Broker,
        settings: SessionSettings,
        remote_address: str,
        reactor: PublishReactor | None = None,
    ) -> None:
        self.stream = stream
        # the connection's socket (under any TLS or compression layer), closed at the peer's EOF
        self._socket = stream.socket if isinstance(stream, PlainSocketStream) else None
        self.broker = broker
        self.settings = settings
        self.remote_address = remote_address
        self.parser = CommandParser(settings.parser)
        self.parser.tls_required = settings.tls_required
        limits = settings.identify
        self.client_id = self.hostname = remote_address.rsplit(":", 1)[0]
        self.auth = SessionAuth(settings.auth, self.client_id) if settings.auth else None
        self.tls = self.snappy = self.deflate = False
        self.deflate_level = 0
        self.user_agent = ""
        self.heartbeat_interval = limits.default_heartbeat_interval_ms / 1000
        self.msg_timeout_ns = limits.default_msg_timeout_ms * 1_000_000
        self.output_buffer_timeout = limits.default_output_buffer_timeout_ms / 1000
        self.sample_rate = 0
        self.extend_support = False  # IDENTIFY extend_support (youzan ext topics)
        #: youzan's IDENTIFY desired_tag and ext_filter (ext topics, :mod:`nsqd.core.tags`)
        self.desired_tag = ""
        self.ext_filter: ExtFilter | None = None
        self.clock = broker.clock
        self.output = OutputBuffer(stream, broker.clock)
        self.publisher = Publisher(broker, self.output, settings.forwarder)
        self._init_consuming()
        self.connect_time = int(self.clock.now())
        self._last_read = self.clock.monotonic()
        self._timer_lot = ParkingLot()  # the timers task waits here for its next deadline
        self._timers_restarted = False  # IDENTIFY changed the heartbeat interval
        self._ended = False  # the client closed: the tasks return
        self._nursery: trio.Nursery | None = None
        self._init_reactor_side(reactor)

    def statistics(self) -> ClientStatistics:
        """This connection's frozen record for ``/stats`` and ``/metrics``."""
        return client_statistics(self)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, initial: bytes = b"") -> None:
        """Serve the connection until the client leaves, breaks the protocol or times out.

        ``initial``: bytes the listener already read after the magic (pipelined commands).
        """
        self.parser.receive_data(initial)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self.output.run)
                nursery.start_soon(self._timers, nursery.cancel_scope)
                if await self._read_loop():
                    self._end_tasks()
                else:
                    nursery.cancel_scope.cancel()
        finally:
            if self.channel is not None:
                self.broker.unsubscribe(self.channel, self)
                self.channel.notify()  # messages held for our tag go to the others

    async def _read_loop(self) -> bool:
        """Read and handle commands; True when the client closed, False when we close."""
        parser, output = self.parser, self.output
        while True:
            data: bytes | bytearray | None = None
            if parser.buffered or self.handed is not None or self.publisher.gathering:
                if not await self._process():
                    return False
                stream = self.stream  # IDENTIFY may have upgraded it
                if await output.send_pending() and isinstance(stream, PlainSocketStream):
                    # the send yielded: take the client's next command without yielding again
                    data = stream.receive_nowait(RECEIVE_SIZE)
            if data is None:
                reactor = self._serving_reactor()
                if reactor is None:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                else:
                    await reactor.park(self)  # until the loop must go on
                    if not self.at_eof:
                        continue
                    data = b""
            if not data:
                if await self._body_cut_short():
                    return False
                await self._peer_left()
                return True
            self._last_read = self.clock.monotonic()
            parser.receive_data(data)

    async def _body_cut_short(self) -> bool:
        """At the peer's EOF, a command whose body was cut short gets nsqd's read error (nsqd
        sends it before closing; the peer may still read after closing its side); True then."""
        try:
            self.parser.end_of_input()
        except ClientError as exc:
            log.info("[%s] %s", self.remote_address, exc.log_text)
            self.output.write(frames.encode_error(exc.text))
            with trio.move_on_after(1):
                await self.output.drain()
            return True
        return False

    async def _peer_left(self) -> None:
        """The client closed: release the descriptor at once, then yield before the tasks end.
        Trio runs the tasks ready in one scheduler round as a batch; when thousands of clients
        leave together, the yield lets the reads of the others (and so their closes) come
        before the teardown of the first ones. Nothing is sent after EOF (nsqd neither)."""
        if self._socket is not None:
            self._socket.close()
        await trio.lowlevel.checkpoint()

    def _end_tasks(self) -> None:
        """Wake the other tasks of the nursery so that they return."""
        self._ended = True
        self.output.stop()
        self._timer_lot.unpark_all()
        self._pump_lot.unpark_all()

    def close(self) -> None:
        """Drop the connection (nsqd closes the clients of a deleted topic or channel)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _timers(self, cancel_scope: trio.CancelScope) -> None:
        """Heartbeats and nsqd's deadlines, one task per connection instead of a cancel scope
        per I/O call: no command for two heartbeat intervals, or one send blocked for one
        interval (a client that stopped reading), closes the connection. IDENTIFY restarts the
        ticker (:meth:`restart_timers`); without heartbeats there is no deadline."""
        next_beat: float | None = None  # when the next heartbeat is due (None: start ticking)
        while not self._ended:
            now = self.clock.monotonic()
            if self._timers_restarted:
                self._timers_restarted = False
                next_beat = None
            interval = self.heartbeat_interval
            if not interval:
                await self._timer_lot.park()  # until IDENTIFY or the end
                continue
            if next_beat is None:
                next_beat = now + interval
            elif now >= next_beat:
                self.output.write(frames.HEARTBEAT)
                next_beat = now + interval
            if now >= self._last_read + 2 * interval:
                log.info("[%s] closing: no command for %.1fs", self.remote_address, 2 * interval)
                cancel_scope.cancel()
                return
            started = self.output.send_started
            if started is not None and now >= started + interval:
                log.info("[%s] closing: write blocked for %.1fs", self.remote_address, interval)
                cancel_scope.cancel()
                return
            with trio.move_on_at(min(next_beat, self._last_read + 2 * interval)):
                await self._timer_lot.park()

    async def _process(self) -> bool:
        """Handle every complete buffered command; False when the connection must close.

        Consecutive PUBs are gathered and appended as one batch per topic (group commit), then
        acknowledged together; any other command first flushes the gathered PUBs, so replies
        stay in command order.
        """
        parser = self.parser
        while True:
            try:
                handed = self.handed
                if handed is not None:  # left by the reactor: the PUBs before it come first
                    self.handed = None
                    await self.publisher.flush()
                    if isinstance(handed, BaseException):
                        raise handed
                    await self._handle(handed)
                    continue
                fins = parser.fin_run()  # the consumer hot path: a run of FINs in one call
                if fins is not None:
                    self._fin_run(fins)
                    continue
                try:
                    command = parser.next_event()
                except (ClientError, ConnectionAbort):
                    await self.publisher.flush()  # the commands before the bad one still count
                    raise
                if isinstance(command, Pub):
                    auth = self.auth
                    if auth is not None and not auth.permits(command.topic, ""):
                        await self.publisher.flush()  # acks before a possible auth error
                        await auth.check("PUB", command.topic, "")
                    self.publisher.gather(command)
                    self.publishes = True
                    continue
                if isinstance(command, Fin):  # the consumer hot path: no coroutine per FIN
                    self._fin(command.message_id)
                    continue
                await self.publisher.flush()
                if command is NEED_DATA:
                    return True  # the read loop sends the replies (OutputBuffer.send_pending)
                await self._handle(command)
            except ClientError as exc:
                log.info("[%s] %s", self.remote_address, exc.log_text)
                self.output.write(frames.encode_error(exc.text))
                if exc.fatal:
                    with trio.move_on_after(1):
                        await self.output.drain()
                    return False
            except ConnectionAbort as exc:
                log.info("[%s] closing: %s", self.remote_address, exc)
                self.output.flush()
                return False

    # ------------------------------------------------------------------ commands

    async def _handle(self, command: object) -> None:
        match command:
            case Mpub(topic=topic, bodies=bodies, partition=partition):
                await self._authorize("MPUB", topic)  # nsqd: before reading the body
                await self.publisher.publish(
                    topic, bodies, partition, "MPUB", ErrorCode.MPUB_FAILED
                )
            case Dpub(topic=topic, defer_ms=defer_ms, body=body):
                await self._authorize("DPUB", topic)
                await self.publisher.publish(
                    topic, [body], None, "DPUB", ErrorCode.DPUB_FAILED, defer_ms=defer_ms
                )
            case PubTrace(topic=topic, trace_id=trace_id, body=body, partition=partition):
                await self._authorize("PUB_TRACE", topic)
                await self.publisher.publish_traced(
                    topic, [(trace_id, body)], partition, "PUB_TRACE"
                )
            case MpubTrace(topic=topic, messages=messages, partition=partition):
                await self._authorize("MPUB_TRACE", topic)
                await self.publisher.publish_traced(topic, messages, partition, "MPUB_TRACE")
            case PubExt(topic=topic, header=header, body=body, partition=partition):
                await self._authorize("PUB_EXT", topic)
                await self.publisher.publish_ext(topic, [(header, body)], partition, "PUB_EXT")
            case MpubExt(topic=topic, messages=messages, partition=partition):
                await self._authorize("MPUB_EXT", topic)
                await self.publisher.publish_ext(topic, messages, partition, "MPUB_EXT")
            case Rdy(count=count):
                self.ready_count = count
                self._pump_lot.unpark_all()
            case Fin(message_id=message_id):
                self._fin(message_id)
            case Req(message_id=message_id, timeout_ms=timeout_ms):
                self._req(message_id, timeout_ms)
            case Touch(message_id=message_id):
                self._touch(message_id)
            case Nop():
                pass
            case Sub(topic=topic, channel=channel):
                await self._authorize("SUB", topic, channel)
                await self._subscribe(command)
            case Cls():
                self.ready_count = 0
                self.output.write(frames.CLOSE_WAIT)
            case Identify(body=body):
                await negotiation.identify(self, body)
            case InternalCreateTopic(topic=topic):
                await self._authorize("CREATE_TOPIC", topic)
                await self._create_topic(command)
            case Auth(secret=secret):
                if self.auth is None:
                    raise ClientError(ErrorCode.AUTH_DISABLED, "AUTH disabled")
                self.output.write(frames.encode_response(await self.auth.authenticate(secret)))
            case _:
                raise AssertionError(f"unhandled command {command!r}")

    async def _authorize(self, command: str, topic: str, channel: str = "") -> None:
        auth = self.auth
        if auth is not None and not auth.permits(topic, channel):
            await auth.check(command, topic, channel)

    def restart_timers(self) -> None:
        """Restart the heartbeat ticker and the read deadline (IDENTIFY changed the interval)."""
        self._timers_restarted = True
        self._timer_lot.unpark_all()

    async def _create_topic(self, command: InternalCreateTopic) -> None:
        """youzan's ``INTERNAL_CREATE_TOPIC``: standalone, the partition is made here; placed
        by pnsq's lookupd, lookupd is asked to place it (led by this node) first."""
        topic, number, ext = command.topic, command.partition, command.ext
        forwarder = self.settings.forwarder
        try:
            if forwarder is not None and forwarder.active:
                await forwarder.create_partition(self.broker, topic, number, ext)
            else:
                await create_partition(self.broker, topic, number, ext)
        except HANDLED_ERRORS as exc:
            text = YouzanText.CREATE_TOPIC_FAILED.format(topic)
            raise ClientError(ErrorCode.CREATE_TOPIC_FAILED, f"{text}: {exc}") from exc
        self.output.write(frames.OK)
