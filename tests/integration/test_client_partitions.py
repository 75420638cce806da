"""pnsq's partition-aware client against a real pnsq nsqd: keyed/round-robin publishing, one
connection per partition, ordered consumption, tracing, replay, and the blocking client."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from pnsq.client import Message, NsqError, open_consumer, open_producer, partition_for_key
from pnsq.client.blocking import BlockingClient
from protocol.commands import Pub
from protocol.consume import ConsumeStart, StartKind
from tests.daemons import Daemon, pnsq_nsqd

pytestmark = pytest.mark.integration

PARTITIONS = 4
TIMEOUT = 20.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = pnsq_nsqd(tmp_path / "data", f"--default-partitions={PARTITIONS}").start()
    try:
        yield d
    finally:
        d.stop()


def post(daemon: Daemon, path: str, body: bytes = b"", **params: object) -> tuple[int, bytes]:
    url = f"http://{daemon.http_address}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, method="POST")) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def partition_bodies(daemon: Daemon, topic: str) -> dict[int, list[bytes]]:
    """Every partition's bodies in log order, read back with the range read."""
    out: dict[int, list[bytes]] = {}
    with BlockingClient(http_address=daemon.http_address) as nsq:
        for info in nsq.partitions(topic).partitions:
            batch = nsq.read_range(topic, info.partition, info.earliest, 10_000)
            out[info.partition] = [r.body for r in batch.records]
    return out


async def test_keyed_publish_lands_on_the_murmur3_partition(daemon: Daemon) -> None:
    keys = [f"user-{i}" for i in range(40)]
    with trio.fail_after(TIMEOUT):
        async with open_producer(daemon.tcp_address, http_address=daemon.http_address) as p:
            route = await p.partitions("keyed")
            assert route is None  # not created yet: nothing to route a key with
            await p.publish("keyed", b"create")  # unkeyed: nsqd picks, creating the topic
            for key in keys:
                await p.publish("keyed", key.encode(), key=key)
            await p.mpublish("keyed", [f"{k}|m".encode() for k in keys], keys=keys)
            await p.mpublish("keyed", [b"user-3|a", b"user-3|b"], key="user-3")
    placed = partition_bodies(daemon, "keyed")
    for number, bodies in placed.items():
        for body in bodies:
            if body != b"create":
                key = body.split(b"|")[0].decode()
                assert partition_for_key(key, PARTITIONS) == number, body
    assert sum(len(b) for b in placed.values()) == 1 + 2 * len(keys) + 2
    p3 = placed[partition_for_key("user-3", PARTITIONS)]
    assert p3.index(b"user-3|a") == p3.index(b"user-3|b") - 1


async def test_unkeyed_publish_round_robins(daemon: Daemon) -> None:
    post(daemon, "/topic/create", topic="rr")
    with trio.fail_after(TIMEOUT):
        async with open_producer(daemon.tcp_address, http_address=daemon.http_address) as p:
            for i in range(8):
                await p.publish("rr", b"%d" % i)
            await p.publish("rr", b"explicit", partition=3)
            message_id, offset = await p.publish_traced("rr", b"traced", 5, partition=2)
    assert message_id[:8] == ((2 << 50) | (offset + 1)).to_bytes(8, "big")
    placed = partition_bodies(daemon, "rr")
    assert placed == {
        0: [b"0", b"4"],
        1: [b"1", b"5"],
        2: [b"2", b"6", b"traced"],
        3: [b"3", b"7", b"explicit"],
    }


async def test_blocking_client_routes_like_the_trio_producer(daemon: Daemon) -> None:
    keys = [f"k{i}" for i in range(30)]
    post(daemon, "/topic/create", topic="blk")
    with BlockingClient(daemon.tcp_address, daemon.http_address) as nsq:
        for key in keys:
            nsq.publish("blk", key.encode(), key=key)
        nsq.mpublish("blk", [k.encode() for k in keys], keys=keys)
        message_id, offset = nsq.publish_traced("blk", b"t", 99, key="k1")
    assert message_id[8:] == (99).to_bytes(8, "big")
    placed = partition_bodies(daemon, "blk")
    for number, bodies in placed.items():
        for body in bodies:
            if body != b"t":
                assert partition_for_key(body, PARTITIONS) == number
    assert placed[partition_for_key("k1", PARTITIONS)][offset] == b"t"


async def test_consumer_has_one_connection_per_partition(daemon: Daemon) -> None:
    post(daemon, "/topic/create", topic="fan")
    bodies = {b"%d" % i for i in range(100)}
    with trio.fail_after(TIMEOUT):
        async with open_producer(daemon.tcp_address, http_address=daemon.http_address) as p:
            for body in sorted(bodies):
                await p.publish("fan", body)
        async with open_consumer(
            daemon.tcp_address, "fan", "ch", http_address=daemon.http_address, max_in_flight=8
        ) as consumer:
            assert [s.partition for s in consumer.subscriptions] == [0, 1, 2, 3]
            assert len({id(s.connection) for s in consumer.subscriptions}) == PARTITIONS
            seen: dict[int, int] = defaultdict(int)
            received = set()
            async for message in consumer:
                assert message.offset is None  # plain SUB: no detail block
                seen[message.partition] += 1
                received.add(message.body)
                await message.finish()
                if len(received) == len(bodies):
                    break
    assert received == bodies
    assert dict(seen) == {0: 25, 1: 25, 2: 25, 3: 25}
    # the FINs queued just before the consumer closed were flushed, not dropped
    url = f"http://{daemon.http_address}/stats?format=json&topic=fan&channel=ch"
    with urllib.request.urlopen(url, timeout=5) as r:
        channel = json.loads(r.read())["topics"][0]["channels"][0]
    assert (channel["in_flight_count"], channel["depth"]) == (0, 0)


async def test_handler_failures_are_requeued_with_backoff(daemon: Daemon) -> None:
    """A failing handler gets the message again (REQ), after a pause in delivery (RDY 0, 1)."""
    attempts: dict[bytes, list[int]] = defaultdict(list)
    handled: set[bytes] = set()
    done = trio.Event()

    async def handler(message: Message) -> None:
        attempts[message.body].append(message.attempts)
        if message.attempts == 1 and message.body.endswith(b"0"):
            raise RuntimeError("first try fails")
        handled.add(message.body)
        if len(handled) == 20:
            done.set()

    with trio.fail_after(TIMEOUT):
        async with open_producer(daemon.tcp_address) as p:
            await p.mpublish("hfail", [b"%d" % i for i in range(20)], partition=0)
        async with (
            open_consumer(
                daemon.tcp_address, "hfail", "ch", partition=0, max_in_flight=5
            ) as consumer,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(lambda: consumer.run(handler, requeue_delay_ms=50, backoff=0.05))
            await done.wait()
            nursery.cancel_scope.cancel()
    assert attempts[b"10"] == [1, 2]
    assert attempts[b"7"] == [1]


# ---------------------------------------------------------------- youzan's server features


def create_ordered_topic(daemon: Daemon, topic: str, partitions: int = PARTITIONS) -> None:
    status, body = post(
        daemon, "/topic/create", topic=topic, partition_num=partitions, orderedmulti="true"
    )
    assert status == 200, body


async def test_ordered_scenario_keeps_per_key_order(daemon: Daemon) -> None:
    """20,000 messages over 500 keys, keyed publish, ordered consumer: per key exactly the
    publish order, and each partition's offsets one after the other."""
    topic, keys, per_key = "ordered", [f"key-{i}" for i in range(500)], 40
    create_ordered_topic(daemon, topic)
    with trio.fail_after(120):
        async with open_producer(daemon.tcp_address, http_address=daemon.http_address) as p:
            route = await p.partitions(topic)
            assert route is not None
            assert (route.partition_num, route.ordered) == (PARTITIONS, True)
            with pytest.raises(NsqError) as refused:
                await p.connection.command(Pub(topic, b"no partition"))
            assert refused.value.code == "E_BAD_PARTITION"

            async def publish_key(key: str) -> None:
                for seq in range(per_key):
                    await p.publish(topic, f"{key}:{seq}".encode(), key=key)

            async with trio.open_nursery() as nursery:
                for key in keys:
                    nursery.start_soon(publish_key, key)

        with pytest.raises(NsqError) as plain:
            async with open_consumer(daemon.tcp_address, topic, "ch", partition=0):
                pass
        assert plain.value.code == "E_SUB_ORDER_IS_MUST"

        order: dict[str, list[int]] = defaultdict(list)
        offsets: dict[int, list[int]] = defaultdict(list)
        total = len(keys) * per_key
        async with open_consumer(
            daemon.tcp_address,
            topic,
            "ch",
            http_address=daemon.http_address,
            ordered=True,
            max_in_flight=100,
        ) as consumer:
            count = 0
            async for message in consumer:
                key, seq = message.body.decode().split(":")
                order[key].append(int(seq))
                assert message.offset is not None
                offsets[message.partition].append(message.offset)
                assert partition_for_key(key, PARTITIONS) == message.partition
                await message.finish()
                count += 1
                if count == total:
                    break
    assert all(order[key] == list(range(per_key)) for key in keys)
    for seen in offsets.values():
        assert seen == list(range(seen[0], seen[0] + len(seen)))


async def test_trace_scenario(daemon: Daemon) -> None:
    trace_id = 0xFEDC_BA98_7654_3210
    with trio.fail_after(TIMEOUT):
        async with open_producer(daemon.tcp_address, http_address=daemon.http_address) as p:
            await p.publish("traced", b"first")
            message_id, offset = await p.publish_traced("traced", b"body", trace_id, key="k")
        assert message_id[8:] == trace_id.to_bytes(8, "big")
        number = partition_for_key("k", PARTITIONS)
        async with open_consumer(
            daemon.tcp_address,
            "traced",
            "ch",
            partition=number,
            start=ConsumeStart(StartKind.VIRTUAL_QUEUE, offset),
        ) as consumer:
            message = await consumer.receive()
            await message.finish()
    assert message.id == message_id
    assert message.trace_id == trace_id
    assert message.offset == offset
    assert message.body == b"body"


async def test_replay_from_an_offset(daemon: Daemon) -> None:
    """SUB_ADVANCED with a start, and an ordered replay set through /channel/setoffset."""
    create_ordered_topic(daemon, "replay", 1)
    with trio.fail_after(TIMEOUT):
        async with open_producer(daemon.tcp_address, http_address=daemon.http_address) as p:
            await p.mpublish("replay", [b"%d" % i for i in range(10)])
            await p.mpublish("plain-replay", [b"%d" % i for i in range(10)], partition=1)
        async with open_consumer(
            daemon.tcp_address,
            "replay",
            "ch",
            http_address=daemon.http_address,
            ordered=True,
            start="virtual_queue:6",
        ) as consumer:
            got = []
            async for message in consumer:
                got.append((message.offset, message.body))
                await message.finish()
                if len(got) == 4:
                    break
        assert got == [(6, b"6"), (7, b"7"), (8, b"8"), (9, b"9")]
        async with open_consumer(
            daemon.tcp_address, "plain-replay", "ch", partition=1, start="msgcount:8"
        ) as consumer:
            first = await consumer.receive()
            await first.finish()
    assert (first.offset, first.body) == (8, b"8")


def test_partitions_document_shows_the_ordered_flag(daemon: Daemon) -> None:
    create_ordered_topic(daemon, "flags", 2)
    with urllib.request.urlopen(
        f"http://{daemon.http_address}/partitions?topic=flags", timeout=5
    ) as r:
        doc = json.loads(r.read())
    assert (doc["partition_num"], doc["ordered"]) == (2, True)
