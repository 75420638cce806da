"""A follower gives a leader's stream up after IDLE_TIMEOUT seconds without a frame, counted
from the last frame (a heartbeat moves the deadline), and only while it waits for one: what a
frame makes it do is not bounded by it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import BrokerConfig, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.follower import IDLE_TIMEOUT, Followers
from nsqd.replication.frames import FrameReader, PeerClosed
from pnsq._netio.cluster_link import ClusterLinks
from protocol.replication import Admin, Hello, HighWatermark, Welcome, encode
from protocol.replication_decoder import FollowerFrameDecoder

LEADER, FOLLOWER = "127.0.0.1:1", "127.0.0.1:2"


async def _silent_after(
    tmp_path: Path, frames: Sequence[tuple[float, object]], monkeypatch: pytest.MonkeyPatch
) -> float:
    """Run one follower session against a leader that welcomes it, sends ``frames`` (each
    after its delay) and then nothing; the time the session gives up (it must, with
    ``trio.TooSlowError``)."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic = broker.get_or_create_topic("t", 1)
        partition = topic.partitions[0]
        partition.state.apply(Placement(Role.REPLICA, 3, LEADER, (FOLLOWER,), (LEADER, FOLLOWER)))
        here, there = trio.testing.memory_stream_pair()
        links = ClusterLinks(lambda: FOLLOWER, trio.current_time, logging.getLogger("test"))

        async def dial(peer: str, link: bytes, timeout: float) -> tuple[trio.abc.Stream, bytes]:
            return here, b""

        monkeypatch.setattr(links, "dial", dial)
        followers = Followers(broker, FOLLOWER, links)

        async def leader() -> None:
            reader = FrameReader(there, FollowerFrameDecoder())
            hello = await reader.next()
            assert isinstance(hello, Hello)
            await there.send_all(encode(Welcome(3, 0, 0)))
            for delay, frame in frames:
                await trio.sleep(delay)
                await there.send_all(encode(frame))  # type: ignore[arg-type]
            with suppress(PeerClosed):  # the follower's acknowledgements, then its close
                while True:
                    await reader.next()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader)
            with pytest.raises(trio.TooSlowError):
                await followers._session("t", LEADER, partition, 0)
            gave_up = trio.current_time() - start
            nursery.cancel_scope.cancel()
        return gave_up


async def test_a_silent_leader_is_given_up_idle_timeout_after_its_last_frame(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await _silent_after(tmp_path, [], monkeypatch) == pytest.approx(IDLE_TIMEOUT)
    beats = [(3.0, HighWatermark(3, 0)), (4.0, HighWatermark(3, 0))]
    gave_up = await _silent_after(tmp_path / "beats", beats, monkeypatch)
    assert gave_up == pytest.approx(7.0 + IDLE_TIMEOUT)  # counted from the last heartbeat


async def test_a_frame_that_takes_long_to_apply_is_not_cut_short(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Admin frame waits for a sync that takes longer than IDLE_TIMEOUT: the follower
    applies it and answers, and gives up only IDLE_TIMEOUT after that."""
    slow = IDLE_TIMEOUT + 3.0

    async def slow_sync(self: object) -> None:
        await trio.sleep(slow)

    monkeypatch.setattr("nsqd.broker.Broker.wait_durable", slow_sync)
    admin = Admin(3, 1, paused=False)
    gave_up = await _silent_after(tmp_path, [(1.0, admin)], monkeypatch)
    assert gave_up == pytest.approx(1.0 + slow + IDLE_TIMEOUT)
