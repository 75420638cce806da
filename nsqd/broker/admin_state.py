"""A topic's administrative state as replication carries it: the topic's paused flag and its
durable channels with their flags (paused, ordered, youzan's skipped and skip_zan_test).

The cursors (where each channel is: empty, setoffset, skip) travel in ``Cursors`` frames and
channel deletions with them (:mod:`.copying`); this module is the rest of what an administrator
changes, so that a partition's replica holds it and a new leader starts from it.

* Leader: every administrative change calls :func:`admin_changed`, which counts it in the
  topic's ``admin_version`` and wakes the streams of the partitions led here; a stream sends
  :func:`admin_frame` whenever it differs from what it last sent (a channel made ordered by a
  SUB_ORDERED, or created by a SUB, goes the same way). The change then waits, bounded by
  :data:`ADMIN_WAIT`, in :func:`wait_replicated` until every in-sync follower whose stream
  takes ``Admin`` frames acknowledged it (``Partition.admin_acks``), so a kill -9 of the
  leader right after the reply does not lose it.
* Follower: :func:`mirror_admin` takes the leader's state: creates the channels it lacks, sets
  the flags (moving no cursor), and says whether anything changed (the caller saves
  ``pnsq.dat`` before acknowledging).
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from protocol.replication import Admin, ChannelAdmin

from .channel import Channel
from .partition import Partition
from .topic import Topic

log = logging.getLogger("nsqd.broker")

#: the longest an administrative change waits for the in-sync followers to hold it (a follower
#: that is down gets the state when its stream starts again: every stream starts with it)
ADMIN_WAIT = 5.0


class StreamWaker(Protocol):
    """What an administrative change needs of the broker's replication waiters."""

    def appended(self, partition: Partition) -> None:
        """Wake the streams to ``partition``'s followers."""

    async def wait_change(self, partition: Partition) -> None:
        """Return at the next acknowledgement or role change of ``partition``."""


class ChannelMaker(Protocol):
    """What mirroring needs of the broker: creating a channel as a SUB does."""

    def get_or_create_channel(self, topic: Topic, name: str) -> Channel:
        """The channel ``name`` of ``topic``, created on first use."""


def admin_frame(topic: Topic, epoch: int) -> Admin:
    """The topic's administrative state, as a leader under ``epoch`` sends it."""
    channels = tuple(
        ChannelAdmin(c.name, c.paused, c.ordered, c.skipped, c.skip_zan_test)
        for c in topic.channels.values()
        if not c.ephemeral
    )
    return Admin(epoch, topic.admin_version, topic.paused, channels)


def admin_changed(waiters: StreamWaker, topic: Topic) -> int:
    """Count an administrative change of ``topic`` and wake the streams of the partitions led
    here; returns the new version (for :func:`wait_replicated`)."""
    topic.admin_version += 1
    for partition in topic.partitions:
        if partition.state.leads:
            waiters.appended(partition)
    return topic.admin_version


def admin_replicated(partition: Partition, version: int) -> bool:
    """Whether every in-sync follower of ``partition`` that takes Admin frames holds
    ``version`` (true where this node does not lead it)."""
    state = partition.state
    if not state.leads:
        return True
    acks = partition.admin_acks
    return all(acks.get(node, version) >= version for node in state.followers)


async def wait_replicated(waiters: StreamWaker, topic: Topic, version: int) -> bool:
    """Wait until :func:`admin_replicated` holds for every partition of ``topic`` led here, at
    most :data:`ADMIN_WAIT` seconds; returns whether it did (logged when not)."""
    with trio.move_on_after(ADMIN_WAIT):
        for partition in topic.partitions:
            while not admin_replicated(partition, version):
                await waiters.wait_change(partition)
        return True
    lagging = [p.number for p in topic.partitions if not admin_replicated(p, version)]
    log.warning(
        "TOPIC(%s): admin change %d not acknowledged by every in-sync replica of "
        "partition(s) %s within %.0fs; they take it when their stream resumes",
        topic.name,
        version,
        lagging,
        ADMIN_WAIT,
    )
    return False


def mirror_admin(broker: ChannelMaker, topic: Topic, state: Admin) -> bool:
    """A follower takes its leader's administrative state of ``topic``; returns whether
    anything changed here. Channels the leader lacks are left alone (deletions come with
    ``Cursors``); no cursor moves (they come with ``Cursors`` too)."""
    changed = False
    if topic.paused != state.paused:
        topic.paused = state.paused
        changed = True
        if not state.paused:
            for channel in topic.channels.values():
                channel.notify()
    for entry in state.channels:
        if entry.name not in topic.channels:
            changed = True
        channel = broker.get_or_create_channel(topic, entry.name)
        have = (channel.paused, channel.ordered, channel.skipped, channel.skip_zan_test)
        want = (entry.paused, entry.ordered, entry.skipped, entry.skip_zan_test)
        if have != want:
            channel.paused, channel.ordered = entry.paused, entry.ordered
            channel.skipped, channel.skip_zan_test = entry.skipped, entry.skip_zan_test
            channel.notify()
            changed = True
    return changed
