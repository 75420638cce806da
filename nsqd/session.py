"""One protocol V2 client connection: the Trio shell around :class:`protocol.CommandParser`.

Three tasks share a nursery: the command loop (read, parse, act), the message pump (deliver
while RDY allows) and the output writer; heartbeats are a fourth. Commands are handled strictly
in order, so responses come back in command order as go-nsq and pynsq require.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

import trio
from trio.lowlevel import ParkingLot

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
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    ParserLimits,
    Pub,
    PubExt,
    PubTrace,
    Rdy,
    Req,
    Sub,
    SubMode,
    Touch,
    frames,
)
from protocol.identify import IdentifyLimits, IdentifyResult, identify_response, parse_identify
from protocol.message import MESSAGE_ID, message_frame_header
from protocol.tracing import traced_response

from .broker import Broker, Channel
from .core.cursor import Message
from .errors import HANDLED_ERRORS, client_error_for
from .output import OutputBuffer
from .storage.record import NewRecord

log = logging.getLogger("nsqd.session")

RECEIVE_SIZE = 256 * 1024


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """The nsqd options a connection needs."""

    parser: ParserLimits = field(default_factory=ParserLimits)
    identify: IdentifyLimits = field(default_factory=IdentifyLimits)
    max_rdy_count: int = 2500
    version: str = "1.3.0"
    auth_required: bool = False


class Session:
    """State and tasks of one client connection."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        broker: Broker,
        settings: SessionSettings,
        remote_address: str,
    ) -> None:
        self.stream = stream
        self.broker = broker
        self.settings = settings
        self.remote_address = remote_address
        self.parser = CommandParser(settings.parser)
        limits = settings.identify
        self.client_id = self.hostname = remote_address.rsplit(":", 1)[0]
        self.user_agent = ""
        self.heartbeat_interval = limits.default_heartbeat_interval_ms / 1000
        self.msg_timeout_ns = limits.default_msg_timeout_ms * 1_000_000
        self.output_buffer_timeout = limits.default_output_buffer_timeout_ms / 1000
        self.sample_rate = 0
        self.output = OutputBuffer(stream)
        self.channel: Channel | None = None
        self.partition: int | None = None
        self.ready_count = 0
        self.in_flight = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.connect_time = int(time.time())
        self._pump_lot = ParkingLot()
        self._last_read = trio.current_time()
        self._watchdog_scope: trio.CancelScope | None = None
        self._gathered: list[tuple[tuple[str, int | None], list[NewRecord]]] = []
        self._heartbeat_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None

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
                nursery.start_soon(self._heartbeats)
                nursery.start_soon(self._watchdog, nursery.cancel_scope)
                await self._read_loop()
                nursery.cancel_scope.cancel()
        finally:
            if self.channel is not None:
                self.broker.unsubscribe(self.channel, self)

    async def _read_loop(self) -> None:
        stream, parser, output = self.stream, self.parser, self.output
        while True:
            if parser.buffered:
                if not await self._process():
                    return
                await output.send_pending()
            data = await stream.receive_some(RECEIVE_SIZE)
            if not data:
                return
            self._last_read = trio.current_time()
            parser.receive_data(data)

    async def _watchdog(self, cancel_scope: trio.CancelScope) -> None:
        """nsqd's deadlines, one timer per connection instead of a cancel scope per I/O call:
        no command for two heartbeat intervals, or one send blocked for one interval (a client
        that stopped reading), closes the connection."""
        while True:
            interval = self.heartbeat_interval
            if not interval:
                await trio.sleep(1.0)  # heartbeats disabled: no deadline (re-check after IDENTIFY)
                continue
            now = trio.current_time()
            if now >= self._last_read + 2 * interval:
                log.info("[%s] closing: no command for %.1fs", self.remote_address, 2 * interval)
                cancel_scope.cancel()
                return
            started = self.output.send_started
            if started is not None and now >= started + interval:
                log.info("[%s] closing: write blocked for %.1fs", self.remote_address, interval)
                cancel_scope.cancel()
                return
            with trio.CancelScope() as scope:
                self._watchdog_scope = scope  # IDENTIFY cancels it to apply a new interval
                await trio.sleep_until(min(self._last_read + 2 * interval, now + interval))

    async def _process(self) -> bool:
        """Handle every complete buffered command; False when the connection must close.

        Consecutive PUBs are gathered and appended as one batch per topic (group commit), then
        acknowledged together; any other command first flushes the gathered PUBs, so replies
        stay in command order.
        """
        parser = self.parser
        while True:
            try:
                try:
                    command = parser.next_event()
                except (ClientError, ConnectionAbort):
                    await self._flush_gathered()  # the commands before the bad one still count
                    raise
                if isinstance(command, Pub):
                    self._gather(command)
                    continue
                if isinstance(command, Fin):  # the consumer hot path: no coroutine per FIN
                    self._fin(command.message_id)
                    continue
                await self._flush_gathered()
                if command is NEED_DATA:
                    return True  # the read loop sends the replies (OutputBuffer.send_pending)
                await self._handle(command)
            except ClientError as exc:
                log.info("[%s] %s", self.remote_address, exc.text)
                self.output.write(frames.encode_error(exc.text))
                if exc.fatal:
                    with trio.move_on_after(1):
                        await self.output.drain()
                    return False
            except ConnectionAbort as exc:
                log.info("[%s] closing: %s", self.remote_address, exc)
                self.output.flush()
                return False

    def _gather(self, command: Pub) -> None:
        key = (command.topic, command.partition)
        entry = NewRecord(timestamp_ns=time.time_ns(), body=command.body)
        gathered = self._gathered
        if gathered and gathered[-1][0] == key:
            gathered[-1][1].append(entry)
        else:
            gathered.append((key, [entry]))

    async def _flush_gathered(self) -> None:
        """Append the gathered PUBs, one batch per (topic, partition) run, and ack them."""
        if not self._gathered:
            return
        gathered, self._gathered = self._gathered, []
        acked = 0
        try:
            for (topic, partition), entries in gathered:
                self.broker.publish(topic, entries, partition)
                acked += len(entries)
        except HANDLED_ERRORS as exc:
            self.output.append(frames.OK * acked)
            raise client_error_for(exc, "PUB", ErrorCode.PUB_FAILED) from exc
        if self.broker.durable_acks:
            await self.broker.wait_durable()
        self.output.append(frames.OK * acked)

    async def _heartbeats(self) -> None:
        while True:
            with trio.CancelScope() as scope:
                self._heartbeat_scope = scope
                interval = self.heartbeat_interval
                if not interval:
                    await trio.sleep_forever()
                while True:
                    await trio.sleep(interval)
                    self.output.write(frames.HEARTBEAT)

    # ------------------------------------------------------------------ commands

    async def _handle(self, command: object) -> None:
        match command:
            case Mpub(topic=topic, bodies=bodies, partition=partition):
                await self._publish(topic, bodies, partition, "MPUB", ErrorCode.MPUB_FAILED)
            case Dpub(topic=topic, defer_ms=defer_ms, body=body):
                await self._publish(
                    topic, [body], None, "DPUB", ErrorCode.DPUB_FAILED, defer_ms=defer_ms
                )
            case PubTrace(topic=topic, trace_id=trace_id, body=body, partition=partition):
                await self._publish_traced(topic, [(trace_id, body)], partition, "PUB_TRACE")
            case MpubTrace(topic=topic, messages=messages, partition=partition):
                await self._publish_traced(topic, messages, partition, "MPUB_TRACE")
            case PubExt() | MpubExt():
                raise ClientError(ErrorCode.EXT_NOT_SUPPORT, "ext topics are not supported yet")
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
            case Sub():
                self._subscribe(command)
            case Cls():
                self.ready_count = 0
                self.output.write(frames.CLOSE_WAIT)
            case Identify(body=body):
                self._identify(body)
            case Auth():
                raise ClientError(ErrorCode.AUTH_DISABLED, "AUTH disabled")
            case _:
                raise AssertionError(f"unhandled command {command!r}")

    async def _publish(
        self,
        topic: str,
        bodies: list[bytes],
        partition: int | None,
        name: str,
        code: ErrorCode,
        defer_ms: int = 0,
    ) -> None:
        now = time.time_ns()
        deliver_at = now + defer_ms * 1_000_000 if defer_ms else 0
        entries = [NewRecord(timestamp_ns=now, body=b, deliver_at_ns=deliver_at) for b in bodies]
        try:
            self.broker.publish(topic, entries, partition)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, name, code) from exc
        if self.broker.durable_acks:
            await self.broker.wait_durable()
        self.output.append(frames.OK)

    async def _publish_traced(
        self, topic: str, messages: list[tuple[int, bytes]], partition: int | None, name: str
    ) -> None:
        now = time.time_ns()
        entries = [NewRecord(timestamp_ns=now, body=b, trace_id=t) for t, b in messages]
        try:
            records = self.broker.publish(topic, entries, partition)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, name, ErrorCode.PUB_FAILED) from exc
        if self.broker.durable_acks:
            await self.broker.wait_durable()
        first = records[0]
        trace = first.trace_id if name == "PUB_TRACE" else 0
        raw_size = sum(len(r.body) + 4 for r in records)
        self.output.append(
            frames.encode_response(
                traced_response(first.internal_id, trace, first.offset, raw_size)
            )
        )

    def _identify(self, body: bytes) -> None:
        result: IdentifyResult = parse_identify(body, self.settings.identify)
        self.client_id = result.client_id or self.client_id
        self.hostname = result.hostname or self.hostname
        self.user_agent = result.user_agent
        self.heartbeat_interval = result.heartbeat_interval_ms / 1000
        self.parser.heartbeats_disabled = result.heartbeat_interval_ms == 0
        self.msg_timeout_ns = result.msg_timeout_ms * 1_000_000
        self.output_buffer_timeout = result.output_buffer_timeout_ms / 1000
        self.sample_rate = result.sample_rate
        for scope in (self._heartbeat_scope, self._watchdog_scope):
            if scope is not None:
                scope.cancel()  # restart the ticker and the read deadline with the new interval
        if not result.feature_negotiation:
            self.output.write(frames.OK)
            return
        limits = self.settings.identify
        reply = identify_response(
            result,
            version=self.settings.version,
            max_rdy_count=self.settings.max_rdy_count,
            max_msg_timeout_ms=limits.max_msg_timeout_ms,
            max_deflate_level=limits.max_deflate_level,
            auth_required=self.settings.auth_required,
        )
        self.output.write(frames.encode_response(reply))

    def _subscribe(self, command: Sub) -> None:
        if command.mode is not SubMode.PLAIN:
            raise ClientError(ErrorCode.INVALID, f"{command.mode.value} is not supported yet")
        try:
            channel = self.broker.subscribe(command.topic, command.channel, self)
            if command.partition is not None:
                channel.topic.pick_partition(command.partition)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "SUB", ErrorCode.SUB_FAILED) from exc
        self.channel = channel
        self.partition = command.partition
        assert self._nursery is not None
        self._nursery.start_soon(self._pump)
        self.output.append(frames.OK)

    def _fin(self, message_id: bytes) -> None:
        assert self.channel is not None
        try:
            self.broker.finish(self.channel, message_id, self)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "FIN", ErrorCode.FIN_FAILED, message_id) from exc
        self.finish_count += 1
        self._release_one()

    def _req(self, message_id: bytes, timeout_ms: int) -> None:
        assert self.channel is not None
        try:
            self.broker.requeue(self.channel, message_id, self, timeout_ms)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "REQ", ErrorCode.REQ_FAILED, message_id) from exc
        self.requeue_count += 1
        self._release_one()

    def _touch(self, message_id: bytes) -> None:
        assert self.channel is not None
        max_ns = self.settings.identify.max_msg_timeout_ms * 1_000_000
        try:
            self.broker.touch(self.channel, message_id, self, self.msg_timeout_ns, max_ns)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "TOUCH", ErrorCode.TOUCH_FAILED, message_id) from exc

    # ------------------------------------------------------------------ delivery

    def wake(self) -> None:
        """The channel may have messages for us."""
        self._pump_lot.unpark_all()

    def message_timed_out(self) -> None:
        """A message we held timed out: it no longer counts against RDY."""
        self._release_one()

    def _release_one(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if self.in_flight < self.ready_count:
            self._pump_lot.unpark_all()

    def _sample(self, channel: Channel, messages: list[Message]) -> list[Message]:
        """IDENTIFY sample_rate: like nsqd, a message this client skips is taken from the
        channel and dropped (never sent, never requeued)."""
        kept = []
        for message in messages:
            if random.randrange(100) > self.sample_rate:  # noqa: S311 - sampling, not security
                channel.cursor_for(message.partition).finish(message.offset, self)
                channel.topic.partitions[message.partition].dirty = True
            else:
                kept.append(message)
        return kept

    async def _pump(self) -> None:
        channel = self.channel
        assert channel is not None
        output = self.output
        only = self.partition
        while True:
            room = self.ready_count - self.in_flight
            if room <= 0 or not channel.has_ready(only):
                output.flush()
                await self._pump_lot.park()
                continue
            now = time.time_ns()
            messages = channel.take(room, self, now + self.msg_timeout_ns, now, only)
            if self.sample_rate:
                messages = self._sample(channel, messages)
            for message in messages:
                record = message.record
                body = record.body
                output.append(
                    message_frame_header(record.timestamp_ns, message.attempts, len(body))
                )
                output.append(MESSAGE_ID.pack(record.internal_id, record.trace_id))
                output.append(body)
            self.in_flight += len(messages)
            self.message_count += len(messages)
            output.flush()
            await trio.lowlevel.checkpoint()
