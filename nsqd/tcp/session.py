"""One protocol V2 client connection: the Trio shell around :class:`protocol.CommandParser`.

Four tasks share a nursery: the command loop (read, parse, act), the message pump (deliver
while RDY allows), the output writer and the timers (heartbeats, deadlines). When the client
closes, the loop releases the socket at once and the other tasks return by themselves, without
being cancelled: cancelling costs several times more, and when thousands of clients leave at
once that cost decided how long their descriptors stayed open. Commands are handled strictly
in order, so responses come back in command order as go-nsq and pynsq require.

The session owns its parts, each given only what it needs: :mod:`nsqd.tcp.negotiation` reads
IDENTIFY (the session applies what it returns) and upgrades the stream; :mod:`nsqd.tcp.auth`
checks AUTH; :class:`Consuming` is SUB, FIN/REQ/TOUCH and the pump; :class:`ReactorSide` is what
the publish reactor serves; :class:`Timers` are the heartbeats and deadlines. This module is the
connection's lifecycle: its tasks, the command loop and dispatch. The session is the broker's
:class:`~nsqd.broker.channel.Subscriber` (stats, tag dispatch and topic deletion read its
identity through it); its ``wake`` and ``message_timed_out`` are the consuming part's methods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from pnsq._netio.plain_stream import PlainSocketStream
from protocol import (
    NEED_DATA,
    Auth,
    ClientError,
    Cls,
    CommandParser,
    ConnectionAbort,
    ErrorCode,
    Fin,
    Identify,
    InternalCreateTopic,
    Mpub,
    Nop,
    Pub,
    Rdy,
    Req,
    Sub,
    Touch,
    frames,
)

from ..broker import Broker, Channel
from ..core.tags import ExtFilter
from .auth import SessionAuth
from .consuming import Consuming
from .negotiation import Layer, Negotiated, negotiate, upgrade
from .output import OutputBuffer
from .publish_commands import publish_command
from .publishing import Publisher
from .reactor import PublishReactor
from .reactor_side import ReactorSide
from .settings import RECEIVE_SIZE, SessionSettings
from .statistics import ClientStatistics, client_statistics
from .streams import DeflateStream, peer_common_name
from .timers import Timers
from .topic_creation import create_topic

log = logging.getLogger("nsqd.session")


class Session:
    """State and tasks of one client connection (its consumer side: :class:`Consuming`; its
    side of the publish reactor: :class:`ReactorSide`)."""

    #: the broker's Subscriber calls, bound to the consuming part's methods
    wake: Callable[[], None]
    message_timed_out: Callable[[], None]

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
        self.output_buffer_timeout = limits.default_output_buffer_timeout_ms / 1000
        #: youzan's IDENTIFY desired_tag and ext_filter (ext topics, :mod:`nsqd.core.tags`)
        self.desired_tag = ""
        self.ext_filter: ExtFilter | None = None
        self.clock = broker.clock
        self.output = OutputBuffer(stream, broker.clock)
        self.publisher = Publisher(broker, self.output, settings.forwarder)
        self._consuming = consuming = Consuming(
            broker, settings, self.output, remote_address, self, reactor
        )
        #: the broker's Subscriber field: the partition its SUB consumes (set by the SUB)
        self.partition: int | None = None
        self.wake = consuming.wake
        self.message_timed_out = consuming.message_timed_out
        self.connect_time = int(self.clock.now())
        self._side = ReactorSide(
            stream,
            self.parser,
            self.publisher,
            self.output,
            self.clock,
            reactor,
            settings.max_pending_output_bytes,
        )
        heartbeat_interval = limits.default_heartbeat_interval_ms / 1000
        self._timers = Timers(
            self.output, self.clock, self._side, remote_address, heartbeat_interval
        )
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------------ what stats read

    @property
    def channel(self) -> Channel | None:
        """The channel subscribed to (None before SUB)."""
        return self._consuming.channel

    @property
    def consuming(self) -> Consuming:
        """The connection's consuming side (its RDY, in-flight and counters: stats read them)."""
        return self._consuming

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
                nursery.start_soon(self._timers.run, nursery.cancel_scope)
                if await self._read_loop():
                    self._end_tasks()
                else:
                    nursery.cancel_scope.cancel()
        finally:
            # what refers back to the session (the consumer's owner) or to itself (the parser's
            # command table) goes: its parts are then freed as it ends, not at the collector's
            # rare full pass (GC_THRESHOLDS), which let 10,000 closed connections hold ~75 MB
            self._consuming.unsubscribe()
            self._consuming.depart()
            self.parser.close()

    async def _read_loop(self) -> bool:
        """Read and handle commands; True when the client closed, False when we close."""
        parser, output, side = self.parser, self.output, self._side
        while True:
            data: bytes | bytearray | None = None
            if (
                parser.buffered
                or side.handed is not None
                or side.unreplicated is not None
                or self.publisher.gathering
            ):
                if not await self._process():
                    return False
                stream = self.stream  # IDENTIFY may have upgraded it
                if (
                    await output.send_pending()
                    and isinstance(stream, PlainSocketStream)
                    and side.serving_reactor(stream, self._consuming.channel, self.auth) is None
                ):
                    # the send yielded: take the client's next command without yielding again
                    # (a publisher the reactor serves waits there: its next read is a turn's)
                    data = stream.receive_nowait(RECEIVE_SIZE)
            if data is None:
                if side.replies_waiting() and self._consuming.channel is None:
                    await output.wait_sent()  # (a consumer's pump bounds its own output)
                    continue
                reactor = side.serving_reactor(self.stream, self._consuming.channel, self.auth)
                if reactor is None:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                else:
                    await reactor.park(side)  # until the loop must go on
                    if not side.at_eof:
                        continue
                    data = b""
            if not data:
                if await self._body_cut_short():
                    return False
                await self._peer_left()
                return True
            side.last_read = self.clock.monotonic()
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
        self.output.stop()
        self._timers.stop()
        self._consuming.stop()

    def close(self) -> None:
        """Drop the connection (nsqd closes the clients of a deleted topic or channel)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _process(self) -> bool:
        """Handle every complete buffered command; False when the connection must close.

        Consecutive PUBs are gathered and appended as one batch per topic (group commit), then
        acknowledged together; any other command first flushes the gathered PUBs, so replies
        stay in command order.
        """
        parser, side, consuming = self.parser, self._side, self._consuming
        while True:
            try:
                unreplicated = side.unreplicated
                if unreplicated is not None:  # appended by the reactor, their OKs come first
                    side.unreplicated = None
                    await self.publisher.acked_once_replicated(*unreplicated)
                handed = side.handed
                if handed is not None:  # left by the reactor: the PUBs before it come first
                    side.handed = None
                    await self._flush()
                    if isinstance(handed, BaseException):
                        raise handed
                    await self._handle(handed)
                    continue
                fins = parser.fin_run()  # the consumer hot path: a run of FINs in one call
                if fins is not None:
                    consuming.fin_run(fins)
                    continue
                try:
                    command = parser.next_event()
                except (ClientError, ConnectionAbort):
                    await self.publisher.flush()  # the commands before the bad one still count
                    raise
                if isinstance(command, (Pub, Mpub)):
                    name = "PUB" if isinstance(command, Pub) else "MPUB"
                    await self._may_publish(name, command.topic)
                    if command.sequence is not None:  # numbered: runs of their own
                        if not self.publisher.gather_numbered(command):
                            await self._flush()
                            self.publisher.gather_numbered(command)  # starts a run
                    else:
                        if self.publisher.numbered_pending:
                            await self._flush()  # their replies come first
                        self.publisher.gather(command)
                    side.publishes = True
                    continue
                if isinstance(command, Fin):  # the consumer hot path: no coroutine per FIN
                    consuming.fin(command.message_id)
                    continue
                await self._flush()
                if command is NEED_DATA:
                    if self.auth is not None:  # an MPUB's check comes before its body
                        await self.auth.before_body(parser.pending_line())
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

    async def _may_publish(self, command: str, topic: str) -> None:
        """AUTH's check of a publish the session gathers (after the acks of the publishes
        gathered before it, when it may fail)."""
        auth = self.auth
        if auth is not None and not auth.permits(topic, ""):
            await self._flush()
            await auth.check(command, topic, "")

    async def _flush(self) -> None:
        """Flush the gathered PUBs before the command at hand. A refusal of theirs that leaves
        the connection open is their reply, written here: the command at hand still gets its
        own (raised, it would be dropped, and every later reply would answer the wrong
        command)."""
        try:
            await self.publisher.flush()
        except ClientError as exc:
            if exc.fatal:
                raise
            log.info("[%s] %s", self.remote_address, exc.log_text)
            self.output.write(frames.encode_error(exc.text))

    # ------------------------------------------------------------------ commands

    async def _handle(self, command: object) -> None:
        if await publish_command(self.publisher, command, self._authorize):
            return
        match command:
            case Rdy(count=count):
                self._consuming.set_ready(count)
            case Fin(message_id=message_id):
                self._consuming.fin(message_id)
            case Req(message_id=message_id, timeout_ms=timeout_ms):
                self._consuming.req(message_id, timeout_ms)
            case Touch(message_id=message_id):
                self._consuming.touch(message_id)
            case Nop():
                pass
            case Sub(topic=topic, channel=channel):
                await self._authorize("SUB", topic, channel)
                assert self._nursery is not None
                await self._consuming.subscribe(command, self._nursery)
            case Cls():
                self._consuming.ready_count = 0
                self.output.write(frames.CLOSE_WAIT)
            case Identify(body=body):
                await self._identify(body)
            case InternalCreateTopic(topic=topic):
                await self._authorize("CREATE_TOPIC", topic)
                await create_topic(self.broker, self.settings.forwarder, command)
                self.output.write(frames.OK)
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

    async def _identify(self, body: bytes) -> None:
        """IDENTIFY: apply what was negotiated, reply, then upgrade the stream.

        Raises:
            ClientError: nsqd's E_BAD_BODY / E_IDENTIFY_FAILED texts.
        """
        negotiated = negotiate(body, self.settings, self.remote_address)
        self._apply(negotiated)
        self.output.write(negotiated.reply)
        if negotiated.upgrades:
            await upgrade(
                negotiated,
                self.stream,
                self.output,
                self.parser,
                self.settings.tls_context,
                self.remote_address,
                self._installed,
            )

    def _apply(self, negotiated: Negotiated) -> None:
        self.client_id = negotiated.client_id or self.client_id
        self.hostname = negotiated.hostname or self.hostname
        self.user_agent = negotiated.user_agent
        self.parser.heartbeats_disabled = negotiated.heartbeat_interval == 0
        consuming = self._consuming
        consuming.msg_timeout_ns = negotiated.msg_timeout_ns
        self.output_buffer_timeout = negotiated.output_buffer_timeout
        consuming.sample_rate = negotiated.sample_rate
        consuming.extend_support = negotiated.extend_support
        self.desired_tag = negotiated.desired_tag
        if not negotiated.keep_ext_filter:
            self.ext_filter = negotiated.ext_filter
        self.publisher.producer = negotiated.producer
        self._timers.restart(negotiated.heartbeat_interval)

    def _installed(self, layer: Layer, stream: trio.abc.Stream) -> None:
        """An IDENTIFY upgrade put ``layer`` in place: read and write through ``stream``."""
        self.stream = stream
        match layer:
            case Layer.TLS:
                assert isinstance(stream, trio.SSLStream)
                self.tls = True
                self.parser.tls_required = False
                if self.auth is not None:
                    self.auth.tls = True
                    self.auth.common_name = peer_common_name(stream)
            case Layer.SNAPPY:
                self.snappy = True
            case Layer.DEFLATE:
                assert isinstance(stream, DeflateStream)
                self.deflate = True
                self.deflate_level = stream.level
