"""The live registration view: who is connected, and which topics, partitions and channels each
nsqd has registered. Pure: no I/O, no clock (every time-dependent call takes ``now``, in
seconds), no Trio.

The rules are nsqlookupd 1.3.0's (``registration_db.go``, ``lookup_protocol_v1.go``,
``http.go``), including its quirks:

* a registration *key* (a topic, or a topic's channel) outlives its producers: when an nsqd
  unregisters or disconnects, the key stays with no producer, so ``/topics`` and ``/channels``
  still list it; only the admin endpoints delete keys, except that an ``#ephemeral`` channel (or
  topic) key goes when its last producer unregisters it explicitly;
* ``UNREGISTER <topic>`` also takes the peer off every channel of the topic (the keys stay);
* a producer counts as active while its peer's last IDENTIFY or PING is at most
  ``inactive_timeout`` old (REGISTER does not refresh it), and a tombstoned producer is hidden
  from ``/lookup`` for ``tombstone_lifetime`` (but still shown in ``/nodes``).

pnsq's extension: a partitioned peer registers (topic, partition) and (topic, partition,
channel); a producer then carries the set of partitions it holds. A stock peer's producer has no
partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.lookup_v1 import PeerIdentity
from protocol.names import is_ephemeral


@dataclass(slots=True, eq=False)
class Peer:
    """One identified TCP connection from an nsqd; ``peer_id`` is its remote ``ip:port``."""

    peer_id: str
    identity: PeerIdentity
    last_update: float
    partitioned: bool = False

    @property
    def node_id(self) -> str:
        """``broadcast_address:tcp_port``, the name placement uses."""
        return self.identity.node_id

    @property
    def http_node(self) -> str:
        """``broadcast_address:http_port``, the name ``/topic/tombstone`` uses."""
        return f"{self.identity.broadcast_address}:{self.identity.http_port}"

    @property
    def placed(self) -> bool:
        """A pnsq node: it holds what lookupd places on it (and deletes what lookupd deleted)."""
        return self.partitioned and not is_youzan(self.identity)

    def is_active(self, now: float, inactive_timeout: float) -> bool:
        """Pinged (or identified) at most ``inactive_timeout`` seconds ago."""
        return now - self.last_update <= inactive_timeout


def is_youzan(identity: PeerIdentity) -> bool:
    """A youzan nsqd registers ``<topic> <partition>``; its placement is not lookupd's."""
    return bool(identity.distributed_id) or "HA" in identity.version


@dataclass(slots=True, eq=False)
class Producer:
    """A peer's registration of one topic: the partitions it holds there, and its tombstone."""

    peer: Peer
    partitions: set[int] = field(default_factory=set)
    tombstoned_at: float | None = None

    def is_tombstoned(self, now: float, lifetime: float) -> bool:
        """Tombstoned less than ``lifetime`` seconds ago."""
        return self.tombstoned_at is not None and now - self.tombstoned_at < lifetime


class Registry:
    """Peers, topic keys with their producers, channel keys with their producers' partitions."""

    def __init__(self) -> None:
        self.peers: dict[str, Peer] = {}
        self.topics: dict[str, dict[str, Producer]] = {}
        #: topic -> channel -> peer id -> partitions (empty for a stock peer)
        self.channels: dict[str, dict[str, dict[str, set[int]]]] = {}

    # ------------------------------------------------------------------ the TCP protocol

    def identify(
        self, peer_id: str, identity: PeerIdentity, now: float, *, partitioned: bool = False
    ) -> Peer:
        """A peer identified itself (the "client" registration)."""
        peer = Peer(peer_id, identity, now, partitioned)
        self.peers[peer_id] = peer
        return peer

    def ping(self, peer_id: str, now: float) -> None:
        """Refresh the peer's last update (a PING before IDENTIFY is a no-op)."""
        peer = self.peers.get(peer_id)
        if peer is not None:
            peer.last_update = now

    def register(
        self, peer_id: str, topic: str, channel: str | None = None, partition: int | None = None
    ) -> bool:
        """REGISTER: the channel (if any) and the topic for this peer. True if the topic
        registration is new (the peer did not hold the topic, or this partition of it)."""
        peer = self.peers[peer_id]
        if channel is not None:
            holders = self.channels.setdefault(topic, {}).setdefault(channel, {})
            parts = holders.setdefault(peer_id, set())
            if partition is not None:
                parts.add(partition)
        producers = self.topics.setdefault(topic, {})
        producer = producers.get(peer_id)
        new = producer is None
        if producer is None:
            producer = producers[peer_id] = Producer(peer)
        if partition is not None and partition not in producer.partitions:
            producer.partitions.add(partition)
            new = True
        return new

    def unregister(
        self, peer_id: str, topic: str, channel: str | None = None, partition: int | None = None
    ) -> None:
        """UNREGISTER (see the module docstring for what stays)."""
        if channel is not None:
            self._unregister_channel(peer_id, topic, channel, partition)
            return
        for name in list(self.channels.get(topic, {})):
            self._drop_channel_holder(peer_id, topic, name, partition)
        producers = self.topics.get(topic)
        if producers is None:
            return
        producer = producers.get(peer_id)
        if producer is not None:
            if partition is not None:
                producer.partitions.discard(partition)
            if partition is None or not producer.partitions:
                del producers[peer_id]
        if not producers and is_ephemeral(topic):
            del self.topics[topic]

    def _unregister_channel(
        self, peer_id: str, topic: str, channel: str, partition: int | None
    ) -> None:
        self._drop_channel_holder(peer_id, topic, channel, partition)
        holders = self.channels.get(topic, {}).get(channel)
        if holders is not None and not holders and is_ephemeral(channel):
            del self.channels[topic][channel]

    def _drop_channel_holder(
        self, peer_id: str, topic: str, channel: str, partition: int | None
    ) -> None:
        holders = self.channels.get(topic, {}).get(channel)
        if holders is None or peer_id not in holders:
            return
        parts = holders[peer_id]
        if partition is not None:
            parts.discard(partition)
        if partition is None or not parts:
            del holders[peer_id]

    def disconnect(self, peer_id: str) -> None:
        """The connection closed: the peer leaves every registration (the keys stay)."""
        for producers in self.topics.values():
            producers.pop(peer_id, None)
        for channels in self.channels.values():
            for holders in channels.values():
                holders.pop(peer_id, None)
        self.peers.pop(peer_id, None)

    # ------------------------------------------------------------------ the admin endpoints

    def add_topic(self, topic: str) -> None:
        """``/topic/create``: the topic key, with no producer."""
        self.topics.setdefault(topic, {})

    def delete_topic(self, topic: str) -> None:
        """``/topic/delete``: the topic key and its channel keys (no existence check)."""
        self.channels.pop(topic, None)
        self.topics.pop(topic, None)

    def add_channel(self, topic: str, channel: str) -> None:
        """``/channel/create``: the channel key and the topic key."""
        self.channels.setdefault(topic, {}).setdefault(channel, {})
        self.topics.setdefault(topic, {})

    def delete_channel(self, topic: str, channel: str) -> bool:
        """``/channel/delete``: False if there is no such channel key."""
        channels = self.channels.get(topic, {})
        if channel not in channels:
            return False
        del channels[channel]
        return True

    def tombstone(self, topic: str, http_node: str, now: float) -> int:
        """``/topic/tombstone``: tombstone the topic's producers whose
        ``broadcast_address:http_port`` is ``http_node``; returns how many."""
        count = 0
        for producer in self.topics.get(topic, {}).values():
            if producer.peer.http_node == http_node:
                producer.tombstoned_at = now
                count += 1
        return count

    # ------------------------------------------------------------------ queries

    def topic_names(self) -> list[str]:
        """Every topic key."""
        return sorted(self.topics)

    def has_topic(self, topic: str) -> bool:
        """True if the topic key exists (it may have no producer)."""
        return topic in self.topics

    def channel_names(self, topic: str, partition: int | None = None) -> list[str]:
        """The topic's channel keys; with ``partition``, those registered for that partition."""
        channels = self.channels.get(topic, {})
        if partition is None:
            return sorted(channels)
        return sorted(
            name
            for name, holders in channels.items()
            if any(partition in parts for parts in holders.values())
        )

    def producers(
        self,
        topic: str,
        now: float,
        inactive_timeout: float,
        tombstone_lifetime: float,
        *,
        hide_tombstoned: bool = True,
    ) -> list[Producer]:
        """The topic's active producers (tombstoned ones left out unless told otherwise),
        ordered by peer id."""
        found = []
        for _, producer in sorted(self.topics.get(topic, {}).items()):
            if not producer.peer.is_active(now, inactive_timeout):
                continue
            if hide_tombstoned and producer.is_tombstoned(now, tombstone_lifetime):
                continue
            found.append(producer)
        return found

    def active_peers(self, now: float, inactive_timeout: float) -> list[Peer]:
        """Identified peers pinged within ``inactive_timeout``, ordered by peer id."""
        return [
            peer for _, peer in sorted(self.peers.items()) if peer.is_active(now, inactive_timeout)
        ]

    def peer_topics(self, peer_id: str) -> list[tuple[str, Producer]]:
        """The topics this peer is a producer of, with its producer entry."""
        return [
            (topic, producers[peer_id])
            for topic, producers in sorted(self.topics.items())
            if peer_id in producers
        ]

    def channel_holders(self, topic: str, channel: str) -> dict[str, set[int]]:
        """Peer id -> partitions of one channel key (empty if no such key)."""
        return self.channels.get(topic, {}).get(channel, {})
