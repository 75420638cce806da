"""The consuming side of a V2 connection: its subscription, RDY and in-flight accounting, the
FIN / REQ / TOUCH commands and the message pump that delivers while RDY allows.

:class:`Consuming` is a part owned by :class:`~nsqd.tcp.session.Session` (the connection's
lifecycle, command loop and dispatch), which calls it straight from its command loop, so the
consumer hot paths (a run of FINs, the pump) reach the broker directly, with no layer in
between. The broker knows the connection by its ``owner`` (the connection's
:class:`~nsqd.broker.channel.Subscriber`: the same object for the subscription, the messages
in flight and the stats); this part only passes it on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
from trio.lowlevel import ParkingLot

from protocol import ClientError, ErrorCode, FinRun, Sub, SubMode, frames
from protocol.consume import parse_consume_start

from ..broker import Broker, Channel
from ..broker.subscriptions import SubscribeRequest, subscribe
from ..broker.views import Subscriber
from .delivery import PLAIN_FRAME, sample, write_extended, write_plain
from .errors import HANDLED_ERRORS, client_error_for
from .output import OutputBuffer

if TYPE_CHECKING:
    from .reactor import PublishReactor
    from .settings import SessionSettings

log = logging.getLogger("nsqd.session")


class _Departed:
    """The owner of a consumer whose connection has ended (:meth:`Consuming.depart`): it
    consumes nothing and is woken for nothing."""

    partition: int | None = None

    def wake(self) -> None:
        """Nothing to wake."""

    def message_timed_out(self) -> None:
        """Nothing holds RDY room any more."""


DEPARTED: Subscriber = _Departed()


class Consuming:
    """A connection's consumer state and commands.

    Attributes:
        channel: the channel subscribed to (None before SUB).
        partition: the one partition it consumes (a partitioned SUB), or None for all.
        ready_count: the client's RDY; ``in_flight`` counts the messages it holds.
        msg_timeout_ns, sample_rate, extend_support: as IDENTIFY negotiated them.
    """

    def __init__(
        self,
        broker: Broker,
        settings: SessionSettings,
        output: OutputBuffer,
        remote_address: str,
        owner: Subscriber,
        reactor: PublishReactor | None,
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.clock = broker.clock
        self.output = output
        self.remote_address = remote_address
        self.owner = owner
        self._reactor = reactor
        limits = settings.identify
        self.msg_timeout_ns = limits.default_msg_timeout_ms * 1_000_000
        self.sample_rate = 0
        self.extend_support = False  # IDENTIFY extend_support (youzan ext topics)
        self.channel: Channel | None = None
        self.partition: int | None = None
        self.ext_block = False  # youzan ext block in message frames (ext topic)
        self.detail_block = False  # youzan detail block (SUB_ORDERED / SUB_ADVANCED)
        self.ready_count = 0
        self.in_flight = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self._pump_lot = ParkingLot()  # the pump waits here for RDY room or messages
        self._pump_idle = False  # parked there (not sending, not waiting for the socket)
        #: the topic's ``leads_lost`` the pump started with (None: no pump yet)
        self._leads_lost_seen: int | None = None
        self._delivery_queued = False  # with the publish reactor's turn (deliver_now)
        #: what a delivery made for the idle pump raised: the pump raises it
        self._delivery_error: Exception | None = None
        self._ended = False  # the connection's tasks are ending: the pump returns
        self._nursery: trio.Nursery | None = None  # the connection's (the pump runs there)

    def stop(self) -> None:
        """The connection is ending: the pump returns (without being cancelled)."""
        self._ended = True
        self._pump_lot.unpark_all()

    def unsubscribe(self) -> None:
        """Leave the channel, if subscribed (the connection is gone)."""
        channel = self.channel
        if channel is not None:
            self.broker.unsubscribe(channel, self.owner)
            if channel.dispatch.holding:  # messages held for our tag go to the others
                channel.notify()  # (not at every departure: N leaving together woke N² times)

    def depart(self) -> None:
        """The connection has ended: the pump returns, and the broker's view of the
        connection (``owner``, which holds this consumer) is let go."""
        self.stop()
        self.owner = DEPARTED

    def set_ready(self, count: int) -> None:
        """RDY: the client takes up to ``count`` messages in flight."""
        self.ready_count = count
        self._pump_lot.unpark_all()

    # ------------------------------------------------------------------ SUB

    async def subscribe(self, command: Sub, nursery: trio.Nursery) -> None:
        """SUB: join the channel, reply OK, and start the pump in ``nursery``."""
        mode = command.mode
        request = SubscribeRequest(
            command.topic,
            command.channel,
            command.partition,
            ordered=mode is SubMode.ORDERED,
            extend_support=self.extend_support,
            sample_rate=self.sample_rate,
            start=parse_consume_start(command.consume_start) if command.consume_start else None,
        )
        try:
            if self.settings.forwarder is not None:
                await self.settings.forwarder.ensure_local(self.broker, command.topic)
            sub = subscribe(self.broker, request, self.owner)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "SUB", ErrorCode.SUB_FAILED) from exc
        self.channel = sub.channel
        self.partition = self.owner.partition = sub.partition
        self.ext_block = sub.channel.topic.ext
        self.detail_block = mode is not SubMode.PLAIN
        if sub.metadata_changed:  # the channel became ordered: on disk before the OK
            await self.broker.wait_durable()
        self._nursery = nursery
        nursery.start_soon(self._pump)
        self.output.append(frames.OK)

    # ------------------------------------------------------------------ FIN / REQ / TOUCH

    def fin(self, message_id: bytes) -> None:
        assert self.channel is not None
        try:
            self.broker.finish(self.channel, message_id, self.owner)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "FIN", ErrorCode.FIN_FAILED, message_id) from exc
        self.finish_count += 1
        self._release_one()

    def fin_run(self, run: FinRun) -> None:
        assert self.channel is not None
        done, failed = self.broker.finish_run(self.channel, run.internal_ids(), self.owner)
        self.finish_count += done
        self.in_flight = max(0, self.in_flight - done)
        if self.in_flight < self.ready_count:
            self._pump_lot.unpark_all()
        for index, exc in failed:  # nsqd answers each failed FIN, in order
            message_id = run.message_id(index)
            error = client_error_for(exc, "FIN", ErrorCode.FIN_FAILED, message_id)
            if error.fatal:
                raise error
            log.info("[%s] %s", self.remote_address, error.log_text)
            self.output.write(frames.encode_error(error.text))

    def req(self, message_id: bytes, timeout_ms: int) -> None:
        assert self.channel is not None
        try:
            self.broker.requeue(self.channel, message_id, self.owner, timeout_ms)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "REQ", ErrorCode.REQ_FAILED, message_id) from exc
        self.requeue_count += 1
        self._release_one()

    def touch(self, message_id: bytes) -> None:
        assert self.channel is not None
        max_ns = self.settings.identify.max_msg_timeout_ms * 1_000_000
        try:
            self.broker.touch(self.channel, message_id, self.owner, self.msg_timeout_ns, max_ns)
        except HANDLED_ERRORS as exc:
            raise client_error_for(exc, "TOUCH", ErrorCode.TOUCH_FAILED, message_id) from exc

    # ------------------------------------------------------------------ delivery

    def wake(self) -> None:
        """The channel may have messages for us. An idle pump with no RDY room is left parked
        (RDY, FIN, REQ and timeouts wake it when room comes) unless a lead of the topic was
        lost since it started: the channel wakes every consumer on every append, and waking
        those that cannot take anything (RDY 0: go-nsq's spare connections) cost each publish
        ~11 µs per such consumer. When the publish reactor's appends woke an idle pump, the
        reactor makes its delivery before the turn's replies (deliver_now), and the pump is
        woken only if that leaves something for it."""
        if self._pump_idle and self.in_flight >= self.ready_count:
            channel = self.channel
            if channel is not None and channel.topic.leads_lost == self._leads_lost_seen:
                return
        reactor = self._reactor
        if (
            self._pump_idle
            and reactor is not None
            and reactor.appending
            and self.in_flight < self.ready_count
        ):
            if not self._delivery_queued:
                self._delivery_queued = True
                reactor.deliver_first(self)
            return
        self._pump_lot.unpark_all()

    def deliver_now(self) -> bool:
        """The pump's next delivery, made by the publish reactor while the pump is idle (it
        was not woken for it): the messages leave with one send attempt, what the socket does
        not take goes with the writer task. The pump is woken when more is ready for us than
        the delivery took, when the delivery was not made, and to raise an error (so it ends
        this connection, as it would have from the pump). False when nothing was delivered."""
        self._delivery_queued = False
        channel = self.channel
        room = self.ready_count - self.in_flight
        if not self._pump_idle or self._ended or channel is None or room <= 0:
            self._pump_lot.unpark_all()
            return False
        space = self.settings.max_pending_output_bytes - self.output.backlog
        owner = self.owner
        try:
            if space <= 0 or not channel.has_ready(self.partition, owner):
                self._pump_lot.unpark_all()  # it waits for the socket, or finds nothing
                return False
            taken = self._deliver(channel, room, space)
            if taken < room and channel.has_ready(self.partition, owner):
                self._pump_lot.unpark_all()  # the delivery's byte bound left some
        except Exception as exc:  # noqa: BLE001 -- the pump raises it (see above)
            self._delivery_error = exc
            self._pump_lot.unpark_all()
            return True
        self.output.send_now()
        return True

    def message_timed_out(self) -> None:
        """A message we held timed out: it no longer counts against RDY."""
        self._release_one()

    def _release_one(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if self.in_flight < self.ready_count:
            self._pump_lot.unpark_all()

    async def _pump(self) -> None:
        channel = self.channel
        assert channel is not None
        output = self.output
        only = self.partition
        owner = self.owner
        max_pending = self.settings.max_pending_output_bytes
        topic = channel.topic
        leads_lost = self._leads_lost_seen = topic.leads_lost
        while not self._ended:
            if only is not None and not _leads(channel, only):
                await self._lost_lead(f"partition {only} no longer led here")
                return
            if only is None and topic.leads_lost != leads_lost:  # it reads every one led here
                await self._lost_lead("a partition of its topic no longer led here")
                return
            room = self.ready_count - self.in_flight
            if room <= 0 or not channel.has_ready(only, owner):
                output.flush()
                self._pump_idle = True
                try:
                    await self._pump_lot.park()
                finally:
                    self._pump_idle = False
                if self._delivery_error is not None:
                    raise self._delivery_error
                continue
            space = max_pending - output.backlog
            if space <= 0:  # the socket is not draining: take nothing more from the log
                await output.wait_sent()
                continue
            self._deliver(channel, room, space)
            await output.send_pending()

    async def _lost_lead(self, why: str) -> None:
        """A partition this connection consumes is no longer led here (lookupd moved or
        failed it over; the channels wake on every change): the one it named (``SUB t c p``),
        or one of those a stock ``SUB t c`` reads. The client gets the fatal
        ``E_FAILED_ON_NOT_LEADER`` and the connection closes, which makes it look the topic up
        again at once (youzan go-nsq, pnsq's consumer, and go-nsq's consumer when a connection
        it found through lookupd closes) and reach the new leader, instead of at its next
        lookupd poll (a minute, by default). Its messages in flight are delivered again (by
        this node, or the new leader)."""
        error = ClientError(ErrorCode.FAILED_ON_NOT_LEADER, "", fatal=True)
        log.info("[%s] %s: %s", self.remote_address, why, error)
        self.output.write(frames.encode_error(error.text))
        with trio.move_on_after(1):
            await self.output.drain()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _deliver(self, channel: Channel, room: int, space: int) -> int:
        """Take up to ``room`` messages (``space`` bytes) for us and queue their frames (a
        plain consumer's that the log reads from disk come with their frames written); how
        many."""
        output, owner = self.output, self.owner
        now = self.clock.now_ns()
        extended = self.ext_block or self.detail_block
        layout = None if extended or self.sample_rate else PLAIN_FRAME
        deadline = now + self.msg_timeout_ns
        taken = channel.take(room, owner, deadline, now, self.partition, space, layout)
        if self.sample_rate:
            taken = sample(channel, taken, self.sample_rate, owner)
        if extended:
            write_extended(output, taken, ext=self.ext_block, detail=self.detail_block)
        else:
            write_plain(output, taken)
        self.in_flight += len(taken)
        self.message_count += len(taken)
        return len(taken)


def _leads(channel: Channel, number: int) -> bool:
    """This node holds partition ``number`` of the channel's topic and leads it."""
    topic = channel.topic
    return topic.holds(number) and topic.partition(number).state.leads
