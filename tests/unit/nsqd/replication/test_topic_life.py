"""A follower's copy of an earlier life of a topic (deleted and made again on lookupd while its
node was away) is never followed as the new one's: its Hello names the copy's topic id
(``FEATURE_TOPIC_ID``), a leader of another id refuses it (``E_OTHER_LIFE``), and once the node
made its copy again the follower dials with the new id and follows from nothing."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import Broker, BrokerConfig, open_broker
from nsqd.broker.admin import delete_topic
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.follower import Followers
from nsqd.replication.frames import FrameReader
from nsqd.replication.leader import serve_follower
from protocol.replication import (
    FEATURES,
    MAGIC,
    Error,
    Hello,
    HighWatermark,
    LeaderFrame,
    ReplicationErrorCode,
    Welcome,
)
from protocol.replication_decoder import FollowerFrameDecoder, LeaderFrameDecoder
from protocol.replication_encoder import encode
from tests.unit.nsqd.replication.test_admin_streams import FOLLOWER, LEADER, plain_links


async def _answer(broker: Broker, topic_id: str) -> LeaderFrame:
    """The leader's first frame to a follower whose copy has ``topic_id``."""
    here, there = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve_follower, broker, there, "test", b"", links=plain_links(LEADER))
        )
        await here.send_all(encode(Hello(FOLLOWER, "t", 0, 3, 0, 0, FEATURES, topic_id)))
        with trio.fail_after(5):
            frame = await FrameReader(here, LeaderFrameDecoder()).next()
        nursery.cancel_scope.cancel()
    return frame


@pytest.mark.parametrize(
    ("leader_id", "copy_id", "followed"),
    [
        ("new", "old", False),  # the copy of the deleted topic: refused
        ("new", "new", True),
        ("new", "", True),  # a copy from before topic ids: not checked
        ("", "old", True),  # a leader from before topic ids: not checked
    ],
)
async def test_a_leader_refuses_a_copy_of_another_life(
    tmp_path: Path, leader_id: str, copy_id: str, followed: bool
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 1)
        topic.topic_id = leader_id
        topic.partitions[0].state.apply(
            Placement(Role.LEADER, 3, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
        )
        frame = await _answer(broker, copy_id)
        if followed:
            assert isinstance(frame, Welcome)
        else:
            assert isinstance(frame, Error)
            assert frame.code == ReplicationErrorCode.OTHER_LIFE
            assert frame.text == "the copy is of topic id old, this leader's is new"
            assert not topic.partitions[0].state.has_acked(FOLLOWER)  # nothing counted


async def test_a_refused_copy_is_followed_once_made_again_with_the_new_id(
    tmp_path: Path,
) -> None:
    hellos: list[str] = []  # the topic id of each Hello the leader got
    welcomed: list[str] = []

    async def leader(stream: trio.SocketStream) -> None:
        assert await stream.receive_some(4) == MAGIC
        hello = await FrameReader(stream, FollowerFrameDecoder()).next()
        assert isinstance(hello, Hello)
        hellos.append(hello.topic_id)
        if hello.topic_id != "new":
            text = f"the copy is of topic id {hello.topic_id}, this leader's is new"
            await stream.send_all(encode(Error(ReplicationErrorCode.OTHER_LIFE, text)))
            return
        welcomed.append(hello.topic_id)
        await stream.send_all(encode(Welcome(3, 0, 0)))
        while True:
            await stream.send_all(encode(HighWatermark(3, 0)))
            await trio.sleep(0.2)

    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker, trio.open_nursery() as n:
        listeners = await n.start(partial(trio.serve_tcp, leader, 0, host="127.0.0.1"))
        address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        placement = Placement(Role.REPLICA, 3, address, (FOLLOWER,), (address, FOLLOWER))

        def copy(topic_id: str) -> None:
            topic = broker.get_or_create_topic("t", 1)
            topic.topic_id = topic_id
            topic.partitions[0].state.apply(placement)
            broker.changes.notify()

        copy("old")
        n.start_soon(Followers(broker, FOLLOWER, plain_links(FOLLOWER)).run)
        with trio.fail_after(5):
            while len(hellos) < 2:  # refused, and refused again after the backoff
                await trio.sleep(0.02)
        assert not welcomed
        # lookupd's assignments name the new id: the node deletes its copy and makes it again
        await delete_topic(broker, "t")
        copy("new")
        with trio.fail_after(5):
            while not welcomed:
                await trio.sleep(0.02)
        assert set(hellos) == {"old", "new"}
        n.cancel_scope.cancel()
