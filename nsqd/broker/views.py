"""The narrow views a channel holds of its neighbours: of its topic (:class:`TopicView`, as
nsq's channel never holds the ``*Topic``) and of a subscribed session (:class:`Subscriber`, the
consumer interface nsq's channel declares). The topic and the TCP session satisfy them; neither
is imported by the channel."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .partition import Partition

__all__ = ["Subscriber", "TimeoutAware", "TopicView"]


class TopicView(Protocol):
    """What a channel (and whoever reaches a topic through it) sees of its topic: name, flags,
    partitions held here. The :class:`~nsqd.broker.topic.Topic` holds its channels; a channel
    holds only this view, as nsq's channel declares the consumer it needs."""

    @property
    def name(self) -> str: ...
    @property
    def paused(self) -> bool: ...
    @property
    def ordered(self) -> bool: ...
    @property
    def ext(self) -> bool: ...
    @property
    def ephemeral(self) -> bool: ...  # an #ephemeral topic: in memory only
    @property
    def partition_num(self) -> int: ...
    @property
    def leads_lost(self) -> int: ...
    @property
    def partitions(self) -> Sequence[Partition]: ...
    def holds(self, number: int) -> bool: ...
    def partition(self, number: int) -> Partition: ...


class Subscriber(Protocol):
    """What a channel needs of a subscribed session."""

    #: the one partition it consumes (a partitioned SUB), or None for all of them
    partition: int | None

    def wake(self) -> None:
        """Messages may be available: re-check readiness."""

    def message_timed_out(self) -> None:
        """One of the messages this subscriber held in flight timed out."""


@runtime_checkable
class TimeoutAware(Protocol):
    """An owner of in-flight messages told when one of them timed out (a subscriber, an HTTP
    consume lease)."""

    def message_timed_out(self) -> None: ...
