"""When a publish may be acknowledged: between a leader's append and its ``OK``, the waits for
every in-sync follower to hold the records (:class:`~.waiters.ReplicationWaiters`) and, with
``--sync-every=1``, for an fsync that covers them; and a retried publish's (idempotent
publishing), stored before, waited for and read back where it was stored. A part of the
:class:`~nsqd.broker.Broker`, as ``broker.publish_acks``.

The waits raise :class:`~nsqd.core.errors.NotLeaderError` when this node no longer leads the
partition under the epoch the records were appended in: a new leader may not hold them,
whatever the in-sync set says now, so the publisher is told to go there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from protocol.message import partition_of

from ..core.errors import NotLeaderError, OffsetNotKeptError
from ..storage.batch import end_of
from ..storage.record import Record
from .config import BrokerConfig
from .persistence import SyncSchedule
from .reading import read_records
from .registry import TopicRegistry
from .waiters import ReplicationWaiters

__all__ = ["PublishAcks"]


class PublishAcks:
    """The waits of a publish before its acknowledgement, on this node's topics."""

    def __init__(
        self,
        config: BrokerConfig,
        registry: TopicRegistry,
        replication: ReplicationWaiters,
        syncs: SyncSchedule,
    ) -> None:
        self._config = config
        self._registry = registry
        self._replication = replication
        self._syncs = syncs

    def without_fsync(self, topic_name: str) -> bool:
        """Whether a publish to ``topic_name`` is acknowledged once its in-sync followers hold
        it, without an fsync to wait for (:meth:`when_replicated` tells when): the topic
        exists here and acks do not wait for fsync."""
        return topic_name in self._registry.topics and not self._config.durable_acks

    def when_replicated(
        self,
        topic_name: str,
        records: Sequence[Record],
        done: Callable[[Exception | None], None],
    ) -> Literal[True] | NotLeaderError | None:
        """:meth:`wait_replicated` of ``records`` (with ``durable=False``) without a task: True
        when it would return at once, the error it would raise at once; else None, and
        ``done`` is called once it would return (None) or raise (the error)
        (:meth:`~.waiters.ReplicationWaiters.when_replicated`)."""
        topic = self._registry.topics.get(topic_name)
        if not records or topic is None:
            return True
        internal_id, end, epoch = end_of(records)
        partition = topic.partition(partition_of(internal_id))
        return self._replication.when_replicated(partition, end, epoch, done)

    async def wait_replicated(
        self, topic_name: str, records: Sequence[Record], *, durable: bool = True
    ) -> None:
        """Return once every in-sync follower of the partition holds ``records`` (at once
        when the leader is alone in sync); then, with ``--sync-every=1`` (unless ``durable``
        is False: the caller waits once for several batches), once they are fsynced here.
        Raises NotLeaderError if this node no longer leads the partition under the epoch the
        records were appended in, even when that happened before this call."""
        if records:
            topic = self._registry.topics.get(topic_name)
            if topic is not None:
                internal_id, end, epoch = end_of(records)
                partition = topic.partition(partition_of(internal_id))
                await self._replication.wait(partition, end, epoch)
        if durable and self._config.durable_acks:
            await self._syncs.wait_durable()

    async def wait_stored(self, topic_name: str, partition: int, offset: int) -> None:
        """A retried publish, stored at ``offset`` before: return once every in-sync follower
        holds it (and it is fsynced, with ``--sync-every=1``). Raises NotLeaderError when
        this node does not lead the partition (a new leader answers the retry)."""
        target = self._registry.get_topic(topic_name).partition(partition)
        await self._replication.wait(target, offset + 1, target.state.epoch)
        if self._config.durable_acks:
            await self._syncs.wait_durable()

    async def wait_settled(self, topic_name: str, partition: int) -> None:
        """Return once everything the partition's log holds now is acknowledged by its in-sync
        set under the current epoch. Raises NotLeaderError when this node does not lead it."""
        target = self._registry.get_topic(topic_name).partition(partition)
        await self._replication.wait(target, target.log.end_offset, target.state.epoch)

    async def read_stored(self, topic_name: str, partition: int, offset: int) -> list[Record]:
        """The record at ``offset`` (a retried publish's, :meth:`wait_stored`): ``[]`` when
        retention took it since."""
        target = self._registry.get_topic(topic_name).partition(partition)
        try:
            return await read_records(target, offset, 1)
        except OffsetNotKeptError:
            return []
