"""A leader's stream to a follower of a partition whose topic has no channel has nothing but
its heartbeat to send: it wakes once a heartbeat, not every cursor interval (a node holding
thousands of partitions paid five wake-ups a second for each), and a channel created on the
topic wakes it at once. No stream keeps a timer of its own: the broker's ticks wake them."""

from __future__ import annotations

import itertools
import logging
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

import nsqd.replication.stream as stream_module
from nsqd.broker import Broker, BrokerConfig, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.broker.waiters import STREAM_TICK
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.frames import FrameReader
from nsqd.replication.leader import serve_follower
from nsqd.replication.stream import CURSOR_INTERVAL, HEARTBEAT
from pnsq._netio.cluster_link import ClusterLinks
from protocol.replication import (
    FEATURE_EPHEMERAL,
    FEATURE_NODE_BEAT,
    Cursors,
    Hello,
    HighWatermark,
    LeaderFrame,
)
from protocol.replication_decoder import LeaderFrameDecoder
from protocol.replication_encoder import encode

LEADER, FOLLOWER = "127.0.0.1:1", "127.0.0.1:2"


async def _follow(
    broker: Broker,
    seconds: float,
    during: float | None = None,
    channel: str = "c",
    features: int = 0,
) -> list[tuple[float, LeaderFrame]]:
    """The frames (with their times from the start) a follower whose Hello has ``features``
    gets within ``seconds``; with ``during``, ``channel`` is created that many seconds in."""
    topic = broker.get_or_create_topic("t", 1)
    topic.partitions[0].state.apply(
        Placement(Role.LEADER, 3, LEADER, (FOLLOWER,), (LEADER, FOLLOWER))
    )
    here, there = trio.testing.memory_stream_pair()
    seen: list[tuple[float, LeaderFrame]] = []
    start = trio.current_time()
    links = ClusterLinks(lambda: LEADER, trio.current_time, logging.getLogger("test"))

    async def follower() -> None:
        await here.send_all(encode(Hello(FOLLOWER, "t", 0, 3, 0, 0, features)))
        reader = FrameReader(here, LeaderFrameDecoder())
        while True:
            frame = await reader.next()
            seen.append((trio.current_time() - start, frame))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(serve_follower, broker, there, "test", b"", links=links))
        nursery.start_soon(follower)
        if during is not None:
            await trio.sleep(during)
            broker.get_or_create_channel(topic, channel)
            await trio.sleep(seconds - during)
        else:
            await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return seen


async def test_a_stream_of_a_topic_without_channels_wakes_once_a_heartbeat(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = 0
    real = stream_module._cursor_changes

    def counted(*args: object, **kwargs: object) -> list[Cursors]:
        nonlocal looks
        looks += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stream_module, "_cursor_changes", counted)
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        seen = await _follow(broker, 10.0)
    beats = [at for at, frame in seen if isinstance(frame, HighWatermark)]
    assert len(beats) >= 10 / HEARTBEAT - 1  # the heartbeat still goes
    assert max(b - a for a, b in itertools.pairwise(beats)) <= HEARTBEAT + 0.01
    assert looks <= 10 / HEARTBEAT + 2  # not 10 / CURSOR_INTERVAL = 50
    assert 2 * looks < 10 / CURSOR_INTERVAL


async def test_a_channel_created_on_a_quiet_topic_reaches_the_follower_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        seen = await _follow(broker, 3.0, during=1.5)
    (sent,) = [at for at, frame in seen if isinstance(frame, Cursors) and frame.channel == "c"]
    assert 1.5 <= sent < 1.5 + CURSOR_INTERVAL


@pytest.mark.parametrize("features", [FEATURE_EPHEMERAL, 0])
async def test_an_ephemeral_channel_goes_only_to_a_follower_that_marks_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, features: int
) -> None:
    """An #ephemeral channel's state goes to a follower whose Hello says it keeps it as a mark
    (FEATURE_EPHEMERAL); a follower of a release before would make it a channel that no
    client ever leaves, and keep the partition's messages for it for good."""
    name = "tail#ephemeral"
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        seen = await _follow(broker, 3.0, during=1.0, channel=name, features=features)
    sent = [f for _, f in seen if isinstance(f, Cursors) and f.channel == name]
    assert bool(sent) == bool(features)


async def _beats(broker: Broker, features: int, seconds: float) -> list[list[float]]:
    """The heartbeat times a follower node gets on its streams of two partitions (Hellos with
    ``features``) within ``seconds``, each stream's own list."""
    topic = broker.get_or_create_topic("t", 2)
    for partition in topic.partitions:
        partition.state.apply(Placement(Role.LEADER, 3, LEADER, (FOLLOWER,), (LEADER, FOLLOWER)))
    links = ClusterLinks(lambda: LEADER, trio.current_time, logging.getLogger("test"))
    beats: list[list[float]] = [[], []]
    start = trio.current_time()

    async def follower(number: int, stream: trio.abc.Stream) -> None:
        await stream.send_all(encode(Hello(FOLLOWER, "t", number, 3, 0, 0, features)))
        reader = FrameReader(stream, LeaderFrameDecoder())
        while True:
            if isinstance(await reader.next(), HighWatermark):
                beats[number].append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        for number in (0, 1):
            here, there = trio.testing.memory_stream_pair()
            nursery.start_soon(partial(serve_follower, broker, there, "test", b"", links=links))
            nursery.start_soon(follower, number, here)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return beats


async def test_a_follower_node_that_counts_silence_per_node_gets_one_heartbeat_for_all(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Two partitions followed by one node: idle, one heartbeat a heartbeat interval reaches the
    node, on either stream (not one per stream); a follower that counts silence per stream
    (no FEATURE_NODE_BEAT, a release before) still gets its own on each."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        shared = await _beats(broker, FEATURE_NODE_BEAT, 20.0)
    together = sorted(shared[0] + shared[1])
    assert len(together) <= 20 / HEARTBEAT + 3  # the first high-watermark of each, then 1 each
    # (a stream's first beat waits for its slot's tick: up to a tick late)
    assert max(b - a for a, b in itertools.pairwise(together)) <= HEARTBEAT + STREAM_TICK + 0.01
    async with open_broker(BrokerConfig(data_path=tmp_path / "old"), VirtualClock()) as broker:
        each = await _beats(broker, 0, 20.0)
    for beats in each:
        assert len(beats) >= 20 / HEARTBEAT - 1
        assert max(b - a for a, b in itertools.pairwise(beats)) <= HEARTBEAT + STREAM_TICK + 0.01
