"""Records appended while a leader's stream to a follower waits go from the appending task
itself (nsqd/replication/stream.py, ``FollowerStream.push_appended``): over a socket, to a
follower in sync, the Append frame is in the socket before the publish returns and the stream's
task is not woken; a frame the socket takes in part is finished by the task, in order; a
follower catching up, or a stream without a socket of its own (TLS, here a memory stream),
gets the records from the task as before. Real socket pairs, real broker; a clock that stands
still (no tick wakes a stream), so every wake-up is an append's."""

from __future__ import annotations

import logging
import select
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import nsqd.replication.stream as stream_module
from nsqd.broker import Broker, BrokerConfig, NewRecord, StorageError, open_broker
from nsqd.broker.copying import Batch
from nsqd.core.partition_state import Placement, Role
from nsqd.replication.frames import FrameReader
from nsqd.replication.leader import serve_follower
from pnsq._netio.cluster_link import ClusterLinks
from pnsq._netio.plain_stream import PlainSocketStream
from protocol.replication import Append, Hello, LeaderFrame, Welcome
from protocol.replication_decoder import LeaderFrameDecoder
from protocol.replication_encoder import encode

LEADER, FOLLOWER, OTHER = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


def _records(count: int, size: int = 100) -> list[NewRecord]:
    return [NewRecord(i, b"%06d" % i + b"x" * (size - 6)) for i in range(count)]


class _Follower:
    """A follower's end of one stream: says Hello, then collects the Append frames."""

    def __init__(self, stream: trio.abc.Stream, node: str) -> None:
        self.stream = stream
        self.node = node
        self.appends: list[Append] = []
        self.welcomed = trio.Event()
        self.changed = trio.Event()

    async def run(self) -> None:
        await self.stream.send_all(encode(Hello(self.node, "t", 0, 3, 0, 0, 0)))
        reader = FrameReader(self.stream, LeaderFrameDecoder())
        while True:
            frame: LeaderFrame = await reader.next()
            if isinstance(frame, Welcome):
                self.welcomed.set()
            elif isinstance(frame, Append):
                self.appends.append(frame)
                self.changed.set()
                self.changed = trio.Event()

    @property
    def received(self) -> int:
        return sum(frame.count for frame in self.appends)

    async def wait_for(self, count: int) -> None:
        while self.received < count:
            await self.changed.wait()


def _pending(stream: PlainSocketStream) -> bool:
    """Whether bytes wait in ``stream``'s socket (looked at without reading them)."""
    readable, _, _ = select.select([stream.socket.fileno()], [], [], 0)
    return bool(readable)


def _socket_pair(buffer: int | None = None) -> tuple[PlainSocketStream, PlainSocketStream]:
    """A connected pair (leader's end, follower's end); ``buffer``: small socket buffers."""
    a, b = trio.socket.socketpair()
    if buffer is not None:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    return PlainSocketStream(a), PlainSocketStream(b)


@asynccontextmanager
async def _leading(
    tmp_path: Path,
    streams: dict[str, tuple[trio.abc.Stream, trio.abc.Stream]],
    isr: tuple[str, ...],
) -> AsyncIterator[tuple[Broker, dict[str, _Follower]]]:
    """A broker leading partition 0 of topic ``t`` (epoch 3) with followers ``streams`` (node
    -> (leader's end, follower's end)) of which ``isr`` are in sync; each stream has sent its
    first batch (one record), so what follows is what the test publishes."""
    async with open_broker(BrokerConfig(data_path=tmp_path)) as broker:
        topic = broker.get_or_create_topic("t", 1)
        topic.partitions[0].state.apply(
            Placement(Role.LEADER, 3, LEADER, tuple(streams), (LEADER, *isr))
        )
        links = ClusterLinks(lambda: LEADER, trio.current_time, logging.getLogger("test"))
        followers = {node: _Follower(there, node) for node, (_, there) in streams.items()}
        async with trio.open_nursery() as nursery:
            for node, (here, _) in streams.items():
                nursery.start_soon(partial(serve_follower, broker, here, "test", b"", links=links))
                nursery.start_soon(followers[node].run)
                await followers[node].welcomed.wait()
            broker.publish("t", _records(1), 0)
            for follower in followers.values():
                await follower.wait_for(1)
            await trio.testing.wait_all_tasks_blocked()
            yield broker, followers
            nursery.cancel_scope.cancel()


def _counting_runs(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the times a stream's task looks for records to send (its loop turns)."""
    calls = 0
    real = stream_module.read_for_follower

    def counted(*args: Any, **kwargs: Any) -> Batch:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(stream_module, "read_for_follower", counted)
    return lambda: calls


async def test_records_appended_while_the_stream_waits_are_in_the_socket_when_publish_returns(
    tmp_path: Path, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = _socket_pair()
    async with _leading(tmp_path, {FOLLOWER: (here, there)}, (FOLLOWER,)) as (broker, followers):
        looks = _counting_runs(monkeypatch)
        for round_ in range(5):
            assert not _pending(there)
            broker.publish("t", _records(10), 0)  # no checkpoint: the push happened in here
            assert _pending(there), round_
            await followers[FOLLOWER].wait_for(1 + 10 * (round_ + 1))
        await trio.testing.wait_all_tasks_blocked()
        assert looks() == 5  # one push each: the stream's task never woke


async def test_a_frame_the_socket_takes_in_part_is_finished_by_the_task_in_order(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    here, there = _socket_pair(buffer=4096)
    async with _leading(tmp_path, {FOLLOWER: (here, there)}, (FOLLOWER,)) as (broker, followers):
        follower = followers[FOLLOWER]
        for _ in range(20):
            broker.publish("t", _records(200, 1000), 0)  # ~200 kB each: far over the buffers
        await follower.wait_for(1 + 20 * 200)
        offsets = [frame.base_offset for frame in follower.appends]
        ends = [frame.base_offset + frame.count for frame in follower.appends]
        assert offsets[1:] == ends[:-1]  # consecutive, no frame torn or repeated
        assert ends[-1] == 1 + 20 * 200


async def test_a_follower_catching_up_gets_the_records_from_the_task(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    here, there = _socket_pair()
    async with _leading(tmp_path, {FOLLOWER: (here, there)}, ()) as (broker, followers):
        broker.publish("t", _records(10), 0)
        assert not _pending(there)  # not pushed: at the catch-up rate, by the task
        await followers[FOLLOWER].wait_for(11)


async def test_a_stream_without_a_socket_of_its_own_still_wakes_beside_a_pushed_one(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Two followers of one partition, one over a socket (pushed), one over a stream with no
    push (TLS in production): both get every record at once."""
    plain = _socket_pair()
    memory = trio.testing.memory_stream_pair()
    streams = {FOLLOWER: plain, OTHER: memory}
    async with _leading(tmp_path, streams, (FOLLOWER, OTHER)) as (broker, followers):
        broker.publish("t", _records(10), 0)
        await trio.testing.wait_all_tasks_blocked()  # no tick comes: the clock stands still
        assert followers[OTHER].received == 11
        assert followers[FOLLOWER].received == 11


async def test_a_push_that_cannot_read_the_records_leaves_them_to_the_task(
    tmp_path: Path, mock_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publish that appended them is not failed by the push's read: the task reads again
    (where a read error is handled as it always was)."""
    here, there = _socket_pair()
    async with _leading(tmp_path, {FOLLOWER: (here, there)}, (FOLLOWER,)) as (broker, followers):
        real = stream_module.read_for_follower
        failures = [StorageError("read failed")]

        def flaky(*args: Any, **kwargs: Any) -> Batch:
            if failures:
                raise failures.pop()
            return real(*args, **kwargs)

        monkeypatch.setattr(stream_module, "read_for_follower", flaky)
        broker.publish("t", _records(10), 0)  # the push's read fails: no exception here
        assert not failures
        await followers[FOLLOWER].wait_for(11)
