"""A follower gives a leader's stream up after IDLE_TIMEOUT seconds without a frame from the
leader's node on any stream, counted from the last frame (a heartbeat moves the deadline), and
only while it waits for one: what a frame makes it do is not bounded by it. A leader node
that refuses a dial is not dialed again by any stream for a moment, and one not reached since
its streams failed is dialed by one stream first."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import pytest
import trio
import trio.testing

from nsqd.broker import Broker, BrokerConfig, Topic, open_broker
from nsqd.broker.clock import VirtualClock
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.follower import DOWN_HOLD, IDLE_TIMEOUT, RETRY, WATCH_INTERVAL, Followers
from nsqd.replication.frames import FrameReader, PeerClosed
from pnsq._netio.cluster_link import ClusterLinks
from protocol.replication import Admin, Hello, HighWatermark, Welcome
from protocol.replication_decoder import FollowerFrameDecoder
from protocol.replication_encoder import encode

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
            nursery.start_soon(followers.watch_silence)
            nursery.start_soon(leader)
            with pytest.raises(trio.TooSlowError):
                await followers._session("t", LEADER, partition, 0)
            gave_up = trio.current_time() - start
            nursery.cancel_scope.cancel()
        return gave_up


async def test_a_silent_leader_is_given_up_idle_timeout_after_its_last_frame(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _within_a_look(await _silent_after(tmp_path, [], monkeypatch), IDLE_TIMEOUT)
    beats = [(3.0, HighWatermark(3, 0)), (4.0, HighWatermark(3, 0))]
    gave_up = await _silent_after(tmp_path / "beats", beats, monkeypatch)
    assert _within_a_look(gave_up, 7.0 + IDLE_TIMEOUT)  # counted from the last heartbeat


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
    assert _within_a_look(gave_up, 1.0 + slow + IDLE_TIMEOUT)


async def test_a_silent_stream_stays_while_another_from_its_leader_node_brings_frames(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two partitions followed from one leader node, which sends its heartbeats on partition
    0's stream only (one per follower node: FEATURE_NODE_BEAT) for 20 s: partition 1's
    silent stream is kept as long as they come, and both are given up IDLE_TIMEOUT after the
    last one."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        topic, links = _following(broker, 2)
        send, receive = trio.open_memory_channel[trio.abc.Stream](2)

        async def dial(peer: str, link: bytes, timeout: float) -> tuple[trio.abc.Stream, bytes]:
            here, there = trio.testing.memory_stream_pair()
            await send.send(there)
            return here, b""

        monkeypatch.setattr(links, "dial", dial)
        followers = Followers(broker, FOLLOWER, links)

        async def leader(there: trio.abc.Stream) -> None:
            reader = FrameReader(there, FollowerFrameDecoder())
            hello = await reader.next()
            assert isinstance(hello, Hello)
            await there.send_all(encode(Welcome(3, 0, 0)))
            if hello.partition == 0:
                for _ in range(10):
                    await trio.sleep(2.0)
                    await there.send_all(encode(HighWatermark(3, 0)))
            with suppress(PeerClosed):
                while True:
                    await reader.next()

        gave_up: dict[int, float] = {}
        start = trio.current_time()

        async def follow(number: int) -> None:
            with pytest.raises(trio.TooSlowError):
                await followers._session("t", LEADER, topic.partitions[number], 0)
            gave_up[number] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(followers.watch_silence)
            nursery.start_soon(follow, 0)
            nursery.start_soon(follow, 1)
            for _ in range(2):
                nursery.start_soon(leader, await receive.receive())
            while len(gave_up) < 2:
                await trio.sleep(1.0)
            nursery.cancel_scope.cancel()
    assert _within_a_look(gave_up[0], 20.0 + IDLE_TIMEOUT)
    assert _within_a_look(gave_up[1], 20.0 + IDLE_TIMEOUT)


def _following(broker: Broker, partitions: int) -> tuple[Topic, ClusterLinks]:
    """Topic ``t`` of ``partitions`` partitions, each held here as LEADER's replica, and this
    node's links (their ``dial`` for the test to replace)."""
    topic = broker.get_or_create_topic("t", partitions)
    for partition in topic.partitions:
        partition.state.apply(Placement(Role.REPLICA, 3, LEADER, (FOLLOWER,), (LEADER, FOLLOWER)))
    return topic, ClusterLinks(lambda: FOLLOWER, trio.current_time, logging.getLogger("test"))


async def _run_followers(broker: Broker, links: ClusterLinks, seconds: float) -> None:
    """This node's followers, started at once, for ``seconds``."""
    async with trio.open_nursery() as nursery:
        broker.changes.notify()
        nursery.start_soon(Followers(broker, FOLLOWER, links).run)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


def _within_a_look(gave_up: float, silent_since: float) -> bool:
    """Given up at the silence watch's first look after ``silent_since`` (to within the
    float error of the clock readings the times are differences of)."""
    return silent_since - 1e-6 <= gave_up <= silent_since + WATCH_INTERVAL + 1e-6


async def test_a_dead_leader_node_is_dialed_once_a_hold_not_once_per_stream(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty partitions follow a leader node that refuses connections: after a failed dial no
    stream dials it for DOWN_HOLD seconds (each stream backs off on its own meanwhile), so it
    is dialed a few times a second, not fifty times each backoff step."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        _, links = _following(broker, 50)
        dialed: list[float] = []

        async def refused(peer: str, link: bytes, timeout: float) -> tuple[trio.abc.Stream, bytes]:
            dialed.append(trio.current_time())
            raise ConnectionRefusedError(111, "Connection refused")

        monkeypatch.setattr(links, "dial", refused)
        await _run_followers(broker, links, 3.0)
    assert 2 <= len(dialed) <= 3.0 / DOWN_HOLD + 2
    assert all(b - a >= DOWN_HOLD for a, b in itertools.pairwise(dialed))


async def test_a_leader_node_not_reached_yet_is_dialed_by_one_stream_first(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fifty partitions follow a leader node whose dials take 50 ms and are refused (a node
    that just died): one stream dials it while the others wait for the outcome, so it is
    dialed once, not fifty times at once, and the failures make one warning a second for
    that node, not one per stream."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        _, links = _following(broker, 50)
        dialed: list[float] = []

        async def refused(peer: str, link: bytes, timeout: float) -> tuple[trio.abc.Stream, bytes]:
            dialed.append(trio.current_time())
            await trio.sleep(0.05)
            raise ConnectionRefusedError(111, "Connection refused")

        monkeypatch.setattr(links, "dial", refused)
        start = trio.current_time()
        with caplog.at_level(logging.WARNING, "nsqd.replication"):
            await _run_followers(broker, links, 3.0)
    assert sum(1 for when in dialed if when - start < DOWN_HOLD) == 1
    assert len(dialed) <= 3.0 / DOWN_HOLD + 2
    warned = [r.getMessage() for r in caplog.records if "following" in r.getMessage()]
    assert 1 <= len(warned) <= 4, warned
    assert "more of its streams failed since the last report" in warned[-1]


async def test_once_one_stream_reached_a_leader_node_the_others_dial_it_together(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first dial to a leader node goes alone; once it connected, the other streams dial
    at once (not one after another)."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        _, links = _following(broker, 50)
        dialed: list[float] = []
        leaders: list[trio.abc.Stream] = []  # kept open: no Welcome comes

        async def connected(
            peer: str, link: bytes, timeout: float
        ) -> tuple[trio.abc.Stream, bytes]:
            dialed.append(trio.current_time())
            await trio.sleep(0.05)
            here, there = trio.testing.memory_stream_pair()
            leaders.append(there)
            return here, b""

        monkeypatch.setattr(links, "dial", connected)
        await _run_followers(broker, links, 1.0)
    assert len(dialed) == 50
    start = dialed[0]
    assert all(start + 0.05 <= when <= start + 0.06 for when in dialed[1:])


async def test_after_a_session_that_held_a_stream_reconnects_at_once_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader node whose streams each hold 6 s and then close (a link that flaps now and
    then): the follower dials again RETRY's first step after each, not after a backoff that
    doubled with every session it ever lost."""
    async with open_broker(BrokerConfig(data_path=tmp_path), VirtualClock()) as broker:
        _, links = _following(broker, 1)
        dialed: list[float] = []
        closed: list[float] = []

        async def leader(there: trio.abc.Stream) -> None:
            reader = FrameReader(there, FollowerFrameDecoder())
            assert isinstance(await reader.next(), Hello)
            await there.send_all(encode(Welcome(3, 0, 0)))
            for _ in range(6):
                await trio.sleep(1.0)
                await there.send_all(encode(HighWatermark(3, 0)))
            closed.append(trio.current_time())
            await there.aclose()

        async with trio.open_nursery() as nursery:

            async def dial(peer: str, link: bytes, timeout: float) -> tuple[trio.abc.Stream, bytes]:
                dialed.append(trio.current_time())
                here, there = trio.testing.memory_stream_pair()
                nursery.start_soon(leader, there)
                return here, b""

            monkeypatch.setattr(links, "dial", dial)
            await _run_followers(broker, links, 45.0)
            nursery.cancel_scope.cancel()
    assert len(closed) >= 5
    waits = [dial_at - close_at for close_at, dial_at in zip(closed, dialed[1:], strict=False)]
    assert all(0 < wait <= RETRY[0] + 0.01 for wait in waits), waits
