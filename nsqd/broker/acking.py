"""A consumer's answers to deliveries on a node: FIN (one, or a run of them), REQ and TOUCH,
and the end-to-end latency a FIN records.

:class:`Acking` is a part the :class:`~nsqd.broker.broker.Broker` owns; the sessions ask the
broker, which hands FIN runs, REQ and TOUCH straight to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from protocol.message import PARTITION_SHIFT, SEQUENCE_MASK, partition_of

from ..core.errors import BrokerError, NotInFlightError
from ..core.latency import LatencyWindow
from .channel import Channel
from .clock import Clock
from .config import BrokerConfig
from .waiters import ReplicationWaiters


class Acking:
    """FIN / REQ / TOUCH on a channel's cursors."""

    def __init__(self, config: BrokerConfig, clock: Clock, replication: ReplicationWaiters) -> None:
        self.config = config
        self.clock = clock
        #: an ordered channel's FIN goes to the followers before its next message is released
        self.replication = replication

    # ------------------------------------------------------------------ FIN / REQ / TOUCH

    @staticmethod
    def locate(message_id: bytes) -> tuple[int, int]:
        """(partition, offset) of a 16-byte message id."""
        internal_id = int.from_bytes(message_id[:8], "big")
        return partition_of(internal_id), (internal_id & SEQUENCE_MASK) - 1

    def finish(self, channel: Channel, message_id: bytes, client: object) -> None:
        """FIN one message (:meth:`finish_run` of one); raises its refusal: NotInFlightError,
        NotOwnerError, NotLeaderError."""
        _, failed = self.finish_run(channel, [int.from_bytes(message_id[:8], "big")], client)
        if failed:
            raise failed[0][1]

    def finish_run(
        self, channel: Channel, internal_ids: list[int], client: object
    ) -> tuple[int, list[tuple[int, BrokerError]]]:
        """FIN each message of ``internal_ids`` in order (a consumer's run of FINs): how many
        were finished, and the refusals ``(index in the run, error)`` in order, as
        :meth:`finish` would raise them one by one; a refusal other than "not in flight" /
        "not the owner" ends the run (it ends the connection too). Each stretch of one
        partition's ids goes to its cursor in one call."""
        done = 0
        failed: list[tuple[int, BrokerError]] = []
        touched: list[int] = []
        cursors = channel.cursors
        for number, start, end in _stretches(internal_ids):
            cursor = cursors.get(number)
            if cursor is None:
                failed.extend((index, NotInFlightError()) for index in range(start, end))
                continue
            if number not in touched:
                try:
                    channel.topic.partition(number).state.require_leader("FIN")
                except BrokerError as exc:  # not the leader: the rest is refused the same way
                    failed.append((start, exc))
                    break
                touched.append(number)
            stamps: list[int] | None = [] if self.config.e2e_percentiles else None
            for first, offsets in _offset_runs(internal_ids, start, end):
                finished, refused = cursor.finish_run(offsets, client, stamps)
                done += finished
                failed.extend((first + index, exc) for index, exc in refused)
            for timestamp_ns in stamps or ():
                self.observe_e2e(channel, timestamp_ns)
        for number in touched:
            partition = channel.topic.partition(number)
            partition.dirty = True
            if cursors[number].ordered:
                self.replication.appended(partition)
                channel.notify()
        return done, failed

    def observe_e2e(self, channel: Channel, timestamp_ns: int) -> None:
        """nsqd's end-to-end processing latency: FIN time minus the publish timestamp of the
        message finished."""
        now_ns = self.clock.now_ns()
        window = channel.e2e_latency
        if window is None:
            window_ns = int(self.config.e2e_window * 1e9)
            window = LatencyWindow(self.config.e2e_percentiles, window_ns, now_ns)
            channel.e2e_latency = window
        window.insert(now_ns - timestamp_ns, now_ns)

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
        held = cursor.in_flight.get(offset)
        now_ns = self.clock.now_ns()
        deadline = now_ns + msg_timeout_ns
        if held is not None:
            deadline = min(deadline, held.delivered_ns + max_msg_timeout_ns)
        cursor.touch(offset, client, deadline)


def _offset_runs(internal_ids: list[int], start: int, end: int) -> list[tuple[int, Sequence[int]]]:
    """The offsets of ``internal_ids[start:end]`` (one partition's), in order, as pieces
    ``(index of the first, offsets)``: a piece of consecutive ids is a ``range`` (a FIN run in
    delivery order: no step per id, see :meth:`PartitionCursor.finish_run`), found by halving
    the stretch until each half is consecutive or short."""
    count = end - start
    if count <= 0:
        return []
    first = internal_ids[start]
    if internal_ids[start:end] == list(range(first, first + count)):
        offset = (first & SEQUENCE_MASK) - 1
        return [(start, range(offset, offset + count))]
    if count <= _SHORTEST_HALVED:
        return [(start, [(i & SEQUENCE_MASK) - 1 for i in internal_ids[start:end]])]
    middle = (start + end) // 2
    return _offset_runs(internal_ids, start, middle) + _offset_runs(internal_ids, middle, end)


_SHORTEST_HALVED = 16  # a stretch this short is not halved again: its offsets are listed


def _stretches(internal_ids: list[int]) -> list[tuple[int, int, int]]:
    """``(partition, start, end)`` of each stretch of one partition's ids in ``internal_ids``,
    in order. The common run of a single partition costs two C-level passes (its smallest and
    largest ids share every bit above the sequence), not a partition per id."""
    if not internal_ids:
        return []
    low, high = min(internal_ids), max(internal_ids)
    if low >> PARTITION_SHIFT == high >> PARTITION_SHIFT:
        return [(partition_of(low), 0, len(internal_ids))]
    stretches = []
    start = 0
    for number, stretch in groupby(map(partition_of, internal_ids)):
        end = start + sum(1 for _ in stretch)
        stretches.append((number, start, end))
        start = end
    return stretches
