"""The one publish path: forward or append, then acknowledge only once replicated.

Every publish that nsqd acknowledges (TCP ``PUB``/``MPUB``/``DPUB`` and their gathered group
commit, HTTP ``/pub``/``/mpub``, youzan's ``/pub_ext``/``/pubtrace``) goes through
:class:`PublishPath` in two steps:

1. :meth:`PublishPath.store` — a stock publish (no partition) of a topic this node leads no
   partition of goes to a leader (:class:`~nsqd.cluster.forwarding.Forwarder`, pnsq lookupd
   only) and is done once that leader acknowledged; anything else is appended here;
2. :meth:`PublishPath.replicated` — the appended records are acknowledgeable only once every
   in-sync replica holds them. :meth:`~nsqd.broker.publish_acks.PublishAcks.wait_replicated` raises
   :class:`~nsqd.core.errors.NotLeaderError` when leadership moved after the append: that is
   the fence that keeps a deposed leader from acknowledging (DESIGN.md §5), so the caller
   acknowledges nothing when either step raises.

:meth:`PublishPath.publish_stock`, :meth:`PublishPath.publish` (partition-aware, never
forwarded) and :meth:`PublishPath.publish_numbered` (idempotent: a retry is acknowledged, not
stored again) run both for one publish; the TCP group commit runs step 1 for every run of gathered
PUBs and then step 2 for all of them, so the waits overlap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import final

from ..broker import BodyBatch, Broker, NewRecord, Record
from ..core.producers import SequenceError
from .forwarding import Forwarder

__all__ = ["Append", "PublishPath"]

#: appends the publish here and returns its records (not acknowledgeable yet)
Append = Callable[[], Awaitable[Sequence[Record]]]


@final
class PublishPath:
    """Forward-or-append-then-wait for one node. ``forwarder`` None: never forward (a node
    without pnsq lookupd, or partition-aware publishes, which youzan refuses at a
    non-leader with ``E_FAILED_ON_NOT_LEADER`` instead)."""

    def __init__(self, broker: Broker, forwarder: Forwarder | None = None) -> None:
        self.broker = broker
        self.forwarder = forwarder

    async def elsewhere(self, topic: str, partition: int | None) -> bool:
        """Whether a publish of ``topic`` must go to a leader on another node. Raises
        :class:`~nsqd.cluster.forwarding.NoLookupdError` for an unknown topic while no lookupd
        answers."""
        forwarder = self.forwarder
        return forwarder is not None and await forwarder.must_forward(self.broker, topic, partition)

    async def store(
        self,
        topic: str,
        partition: int | None,
        bodies: list[bytes],
        append: Append,
        defer_ms: int = 0,
    ) -> Sequence[Record] | None:
        """Step 1: forward ``bodies`` (None once the leader acknowledged them), or ``append``
        here (the records, to pass to :meth:`replicated` before acknowledging)."""
        if await self.elsewhere(topic, partition):
            assert self.forwarder is not None
            await self.forwarder.publish(topic, bodies, defer_ms, self.broker)
            return None
        return await append()

    async def replicated(
        self, topic: str, records: Sequence[Record], *, durable: bool = True
    ) -> None:
        """Step 2: return once every in-sync replica holds ``records`` (and, with
        ``--sync-every=1`` unless ``durable`` is False, once fsynced). Raises
        :class:`~nsqd.core.errors.NotLeaderError` when this node no longer leads them."""
        await self.broker.publish_acks.wait_replicated(topic, records, durable=durable)

    async def publish_stock(
        self,
        topic: str,
        batch: BodyBatch,
        partition: int | None,
        *,
        defer_ms: int = 0,
        on_appended: Callable[[Sequence[Record]], None] | None = None,
    ) -> Sequence[Record] | None:
        """Both steps for one stock publish (``PUB``, ``MPUB``, ``DPUB``, ``/pub``, ``/mpub``):
        acknowledgeable when this returns. ``on_appended`` runs after a local append, before
        the wait. Returns the records, or None when a leader elsewhere took them."""

        async def append() -> Sequence[Record]:
            return self._append(topic, batch, partition, on_appended)

        records = await self.store(topic, partition, batch.bodies, append, defer_ms)
        if records is not None:
            await self.replicated(topic, records)
        return records

    async def publish(
        self,
        topic: str,
        entries: Sequence[NewRecord],
        partition: int | None,
        *,
        on_appended: Callable[[Sequence[Record]], None] | None = None,
    ) -> Sequence[Record]:
        """Both steps for a partition-aware publish (traced, ext, youzan's HTTP), never
        forwarded: acknowledgeable when this returns."""
        self._check_held(topic, partition)
        records = self._append(topic, entries, partition, on_appended)
        await self.replicated(topic, records)
        return records

    async def publish_numbered(
        self,
        topic: str,
        entries: Sequence[NewRecord],
        partition: int,
        producer: int,
        first: int,
        *,
        on_appended: Callable[[Sequence[Record]], None] | None = None,
    ) -> tuple[Sequence[Record], int]:
        """Both steps for a numbered publish (idempotent publishing: ``producer``'s messages
        numbered from ``first``), never forwarded: acknowledgeable when this returns. Returns
        the records appended and how many of the messages were stored already (left out);
        for a retry of numbers all stored, which appends nothing, the stored record holding
        its last number (once that is replicated). Raises
        :class:`~nsqd.core.producers.SequenceError` for numbers that do not follow."""
        self._check_held(topic, partition)
        try:
            stored = self.broker.publish_numbered(topic, entries, partition, producer, first)
        except SequenceError:
            # said only once everything this leader holds is acknowledged by its in-sync set
            # under its epoch: a deposed leader back from the dead (its log past the new
            # leader's, or behind it) never gets to tell a producer what to number next
            await self.broker.publish_acks.wait_settled(topic, partition)
            raise
        if not isinstance(stored, int):
            if on_appended is not None:
                on_appended(stored)
            await self.replicated(topic, stored)  # (after the ones stored already: in order)
            return stored, len(entries) - len(stored)
        await self.broker.publish_acks.wait_stored(topic, partition, stored)
        return await self.broker.publish_acks.read_stored(topic, partition, stored), len(entries)

    def _check_held(self, topic: str, partition: int | None) -> None:
        """In a cluster, a publish naming a partition of a topic not held here is refused
        (:meth:`~nsqd.cluster.forwarding.Forwarder.refuses`), never made into a topic here."""
        if self.forwarder is not None:
            self.forwarder.check_held(self.broker, topic, partition)

    def _append(
        self,
        topic: str,
        entries: Sequence[NewRecord],
        partition: int | None,
        on_appended: Callable[[Sequence[Record]], None] | None,
    ) -> Sequence[Record]:
        records = self.broker.publish(topic, entries, partition)
        if on_appended is not None:
            on_appended(records)
        return records
