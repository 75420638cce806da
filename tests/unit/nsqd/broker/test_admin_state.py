"""nsqd.broker.admin_state: a topic's administrative state, snapshotted by a leader, taken over
by a follower (and saved there), and an administrative change waiting for the in-sync followers
that take it."""

from __future__ import annotations

import json
from pathlib import Path

import trio
import trio.testing

from nsqd.broker import Broker, BrokerConfig, open_broker
from nsqd.broker.admin import pause_channel, pause_topic
from nsqd.broker.admin_state import (
    ADMIN_WAIT,
    admin_changed,
    admin_frame,
    admin_replicated,
    mirror_admin,
    wait_replicated,
)
from nsqd.broker.persistence import METADATA_FILE
from nsqd.core.partition_state import Placement, Role
from protocol.replication import Admin, ChannelAdmin
from protocol.replication_decoder import LeaderFrameDecoder
from protocol.replication_encoder import encode

LEADER, FOLLOWER = "a:1", "b:1"


async def _leader_state(broker: Broker) -> Admin:
    topic = broker.get_or_create_topic("t", 1)
    broker.get_or_create_channel(topic, "plain")
    ordered = broker.get_or_create_channel(topic, "ord")
    ordered.ordered = True
    broker.get_or_create_channel(topic, "skip").skipped = True
    broker.get_or_create_channel(topic, "zan").skip_zan_test = True
    broker.get_or_create_channel(topic, "tmp#ephemeral")
    await pause_channel(broker, "t", "plain", True)
    await pause_topic(broker, "t", True)
    return admin_frame(topic, 4)


async def test_a_leaders_snapshot_names_every_durable_channel_with_its_flags(
    tmp_path: Path,
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        state = await _leader_state(broker)
    assert state.epoch == 4
    assert state.version == 2  # two changes: the channel's pause, the topic's
    assert state.paused
    assert sorted(state.channels, key=lambda c: c.name) == [
        ChannelAdmin("ord", ordered=True),
        ChannelAdmin("plain", paused=True),
        ChannelAdmin("skip", skipped=True),
        ChannelAdmin("zan", skip_zan_test=True),
    ]  # never the #ephemeral one
    decoder = LeaderFrameDecoder()
    decoder.feed(encode(state))
    assert decoder.next_frame() == state  # what the follower reads


async def test_a_follower_takes_the_state_saves_it_and_keeps_it_across_a_restart(
    tmp_path: Path,
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path / "l")) as leader:
        state = await _leader_state(leader)
    async with open_broker(BrokerConfig(data_path=tmp_path / "f")) as follower:
        topic = follower.get_or_create_topic("t", 1)
        mine = follower.get_or_create_channel(topic, "mine")  # the leader lacks it: stays
        assert mirror_admin(follower, topic, state)
        assert not mirror_admin(follower, topic, state)  # nothing more to change
        assert topic.paused
        assert topic.channels["plain"].paused
        assert topic.channels["ord"].ordered
        assert topic.channels["ord"].cursors[0].ordered
        assert topic.channels["skip"].skipped
        assert topic.channels["zan"].skip_zan_test
        assert topic.channels["mine"] is mine
        follower.syncs.request(metadata=True)
        await follower.wait_durable()
    saved = json.loads((tmp_path / "f" / METADATA_FILE).read_text())
    (entry,) = saved["topics"]
    assert entry["paused"] is True
    assert {c["name"]: c["paused"] for c in entry["channels"]}["plain"] is True
    async with open_broker(BrokerConfig(data_path=tmp_path / "f")) as again:
        topic = again.get_topic("t")
        assert topic.paused
        assert topic.channels["plain"].paused
        assert topic.channels["skip"].skipped
        assert topic.channels["ord"].ordered
        # the leader unpauses: the follower follows
        unpaused = Admin(5, 9, False, (ChannelAdmin("plain"),))
        assert mirror_admin(again, topic, unpaused)
        assert not topic.paused
        assert not topic.channels["plain"].paused


def _lead_with_follower(broker: Broker) -> None:
    topic = broker.get_or_create_topic("t", 1)
    topic.partitions[0].state.apply(
        Placement(Role.LEADER, 2, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
    )


async def test_a_change_waits_for_the_in_sync_follower_that_takes_admin_frames(
    tmp_path: Path,
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead_with_follower(broker)
        topic = broker.get_topic("t")
        partition = topic.partitions[0]
        # a follower whose stream does not take Admin frames (an older node) is not waited for
        version = admin_changed(broker.replication, topic)
        assert admin_replicated(partition, version)
        partition.admin_acks[FOLLOWER] = -1  # its stream takes them: now it is
        version = admin_changed(broker.replication, topic)
        assert not admin_replicated(partition, version)
        done: list[bool] = []

        async def change() -> None:
            done.append(await wait_replicated(broker.replication, topic, version))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(change)
            await trio.testing.wait_all_tasks_blocked()
            assert not done
            partition.admin_acks[FOLLOWER] = version - 1
            broker.replication.wake(partition, streams=False)
            await trio.testing.wait_all_tasks_blocked()
            assert not done  # an older version is not enough
            partition.admin_acks[FOLLOWER] = version
            broker.replication.wake(partition, streams=False)
        assert done == [True]


async def test_a_silent_follower_delays_a_change_at_most_admin_wait(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        _lead_with_follower(broker)
        topic = broker.get_topic("t")
        topic.partitions[0].admin_acks[FOLLOWER] = -1
        start = trio.current_time()
        version = admin_changed(broker.replication, topic)
        assert not await wait_replicated(broker.replication, topic, version)
        assert trio.current_time() - start == ADMIN_WAIT
