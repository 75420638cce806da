"""A consumer's answers to deliveries on a node: FIN (one, or a run of them), REQ and TOUCH,
and the end-to-end latency a FIN records.

:class:`Acking` is a base of :class:`~nsqd.broker.broker.Broker`: the sessions' FIN runs call
:meth:`Acking.finish_many` on the broker directly, with no layer in between.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.message import SEQUENCE_MASK, partition_of

from ..core.cursor import Message
from ..core.errors import BrokerError, NotInFlightError, NotOwnerError
from ..core.latency import LatencyWindow
from .channel import Channel
from .clock import Clock
from .config import BrokerConfig
from .replication import ReplicationWaiters


class Acking:
    """FIN / REQ / TOUCH on a channel's cursors (state set up by the broker)."""

    # the broker's, set in Broker.__init__
    config: BrokerConfig
    clock: Clock
    replication: ReplicationWaiters

    # ------------------------------------------------------------------ FIN / REQ / TOUCH

    @staticmethod
    def locate(message_id: bytes) -> tuple[int, int]:
        """(partition, offset) of a 16-byte message id."""
        internal_id = int.from_bytes(message_id[:8], "big")
        return partition_of(internal_id), (internal_id & SEQUENCE_MASK) - 1

    def finish(self, channel: Channel, message_id: bytes, client: object) -> None:
        """FIN one message (:meth:`finish_many` of one); raises its refusal: NotInFlightError,
        NotOwnerError, NotLeaderError."""
        _, failed = self.finish_many(channel, [message_id], client)
        if failed:
            raise failed[0][1]

    def finish_many(
        self, channel: Channel, message_ids: Sequence[bytes], client: object
    ) -> tuple[int, list[tuple[bytes, BrokerError]]]:
        """FIN each of ``message_ids`` in order (a consumer's run of FINs): how many were
        finished, and the refusals ``(id, error)`` in order, as :meth:`finish` would raise
        them one by one; a refusal other than "not in flight" / "not the owner" ends the run
        (it ends the connection too)."""
        done = 0
        failed: list[tuple[bytes, BrokerError]] = []
        touched: set[int] = set()
        cursors = channel.cursors
        observe = self.observe_e2e if self.config.e2e_percentiles else None
        for message_id in message_ids:
            internal_id = int.from_bytes(message_id[:8], "big")
            number = partition_of(internal_id)
            cursor = cursors.get(number)
            try:
                if cursor is None:
                    raise NotInFlightError
                if number not in touched:
                    channel.topic.partition(number).state.require_leader("FIN")
                    touched.add(number)
                message = cursor.finish((internal_id & SEQUENCE_MASK) - 1, client)
            except (NotInFlightError, NotOwnerError) as exc:
                failed.append((message_id, exc))
                continue
            except BrokerError as exc:  # not the leader: the rest is refused the same way
                failed.append((message_id, exc))
                break
            done += 1
            if observe is not None:
                observe(channel, message)
        for number in touched:
            partition = channel.topic.partition(number)
            partition.dirty = True
            if cursors[number].ordered:
                self.replication.appended(partition)
                channel.notify()
        return done, failed

    def observe_e2e(self, channel: Channel, message: Message) -> None:
        """nsqd's end-to-end processing latency: FIN time minus the publish timestamp."""
        now_ns = self.clock.now_ns()
        window = channel.e2e_latency
        if window is None:
            window_ns = int(self.config.e2e_window * 1e9)
            window = LatencyWindow(self.config.e2e_percentiles, window_ns, now_ns)
            channel.e2e_latency = window
        window.insert(now_ns - message.record.timestamp_ns, now_ns)

    def requeue(self, channel: Channel, message_id: bytes, client: object, delay_ms: int) -> None:
        """REQ with the delay clamped to [0, --max-req-timeout]."""
        delay_ms = max(0, min(delay_ms, int(self.config.max_req_timeout * 1000)))
        partition, offset = self.locate(message_id)
        now_ns = self.clock.now_ns()
        cursor = channel.cursor_for(partition)
        cursor.requeue(offset, client, delay_ms * 1_000_000, now_ns)
        if delay_ms and not cursor.ordered:  # ordered: redelivered now, at the head
            channel.arm_timer(now_ns + delay_ms * 1_000_000)
        else:
            channel.notify()

    def touch(
        self,
        channel: Channel,
        message_id: bytes,
        client: object,
        msg_timeout_ns: int,
        max_msg_timeout_ns: int,
    ) -> None:
        """TOUCH: deadline = now + msg timeout, capped at delivery + --max-msg-timeout."""
        partition, offset = self.locate(message_id)
        cursor = channel.cursor_for(partition)
        message = cursor.in_flight.get(offset)
        now_ns = self.clock.now_ns()
        deadline = now_ns + msg_timeout_ns
        if message is not None:
            deadline = min(deadline, message.delivered_ns + max_msg_timeout_ns)
        cursor.touch(offset, client, deadline)
