"""A channel's routing of messages to some of its consumers only: youzan's dispatch tags and
ext filters on ext topics, and skipped channels (the decisions are :mod:`nsqd.core.tags`).

A consumer that takes a message meant for another pool (the consumers of tag X, or the
untagged ones) does not put it back in the cursor's queue, where it would come back to the same
consumer first: it is *held* for that pool, outside the cursor, until a consumer of the pool
takes it. So a consumer never stalls behind messages it may not have, and a tag's messages wait
for its consumer however busy it is. Held messages are not FINed: a restart or a failover
delivers them again, as any unfinished message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from ..core.confirming import confirm_unsent
from ..core.cursor import PartitionCursor
from ..core.inflight import Message
from ..core.tags import Verdict, decide, header_of
from ..storage.stamp import header_of as ext_header
from .partition import Partition


class TopicFlags(Protocol):
    """What routing reads of the channel's topic: whether messages carry youzan's ext header,
    and its partitions (a message confirmed unsent dirties its partition's checkpoint)."""

    @property
    def ext(self) -> bool: ...
    def partition(self, number: int) -> Partition: ...


class ChannelView(Protocol):
    """What routing needs of its channel (:class:`~nsqd.broker.channel.Channel`): its flags,
    consumers and cursors, and a way to wake its consumers. Declared here, so the channel
    owns its dispatch without this module knowing the channel."""

    @property
    def topic(self) -> TopicFlags: ...
    @property
    def skipped(self) -> bool: ...
    @property
    def skip_zan_test(self) -> bool: ...
    @property
    def clients(self) -> Collection[object]: ...
    @property
    def cursors(self) -> Mapping[int, PartitionCursor]: ...
    def notify(self) -> None:
        """Wake the channel's consumers."""


def _tag_of(client: object) -> str:
    tag = getattr(client, "desired_tag", "")
    return tag if isinstance(tag, str) else ""


class Dispatch:
    """The held messages of one channel, by pool ("" for the untagged consumers)."""

    def __init__(self, channel: ChannelView) -> None:
        self._channel = channel
        self._held: dict[str, deque[Message]] = {}

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> bool:
        """Whether messages may go to some consumers only (or to none): a skipped channel, an
        ext topic with tagged or filtering consumers or skipping zan_test messages, or held
        messages still waiting."""
        channel = self._channel
        if channel.skipped or self._held:
            return True
        return channel.topic.ext and (
            channel.skip_zan_test
            or any(_tag_of(c) or getattr(c, "ext_filter", None) for c in channel.clients)
        )

    @property
    def holding(self) -> bool:
        """Whether any message waits for its pool."""
        return bool(self._held)

    def held_count(self, partition: int | None = None) -> int:
        """Messages waiting for their pool (of ``partition``, if given): part of the depth."""
        return sum(
            1
            for queue in self._held.values()
            for m in queue
            if partition is None or m.partition == partition
        )

    def drop_partition(self, partition: int) -> None:
        """Forget the held messages of ``partition`` (cursor moved, or no longer held here)."""
        for tag in list(self._held):
            kept = deque(m for m in self._held[tag] if m.partition != partition)
            if kept:
                self._held[tag] = kept
            else:
                del self._held[tag]

    # ------------------------------------------------------------------ taking

    def drop_held(self, partition: int, offset: int) -> bool:
        """Take the message at ``offset`` of ``partition`` out of whichever pool holds it
        (youzan's ``/message/finish`` confirms it); False if none does."""
        for tag, queue in self._held.items():
            for message in queue:
                if message.partition == partition and message.offset == offset:
                    queue.remove(message)
                    if not queue:
                        del self._held[tag]
                    return True
        return False

    def has_for(self, client: object, only: int | None) -> bool:
        """Whether held messages wait for ``client``'s pool (of partition ``only``)."""
        self._rehome()
        queue = self._held.get(_tag_of(client))
        if not queue:
            return False
        return any(only is None or m.partition == only for m in queue)

    def take_held(self, client: object, max_messages: int, only: int | None) -> list[Message]:
        """Up to ``max_messages`` held messages of ``client``'s pool, each checked again
        (its filter may drop it)."""
        self._rehome()
        tag = _tag_of(client)
        queue = self._held.get(tag)
        if not queue:
            return []
        out: list[Message] = []
        rest: deque[Message] = deque()
        while queue and len(out) < max_messages:
            message = queue.popleft()
            if only is not None and message.partition != only:
                rest.append(message)
                continue
            out.extend(self.route(message.partition, [message], client))
        rest.extend(queue)
        if rest:
            self._held[tag] = rest
        else:
            del self._held[tag]
        return out

    def route(self, partition: int, got: Iterable[Message], client: object) -> list[Message]:
        """Of ``got`` (just taken from ``partition``'s cursor), what ``client`` gets; the
        dropped ones are confirmed unsent, the others held for their pool (which is woken)."""
        channel = self._channel
        tags = {tag for c in channel.clients if (tag := _tag_of(c))}
        cursor = channel.cursors.get(partition)
        keep: list[Message] = []
        passed = False
        for message in got:
            verdict = self._verdict(message, client, tags)
            if verdict is Verdict.DELIVER:
                keep.append(message)
            elif verdict is Verdict.DROP:
                if cursor is not None:
                    _confirm(channel, partition, cursor, message)
            else:
                owner = tag if (tag := _dispatch_tag(message)) in tags else ""
                self._held.setdefault(owner, deque()).append(message)
                passed = True
        if passed:
            channel.notify()
        return keep

    def _verdict(self, message: Message, client: object, tags: set[str]) -> Verdict:
        channel = self._channel
        if channel.skipped:
            return Verdict.DROP
        return decide(
            header_of(ext_header(message.record.ext)),
            consumer_tag=_tag_of(client),
            present_tags=tags,
            ext_filter=getattr(client, "ext_filter", None),
            skip_zan_test=channel.skip_zan_test,
        )

    def _rehome(self) -> None:
        """Messages held for a tag whose consumers all left go to the untagged pool."""
        tags = {tag for c in self._channel.clients if (tag := _tag_of(c))}
        for tag in [t for t in self._held if t and t not in tags]:
            self._held.setdefault("", deque()).extend(self._held.pop(tag))


def _dispatch_tag(message: Message) -> str:
    tag = header_of(ext_header(message.record.ext)).get("##client_dispatch_tag")
    return tag if isinstance(tag, str) else ""


def _confirm(
    channel: ChannelView, partition: int, cursor: PartitionCursor, message: Message
) -> None:
    confirm_unsent(cursor, message)
    channel.topic.partition(partition).dirty = True
