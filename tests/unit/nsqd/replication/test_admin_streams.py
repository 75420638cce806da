"""The admin state on real ``"  R1"`` streams, mixed versions included: a leader sends Admin
frames only to a follower whose Hello asks for them, and a follower facing a leader from before
HELLO_EX (which answers it with E_BAD_FRAME) dials it again with a plain Hello and follows."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import Broker, BrokerConfig, open_broker
from nsqd.broker.admin import pause_channel
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.follower import Followers
from nsqd.replication.frames import FrameReader
from nsqd.replication.leader import serve_follower
from pnsq._netio.cluster_link import ClusterLinks
from protocol.replication import (
    FEATURE_ADMIN,
    FEATURE_EPHEMERAL,
    FEATURE_REPAIR,
    FEATURE_TOPIC_ID,
    FEATURES,
    MAGIC,
    Admin,
    AdminAck,
    ChannelAdmin,
    Error,
    Hello,
    HighWatermark,
    LeaderFrame,
    ReplicationErrorCode,
    Welcome,
)
from protocol.replication_decoder import FollowerFrameDecoder, LeaderFrameDecoder
from protocol.replication_encoder import encode

LEADER, FOLLOWER = "127.0.0.1:1", "127.0.0.1:2"


def plain_links(node: str) -> ClusterLinks:
    """Plaintext links without a secret (the credential has tests of its own)."""
    return ClusterLinks(lambda: node, trio.current_time, logging.getLogger("test"))


def _lead(broker: Broker) -> None:
    topic = broker.get_or_create_topic("t", 1)
    topic.partitions[0].state.apply(
        Placement(Role.LEADER, 3, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
    )
    broker.get_or_create_channel(topic, "c")


async def _frames_seen(broker: Broker, features: int, seconds: float) -> list[LeaderFrame]:
    """What a follower with ``features`` gets from this leader within ``seconds``."""
    here, there = trio.testing.memory_stream_pair()
    seen: list[LeaderFrame] = []

    async def follower() -> None:
        await here.send_all(encode(Hello(FOLLOWER, "t", 0, 3, 0, 0, features)))
        reader = FrameReader(here, LeaderFrameDecoder())
        while True:
            frame = await reader.next()
            seen.append(frame)
            if isinstance(frame, Admin):
                await here.send_all(encode(AdminAck(frame.epoch, frame.version)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve_follower, broker, there, "test", b"", links=plain_links(LEADER))
        )
        nursery.start_soon(follower)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return seen


async def test_a_leader_sends_admin_frames_only_to_a_follower_that_asks(tmp_path: Path) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead(broker)
        plain = await _frames_seen(broker, 0, 0.6)
        assert isinstance(plain[0], Welcome)
        assert not [f for f in plain if isinstance(f, Admin)]  # an older follower: none
        asked = await _frames_seen(broker, FEATURE_ADMIN, 0.6)
        (admin,) = [f for f in asked if isinstance(f, Admin)]  # once: nothing changed since
        assert admin == Admin(3, 0, False, (ChannelAdmin("c"),))


async def test_a_change_goes_to_the_follower_at_once_and_waits_for_its_ack(
    tmp_path: Path,
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead(broker)
        partition = broker.get_topic("t").partitions[0]
        here, there = trio.testing.memory_stream_pair()
        admins: list[Admin] = []

        async def follower() -> None:
            await here.send_all(encode(Hello(FOLLOWER, "t", 0, 3, 0, 0, FEATURE_ADMIN)))
            reader = FrameReader(here, LeaderFrameDecoder())
            while True:
                frame = await reader.next()
                if isinstance(frame, Admin):
                    admins.append(frame)
                    await here.send_all(encode(AdminAck(frame.epoch, frame.version)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(serve_follower, broker, there, "test", b"", links=plain_links(LEADER))
            )
            nursery.start_soon(follower)
            while not admins:
                await trio.sleep(0.01)
            assert partition.admin_acks.get(FOLLOWER, -1) >= 0
            start = trio.current_time()
            await pause_channel(broker, "t", "c", True)  # returns once the follower acked
            assert trio.current_time() - start < 1.0
            assert admins[-1].channels == (ChannelAdmin("c", paused=True),)
            assert partition.admin_acks[FOLLOWER] == admins[-1].version
            nursery.cancel_scope.cancel()


_NO_ID = FEATURES & ~FEATURE_TOPIC_ID
_NO_EPHEMERAL = _NO_ID & ~FEATURE_EPHEMERAL


@pytest.mark.parametrize(
    ("known", "expected"),
    [
        (0, [FEATURES, _NO_ID, _NO_EPHEMERAL, FEATURE_ADMIN | FEATURE_REPAIR, 0]),
        (
            FEATURE_ADMIN | FEATURE_REPAIR,
            [FEATURES, _NO_ID, _NO_EPHEMERAL, FEATURE_ADMIN | FEATURE_REPAIR],
        ),
        (_NO_EPHEMERAL, [FEATURES, _NO_ID, _NO_EPHEMERAL]),
        (_NO_ID, [FEATURES, _NO_ID]),
    ],
    ids=["before-hello-ex", "before-node-beat", "before-ephemeral", "before-topic-id"],
)
async def test_a_follower_falls_back_to_the_features_an_older_leader_knows(
    tmp_path: Path, known: int, expected: list[int]
) -> None:
    hellos: list[int] = []  # the feature bits of each Hello the "old leader" got

    async def old_leader(stream: trio.SocketStream) -> None:
        assert await stream.receive_some(4) == MAGIC
        reader = FrameReader(stream, FollowerFrameDecoder())
        hello = await reader.next()
        assert isinstance(hello, Hello)
        hellos.append(hello.features)
        if hello.features & ~known:  # what an older leader's decoder answers to unknown bits
            text = "unknown frame type 0x06" if not known else "features 0x7: unknown bits"
            await stream.send_all(encode(Error(ReplicationErrorCode.BAD_FRAME, text)))
            return
        await stream.send_all(encode(Welcome(3, 0, 0)))
        while True:
            await stream.send_all(encode(HighWatermark(3, 0)))
            await trio.sleep(0.2)

    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker, trio.open_nursery() as n:
        listeners = await n.start(partial(trio.serve_tcp, old_leader, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        topic = broker.get_or_create_topic("t", 1)
        leader = f"127.0.0.1:{port}"
        topic.partitions[0].state.apply(
            Placement(Role.REPLICA, 3, leader, (FOLLOWER,), (leader, FOLLOWER))
        )
        broker.changes.notify()
        n.start_soon(Followers(broker, FOLLOWER, plain_links(FOLLOWER)).run)
        with trio.fail_after(5):
            while len(hellos) < len(expected):
                await trio.sleep(0.02)
        await trio.sleep(0.5)  # it keeps following: no further Hello
        assert hellos == expected
        n.cancel_scope.cancel()
