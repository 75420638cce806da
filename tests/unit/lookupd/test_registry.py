"""The pure registry against a model: a literal port of nsqlookupd 1.3.0's flat registration map
(``registration_db.go`` + ``lookup_protocol_v1.go`` + ``http.go``), driven by Hypothesis through
registrations, unregistrations, disconnects, admin calls, tombstones and the passage of time.

In the model a partitioned peer's registration of partition ``p`` is a Go producer with the id
``peer/p``: pnsq's registry must behave as if each partition were such a producer."""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from lookupd.core.registry import Registry
from protocol.lookup_v1 import PeerIdentity

INACTIVE = 10.0
LIFETIME = 5.0
PEERS = ["10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"]
TOPICS = ["t", "u", "e#ephemeral"]
CHANNELS = ["c", "d", "x#ephemeral"]

Key = tuple[str, str, str]  # category, key, subkey


def identity(peer: str) -> PeerIdentity:
    index = PEERS.index(peer)
    return PeerIdentity("127.0.0.1", 4150 + index, 4151 + index, "1.3.0", "h")


class GoModel:
    """nsqlookupd's RegistrationDB, producers keyed by id; tombstones per (topic, peer)."""

    def __init__(self) -> None:
        self.db: dict[Key, dict[str, str]] = {}  # registration -> producer id -> peer
        self.last: dict[str, float] = {}
        self.partitioned: dict[str, bool] = {}
        self.tombs: dict[tuple[str, str], float] = {}

    @staticmethod
    def pid(peer: str, partition: int | None) -> str:
        return peer if partition is None else f"{peer}/{partition}"

    def add_producer(self, key: Key, peer: str, partition: int | None) -> None:
        self.db.setdefault(key, {})[self.pid(peer, partition)] = peer

    def remove_producer(self, key: Key, peer: str, partition: int | None) -> int:
        producers = self.db.get(key)
        if producers is None:
            return 0
        producers.pop(self.pid(peer, partition), None)
        return len(producers)

    def clear_tombs(self, topic: str) -> None:
        holders = set(self.db.get(("topic", topic, ""), {}).values())
        for t, peer in list(self.tombs):
            if t == topic and peer not in holders:
                del self.tombs[(t, peer)]

    def register(self, peer: str, topic: str, channel: str | None, part: int | None) -> None:
        if channel:
            self.add_producer(("channel", topic, channel), peer, part)
        self.add_producer(("topic", topic, ""), peer, part)

    def unregister(self, peer: str, topic: str, channel: str | None, part: int | None) -> None:
        if channel:
            left = self.remove_producer(("channel", topic, channel), peer, part)
            if left == 0 and channel.endswith("#ephemeral"):
                self.db.pop(("channel", topic, channel), None)
            return
        for key in [k for k in self.db if k[0] == "channel" and k[1] == topic]:
            self.remove_producer(key, peer, part)
        left = self.remove_producer(("topic", topic, ""), peer, part)
        if left == 0 and topic.endswith("#ephemeral"):
            self.db.pop(("topic", topic, ""), None)
        self.clear_tombs(topic)

    def disconnect(self, peer: str) -> None:
        for producers in self.db.values():
            for pid in [pid for pid, p in producers.items() if p == peer]:
                del producers[pid]
        for topic, p in list(self.tombs):
            if p == peer:
                del self.tombs[(topic, p)]
        del self.last[peer]

    def topics(self) -> list[str]:
        return sorted(k[1] for k in self.db if k[0] == "topic")

    def channels(self, topic: str, partition: int | None = None) -> list[str]:
        found = []
        for (category, key, sub), producers in self.db.items():
            if category != "channel" or key != topic:
                continue
            if partition is None or any(pid.endswith(f"/{partition}") for pid in producers):
                found.append(sub)
        return sorted(found)

    def holders(self, topic: str, channel: str) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for pid, peer in self.db.get(("channel", topic, channel), {}).items():
            parts = found.setdefault(peer, set())
            if "/" in pid:
                parts.add(int(pid.rsplit("/", 1)[1]))
        return found

    def active(self, peer: str, now: float) -> bool:
        return now - self.last[peer] <= INACTIVE

    def tombstoned(self, topic: str, peer: str, now: float) -> bool:
        at = self.tombs.get((topic, peer))
        return at is not None and now - at < LIFETIME

    def producers(self, topic: str, now: float, hide: bool = True) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for pid, peer in self.db.get(("topic", topic, ""), {}).items():
            if not self.active(peer, now) or (hide and self.tombstoned(topic, peer, now)):
                continue
            parts = found.setdefault(peer, set())
            if "/" in pid:
                parts.add(int(pid.rsplit("/", 1)[1]))
        return found


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.registry = Registry()
        self.model = GoModel()
        self.now = 1000.0

    def _connected(self) -> list[str]:
        return sorted(self.model.last)

    @rule(peer=st.sampled_from(PEERS), partitioned=st.booleans())
    def identify(self, peer: str, partitioned: bool) -> None:
        if peer in self.model.last:
            return  # one connection per peer id at a time
        self.registry.identify(peer, identity(peer), self.now, partitioned=partitioned)
        self.model.last[peer] = self.now
        self.model.partitioned[peer] = partitioned

    @rule(peer=st.sampled_from(PEERS))
    def ping(self, peer: str) -> None:
        self.registry.ping(peer, self.now)
        if peer in self.model.last:
            self.model.last[peer] = self.now

    @initialize()
    def two_peers(self) -> None:
        self.identify(PEERS[0], partitioned=False)
        self.identify(PEERS[1], partitioned=True)

    def _registration(
        self, index: int, topic: str, channel: str | None, partition: int, register: bool
    ) -> None:
        connected = self._connected()
        peer = connected[index % len(connected)]
        part = partition if self.model.partitioned[peer] else None
        if register:
            self.registry.register(peer, topic, channel, part)
            self.model.register(peer, topic, channel, part)
        else:
            self.registry.unregister(peer, topic, channel, part)
            self.model.unregister(peer, topic, channel, part)

    @precondition(lambda self: bool(self.model.last))
    @rule(
        index=st.integers(0, 2),
        topic=st.sampled_from(TOPICS),
        channel=st.none() | st.sampled_from(CHANNELS),
        partition=st.integers(0, 2),
    )
    def register(self, index: int, topic: str, channel: str | None, partition: int) -> None:
        self._registration(index, topic, channel, partition, register=True)

    @precondition(lambda self: bool(self.model.last))
    @rule(
        index=st.integers(0, 2),
        topic=st.sampled_from(TOPICS),
        channel=st.none() | st.sampled_from(CHANNELS),
        partition=st.integers(0, 2),
    )
    def unregister(self, index: int, topic: str, channel: str | None, partition: int) -> None:
        self._registration(index, topic, channel, partition, register=False)

    @precondition(lambda self: bool(self.model.last))
    @rule(index=st.integers(0, 2))
    def disconnect(self, index: int) -> None:
        connected = self._connected()
        peer = connected[index % len(connected)]
        self.registry.disconnect(peer)
        self.model.disconnect(peer)

    @rule(topic=st.sampled_from(TOPICS), channel=st.sampled_from(CHANNELS), op=st.integers(0, 3))
    def admin(self, topic: str, channel: str, op: int) -> None:
        db = self.model.db
        if op == 0:
            self.registry.add_topic(topic)
            db.setdefault(("topic", topic, ""), {})
        elif op == 1:
            self.registry.delete_topic(topic)
            for key in [k for k in db if k[1] == topic and k[0] in ("topic", "channel")]:
                del db[key]
            self.model.clear_tombs(topic)
        elif op == 2:
            self.registry.add_channel(topic, channel)
            db.setdefault(("channel", topic, channel), {})
            db.setdefault(("topic", topic, ""), {})
        else:
            found = self.registry.delete_channel(topic, channel)
            assert found == (("channel", topic, channel) in db)
            db.pop(("channel", topic, channel), None)

    @rule(topic=st.sampled_from(TOPICS), peer=st.sampled_from(PEERS))
    def tombstone(self, topic: str, peer: str) -> None:
        node = f"127.0.0.1:{identity(peer).http_port}"
        self.registry.tombstone(topic, node, self.now)
        if peer in set(self.model.db.get(("topic", topic, ""), {}).values()):
            self.model.tombs[(topic, peer)] = self.now

    @rule(step=st.sampled_from([0.5, 2.0, 4.9, 5.0, 6.0, 10.0, 11.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @invariant()
    def same_view(self) -> None:
        registry, model, now = self.registry, self.model, self.now
        assert registry.topic_names() == model.topics()
        for topic in TOPICS:
            assert registry.channel_names(topic) == model.channels(topic)
            for partition in range(3):
                assert registry.channel_names(topic, partition) == model.channels(topic, partition)
            for hide in (True, False):
                got = {
                    p.peer.peer_id: p.partitions
                    for p in registry.producers(
                        topic, now, INACTIVE, LIFETIME, hide_tombstoned=hide
                    )
                }
                assert got == model.producers(topic, now, hide), (topic, hide)
            for channel in CHANNELS:
                holders = {
                    peer: set(parts)
                    for peer, parts in registry.channel_holders(topic, channel).items()
                }
                assert holders == model.holders(topic, channel), (topic, channel)
        active = [p.peer_id for p in registry.active_peers(now, INACTIVE)]
        assert active == [p for p in sorted(model.last) if model.active(p, now)]
        for peer in active:
            held = registry.peer_topics(peer)
            expected = sorted(
                k[1] for k, prods in model.db.items() if k[0] == "topic" and peer in prods.values()
            )
            assert [t for t, _ in held] == expected
            for topic, producer in held:
                assert producer.is_tombstoned(now, LIFETIME) == model.tombstoned(topic, peer, now)


TestRegistry = RegistryMachine.TestCase
TestRegistry.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_keys_outlive_producers_and_ephemeral_keys_go() -> None:
    registry = Registry()
    registry.identify("a:1", identity(PEERS[0]), 0.0)
    registry.register("a:1", "t", "c")
    registry.register("a:1", "t", "e#ephemeral")
    registry.unregister("a:1", "t", "e#ephemeral")
    assert registry.channel_names("t") == ["c"]
    registry.disconnect("a:1")
    assert registry.topic_names() == ["t"]
    assert registry.channel_names("t") == ["c"]
    assert registry.producers("t", 0.0, INACTIVE, LIFETIME) == []


def test_register_does_not_refresh_liveness() -> None:
    registry = Registry()
    registry.identify("a:1", identity(PEERS[0]), 0.0)
    registry.register("a:1", "t")
    assert registry.producers("t", 11.0, INACTIVE, LIFETIME) == []  # inactive after 10 s
    registry.ping("a:1", 11.0)
    assert [p.peer.peer_id for p in registry.producers("t", 11.0, INACTIVE, LIFETIME)] == ["a:1"]


def test_tombstone_expires_after_its_lifetime() -> None:
    registry = Registry()
    registry.identify("a:1", identity(PEERS[0]), 0.0)
    registry.register("a:1", "t", partition=0)
    assert registry.tombstone("t", "127.0.0.1:4151", 1.0) == 1
    assert registry.producers("t", 5.9, INACTIVE, LIFETIME) == []
    assert len(registry.producers("t", 5.9, INACTIVE, LIFETIME, hide_tombstoned=False)) == 1
    assert len(registry.producers("t", 6.0, INACTIVE, LIFETIME)) == 1
